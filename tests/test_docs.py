"""The README is a front page and the documentation holds together (issue 23, items 5 and 6):
the README stays under 10,000 bytes; every relative link of README.md and docs/*.md reaches a
file and every anchor into a page exists; docs/method.md has the points 1..13 the code cites
("method point N") and the advice names (source "method N"); the README's set-up commands are
the ones .ci/run runs."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

from cudadiag import knowledge
from cudadiag.knowledge import Advice

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
METHOD = DOCS / "method.md"
# Written on other branches: a link to them is allowed while they are absent here, and only then.
WRITTEN_ELSEWHERE = frozenset({DOCS / "reference.md", DOCS / "log.md"})
README_LIMIT = 10_000

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
EXPLICIT_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def heading_slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return set(EXPLICIT_ANCHOR.findall(text)) | {heading_slug(h) for h in HEADING.findall(text)}


def broken_links(page: Path, written_elsewhere: frozenset[Path] = WRITTEN_ELSEWHERE) -> list[str]:
    """Each relative link of `page` whose file is missing or whose `#anchor` that file lacks."""
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            if resolved not in written_elsewhere:
                broken.append(f"{page.name}: {target} (no such file)")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved):
            broken.append(f"{page.name}: {target} (no such anchor)")
    return broken


def method_points() -> list[int]:
    """The points of docs/method.md: each `<a id="point-N"></a>` right above `## N. Title`."""
    found = re.findall(r'<a id="point-(\d+)"></a>\n## (\d+)\. \S', METHOD.read_text())
    assert all(anchor == number for anchor, number in found), found
    return [int(number) for number, _ in found]


def advice_rows(value: object, seen: set[int]) -> Iterator[Advice]:
    """Every Advice reachable from `value` through containers and dataclass fields."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, Advice):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from advice_rows(item, seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from advice_rows(item, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from advice_rows(getattr(value, f.name), seen)


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)\n```", text, re.MULTILINE | re.DOTALL)


def test_the_readme_is_a_front_page_under_ten_thousand_bytes():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes: move detail to docs/<feature>.md"


def test_every_relative_link_reaches_a_file_and_every_anchor_exists():
    broken = [line for page in pages() for line in broken_links(page)]
    assert not broken, "\n".join(broken)


def test_the_link_check_reports_a_missing_page_and_a_missing_anchor(tmp_path):
    (tmp_path / "method.md").write_text('<a id="point-1"></a>\n## 1. Keep the first failure\n')
    page = tmp_path / "page.md"
    page.write_text("[ok](method.md#point-1) [gone](gone.md) [no anchor](method.md#point-14)\n"
                    "[heading](method.md#1-keep-the-first-failure) [elsewhere](later.md)\n")
    assert broken_links(page, frozenset({tmp_path / "later.md"})) == [
        "page.md: gone.md (no such file)", "page.md: method.md#point-14 (no such anchor)"]


def test_every_page_of_docs_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve()
              for target in LINK.findall(README.read_text())}
    orphans = [page.name for page in DOCS.glob("*.md") if page not in linked]
    assert not orphans, f"one line per feature in the README: {orphans}"


def test_the_pages_written_elsewhere_are_the_only_links_allowed_to_be_missing():
    linked = {(page.parent / target.partition("#")[0]).resolve()
              for page in pages() for target in LINK.findall(page.read_text())
              if not re.match(r"[a-z]+:", target) and not target.startswith("#")}
    missing = {path for path in linked if not path.exists()}
    assert missing <= WRITTEN_ELSEWHERE, missing
    assert DOCS / "reference.md" in linked, "the README points to the generated reference"


def test_the_method_has_points_one_to_thirteen_each_with_its_anchor():
    assert method_points() == list(range(1, knowledge.METHOD_POINTS + 1))
    assert "Japanese" in METHOD.read_text(), "the method names its source document"


def test_every_method_point_the_code_cites_is_a_point_of_the_method():
    points = set(method_points())
    cited = {(path.relative_to(ROOT), int(n))
             for path in sorted((ROOT / "src").rglob("*.py"))
             for n in re.findall(r"method points? (\d+)", path.read_text())}
    assert cited, "the code cites method points"
    assert not {(path, n) for path, n in cited if n not in points}, cited


def test_every_advice_source_method_n_is_a_point_of_the_method():
    points = set(method_points())
    rows = list(advice_rows([getattr(knowledge, name) for name in dir(knowledge)], set()))
    assert len(rows) > 50, "the walk reaches the advice tables"
    named = {(row.text, source) for row in rows for source in row.sources
             if source.startswith("method")}
    assert named, "advice names method points"
    unknown = {(text, source) for text, source in named
               if not (m := re.fullmatch(r"method (\d+)", source)) or int(m.group(1)) not in points}
    assert not unknown, unknown


def test_the_readme_set_up_commands_are_those_ci_runs():
    demo, tests = bash_blocks(README.read_text())
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci_lines, ".ci/run runs the README's test command verbatim"
    test_steps = tests.split(" && ")
    environment = test_steps[test_steps.index("python3 -m venv .venv"):-2]
    assert test_steps[-2:] == ['pip install -e ".[test,transformers,lightning]"',
                               "python -m pytest -n auto --dist loadfile"]
    # the demo sets up the same environment, without the browser and the test extra
    assert demo.split(" && ") == [*environment, "pip install -e .", "cudadiag demo"]
