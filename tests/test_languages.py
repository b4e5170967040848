"""The language cudadiag writes in: the order it is chosen in, the commands that choose it and
say it, and the catalogue that holds every message in each language (docs/languages.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudadiag import i18n
from cudadiag.diagnose import incident_from_exception
from cudadiag.i18n import audit
from cudadiag.i18n.compile_catalogue import compile_all
from cudadiag.i18n.language import choose
from cudadiag.incident import RunInfo
from read_back import read_back_in_japanese

LOCALE = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def _env(**values: str) -> dict[str, str]:
    return {k: v for k, v in values.items() if v}


def test_an_explicit_choice_comes_before_every_setting(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"language": "en"}))
    i18n.choose("ja")
    choice = choose(environ=_env(CUDADIAG_LANG="en", LANG="en_US.UTF-8"), home=tmp_path)
    assert (choice.language, choice.kind) == ("ja", "explicit")


def test_cudadiag_lang_comes_before_the_config_and_the_locale(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"language": "en"}))
    choice = choose(environ=_env(CUDADIAG_LANG="ja", LANG="en_US.UTF-8"), home=tmp_path)
    assert (choice.language, choice.detail) == ("ja", "CUDADIAG_LANG=ja")


def test_the_config_comes_before_jupyterlab_and_the_locale(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"language": "ja"}))
    settings = _jupyterlab_says(tmp_path, "en_US")
    choice = choose(environ=_env(LANG="en_US.UTF-8", JUPYTERLAB_SETTINGS_DIR=str(settings)),
                    home=tmp_path, in_kernel=True)
    assert (choice.language, choice.kind) == ("ja", "config")


def test_jupyterlabs_language_counts_in_a_kernel_only(tmp_path):
    settings = _jupyterlab_says(tmp_path, "ja_JP")
    env = _env(LANG="en_US.UTF-8", JUPYTERLAB_SETTINGS_DIR=str(settings))
    in_kernel = choose(environ=env, home=tmp_path, in_kernel=True)
    in_terminal = choose(environ=env, home=tmp_path, in_kernel=False)
    assert (in_kernel.language, in_kernel.kind) == ("ja", "jupyterlab")
    assert (in_terminal.language, in_terminal.kind) == ("en", "locale")


def test_jupyterlabs_default_language_leaves_the_choice_to_the_locale(tmp_path):
    settings = _jupyterlab_says(tmp_path, "default")
    choice = choose(environ=_env(LANG="ja_JP.UTF-8", JUPYTERLAB_SETTINGS_DIR=str(settings)),
                    home=tmp_path, in_kernel=True)
    assert (choice.language, choice.detail) == ("ja", "LANG=ja_JP.UTF-8")


@pytest.mark.parametrize(("settings", "expected"), [
    ({"LANGUAGE": "fr:ja", "LANG": "en_US.UTF-8"}, ("ja", "LANGUAGE=fr:ja")),
    ({"LC_ALL": "ja_JP.UTF-8", "LANG": "en_US.UTF-8"}, ("ja", "LC_ALL=ja_JP.UTF-8")),
    ({"LC_MESSAGES": "ja_JP.UTF-8", "LANG": "C.UTF-8"}, ("ja", "LC_MESSAGES=ja_JP.UTF-8")),
    ({"LANG": "ja_JP.UTF-8"}, ("ja", "LANG=ja_JP.UTF-8")),
    ({"LC_ALL": "C.UTF-8", "LANG": "ja_JP.UTF-8"}, ("en", "LC_ALL=C.UTF-8")),
    ({"LANG": "POSIX"}, ("en", "LANG=POSIX")),
    ({"LANG": "fr_FR.UTF-8"}, ("en", "LANG=fr_FR.UTF-8")),
])
def test_the_locale_is_read_in_gettexts_order(tmp_path, settings, expected):
    choice = choose(environ=settings, home=tmp_path)
    assert (choice.language, choice.detail) == expected


def test_with_nothing_set_cudadiag_writes_english(tmp_path):
    choice = choose(environ={}, home=tmp_path)
    assert (choice.language, choice.kind) == ("en", "default")


def test_a_language_cudadiag_does_not_speak_is_passed_over_and_said(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    choice = choose(environ=_env(CUDADIAG_LANG="fr", LANG="ja_JP.UTF-8"), home=tmp_path)
    assert choice.language == "ja"
    assert choice.skipped[0] == "CUDADIAG_LANG=fr"
    assert "config.json (JSONDecodeError)" in choice.skipped[1]
    assert "読み飛ばした設定（cudadiag が対応していない言語、または読めなかったファイル）: " \
           "CUDADIAG_LANG=fr" in i18n.describe(choice)


def test_choosing_an_unknown_language_says_which_there_are():
    with pytest.raises(ValueError, match="'fr' is not a language cudadiag speaks; choose one "
                                         "of en, ja"):
        i18n.choose("fr")


def test_a_kept_sentence_is_written_again_in_the_readers_language(tmp_path):
    """A record keeps the id and arguments of its sentences: read back in another process,
    it shows in Japanese though it was filed in English."""
    incident = incident_from_exception(
        RuntimeError("CUDA error: device-side assert triggered"), RunInfo(mode="kernel"))
    incident.diagnosis.first_checks = [i18n.msg(
        "{language!r} is not a language cudadiag speaks; choose one of {languages}, or auto "
        "(the order of docs/languages.md).", language="fr", languages="en, ja")]
    assert "texts" in incident.to_dict()
    (shown,) = read_back_in_japanese(incident, tmp_path, "i18n.localize(d.first_checks[0])")
    assert shown == ("'fr' は cudadiag が対応している言語ではありません。en, ja のどれか、"
                             "または auto（docs/languages.md の順で決まります）を選んでください。")


def test_english_output_is_the_message_itself():
    assert i18n.localize(i18n.msg("cudadiag writes in {name} ({code}) here.", name="English",
                                  code="en")) == "cudadiag writes in English (en) here."


def test_cudadiag_lang_alone_says_which_language_holds_and_why():
    said = subprocess.run([sys.executable, "-m", "cudadiag.cli", "--lang"], text=True,
                          capture_output=True, env={**os.environ, "LANG": "ja_JP.UTF-8"})
    assert said.returncode == 0
    assert said.stdout.strip() == ("cudadiag の表示言語は 日本語（ja）です。ロケール"
                                   "（LANG=ja_JP.UTF-8）によります。")


def test_cudadiag_lang_with_an_unknown_language_fails_with_the_choices():
    said = subprocess.run([sys.executable, "-m", "cudadiag.cli", "--lang", "xx", "incidents"],
                          text=True, capture_output=True)
    assert said.returncode == 2
    assert "'xx' is not a language cudadiag speaks; choose one of en, ja" in said.stderr


def test_the_percent_cudadiag_lang_magic_chooses_and_says(shell):
    from IPython.utils.capture import capture_output

    with capture_output() as said:
        shell.run_line_magic("cudadiag", "lang ja")
    assert said.stdout.strip() == ("cudadiag の表示言語は 日本語（ja）です。このセッションで"
                                   "選ばれました。")
    with capture_output() as said:
        shell.run_line_magic("cudadiag", "lang auto")
    assert said.stdout.strip() == ("cudadiag writes in English (en): the locale, "
                                   "LANG=C.UTF-8.")


def test_every_message_has_a_translation_with_the_same_fields_and_the_glossarys_terms():
    for language in audit.languages():
        assert audit.audit(language).problems() == [], language


def test_the_catalogue_compiles_to_what_gettext_reads(tmp_path):
    import gettext
    import shutil

    shutil.copytree(audit.PACKAGE / "locale", tmp_path / "locale")
    written = compile_all(tmp_path / "locale")
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "locale/ja/LC_MESSAGES/cudadiag.mo"]
    with written[0].open("rb") as handle:
        catalogue = gettext.GNUTranslations(handle)
    assert catalogue.gettext("cudadiag writes in {name} ({code}) here.") == (
        "ここでの cudadiag の表示言語は {name}（{code}）です。")


def _jupyterlab_says(folder: Path, locale: str) -> Path:
    settings = folder / "lab-settings"
    path = settings / "@jupyterlab" / "translation-extension" / "plugin.jupyterlab-settings"
    path.parent.mkdir(parents=True)
    path.write_text(f'{{\n    // Language\n    "locale": "{locale}"\n}}\n')
    return settings
