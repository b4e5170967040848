"""The build step pyproject.toml cannot say: compile the message catalogue (the `.po` parts
under src/cudadiag/locale, with Babel) into the `.mo` files gettext reads, in the source
tree (an editable install reads them there) and in the built package."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LOCALE = Path(__file__).resolve().parent / "src" / "cudadiag" / "locale"


def _compiler():  # type: ignore[no-untyped-def]
    """compile_catalogue.py, loaded by its path: importing cudadiag would need its
    dependencies, which a build does not have."""
    path = LOCALE.parent / "i18n" / "compile_catalogue.py"
    spec = importlib.util.spec_from_file_location("cudadiag_compile_catalogue", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithCatalogue(build_py):
    """build_py, after compiling the catalogue."""

    def run(self) -> None:
        written = _compiler().compile_all(LOCALE)
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for mo in written:
            target = Path(self.build_lib) / "cudadiag" / "locale" / mo.relative_to(LOCALE)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(mo, target)


setup(cmdclass={"build_py": BuildWithCatalogue})
