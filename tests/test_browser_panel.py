"""The demo notebook in JupyterLab, in Debian's Chromium driven by playwright: run all cells,
wait for the panel, read it, switch sections, take a screenshot.

Needs /usr/bin/chromium (`.ci/run` installs Debian's `chromium`); never `playwright install`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason="needs Debian's chromium at /usr/bin/chromium"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path, cudadiag_home):
    """A JupyterLab server on 127.0.0.1 with a token and a temporary root holding the demo."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(ROOT / "notebooks" / "device_assert_demo.ipynb", root / "demo.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.expose_app_in_browser=True"],
        stdout=log, stderr=subprocess.STDOUT, env={
            **os.environ, "CUDADIAG_HOME": str(cudadiag_home),
            **{var: str(tmp_path / var.lower()) for var in (
                "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR")},
        },
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("JupyterLab did not start: "
                                   + (tmp_path / "lab.log").read_text()[-2000:]) from None
            time.sleep(0.5)
    yield base, token
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def test_panel_in_jupyterlab(lab):
    from playwright.sync_api import expect, sync_playwright

    base, token = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            panel = _run_all_cells(page, base, token)
            expect(panel).to_contain_text("device_assert")
            expect(panel.locator(".cd-restart")).to_contain_text("Restart required")
            expect(panel.locator(".cd-noticed")).to_contain_text("not necessarily the cause")

            panel.get_by_role("tab", name="Batch").click()
            table = panel.locator(".cd-batch-table")
            expect(table).to_be_visible()
            expect(table).to_contain_text("batch[1]")
            expect(panel).to_contain_text("last incomplete batch")
            panel.screenshot(path=str(ARTIFACTS / "panel.png"))

            panel.get_by_role("tab", name="Next checks").click()
            expect(panel.locator(".cd-avoid")).to_be_visible()
            expect(panel.locator(".cd-avoid")).to_contain_text("Do not conclude")
            panel.screenshot(path=str(ARTIFACTS / "panel-checks.png"))

            _run_below_the_failure(page)
            _compare_validate_and_picture(page)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "panel-failure.png"))
            raise
        finally:
            browser.close()


def _run_all_cells(page, base: str, token: str):
    """Open the demo, run all its cells; return the first panel, once it is visible."""
    from playwright.sync_api import expect

    page.goto(f"{base}/lab/tree/demo.ipynb?token={token}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    # the kernel must be connected before "Run All Cells", or nothing runs
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    news = page.get_by_role("button", name="No", exact=True)
    if news.is_visible():
        news.click()  # JupyterLab's "notify me about news?" toast covers the panel
    panel = page.locator(".cudadiag-panel").first
    expect(panel).to_be_visible(timeout=90_000)
    return panel


def _run_below_the_failure(page) -> None:
    """"Run All" stops at the failing cell (and the next one fails too: the context is
    gone): run the cells from the isolated re-run down (isolate, compare, validate, panel)."""
    from playwright.sync_api import expect

    # the panel comes before the traceback: the failing cell has ended only once its folded
    # traceback is shown and the kernel is idle (cells sent before are aborted with it)
    expect(page.get_by_text("Traceback folded by cudadiag").first).to_be_visible(
        timeout=60_000)
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
    # the cell whose code is the re-run (a panel's tabs may quote the same command)
    page.locator(".jp-CodeCell").filter(has=page.locator(
        ".jp-InputArea", has_text="%cuda_isolate --batch last")).first.click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run Selected Cell and All Below", exact=True).click()


def _compare_validate_and_picture(page) -> None:
    """The comparison table, the validation report and the Batch picture, read in the page."""
    from playwright.sync_api import expect

    compare = page.locator(".cudadiag-compare").first
    expect(compare).to_be_visible(timeout=240_000)
    expect(compare).to_contain_text("failed: device_assert at aten::nll_loss_forward")
    import torch

    expect(compare).to_contain_text(
        "torch.backends.cudnn.enabled = False" if torch.backends.cudnn.is_available()
        else "not applicable: this PyTorch build has no cuDNN")
    compare.screenshot(path=str(ARTIFACTS / "compare.png"))
    validate = page.locator(".cudadiag-validate").first
    expect(validate).to_be_visible(timeout=240_000)
    expect(validate).to_contain_text("fails at step 3")
    expect(validate).to_contain_text("24 of 30 samples processed")
    validate.screenshot(path=str(ARTIFACTS / "validate.png"))

    panel = page.locator(".cudadiag-panel").last  # %cudadiag panel: the isolated incident
    expect(panel).to_contain_text("target 4 at position 2", timeout=120_000)
    panel.get_by_role("tab", name="Batch").click()
    picture = panel.locator("svg.cd-values-picture")
    expect(picture).to_be_visible()
    expect(picture).to_contain_text("valid [0, 4)")
    expect(picture).to_contain_text("4 at position 2 is outside the valid range")
    expect(picture.locator("rect.cd-bar-out")).to_have_count(1)
    panel.screenshot(path=str(ARTIFACTS / "panel-picture.png"))
    panel.get_by_role("tab", name="Compare").click()
    expect(panel.locator(".cd-compare")).to_contain_text("one change at a time")


FIRST_SCREEN = 900
"""The height of the first screen (1400×900) under the failing cell."""

_MEASURE = """(cell) => {
  const out = cell.querySelector('.jp-Cell-outputWrapper');
  const top = out.getBoundingClientRect().top;
  const smallest = (text) => {
    let found = null;
    for (const e of out.querySelectorAll('*')) {
      const inChild = [...e.children].some(c => c.textContent.includes(text));
      if (!found && e.offsetParent && e.textContent.includes(text) && !inChild) found = e;
    }
    return found;
  };
  const headline = out.querySelector('.cd-headline') || smallest('device_assert');
  const restart = out.querySelector('.cd-restart-line') || smallest('Restart required');
  const tabs = out.querySelector('.lm-TabBar, .jupyter-widget-tab, .p-TabBar');
  const tabsTop = tabs ? tabs.getBoundingClientRect().top : out.getBoundingClientRect().bottom;
  const lines = new Set();
  const walker = document.createTreeWalker(out, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.textContent.trim() || !node.parentElement.offsetParent) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.height > 0 && r.bottom <= tabsTop + 1) lines.add(Math.round(r.top));
    }
  }
  const below = (e) => e ? Math.round(e.getBoundingClientRect().bottom - top) : null;
  return {headline_bottom: below(headline), restart_bottom: below(restart),
          tabs_top: Math.round(tabsTop - top), lines_before_tabs: lines.size,
          output_height: Math.round(out.getBoundingClientRect().height)};
}"""


def test_the_diagnosis_is_on_the_first_screen_under_the_failing_cell(lab):
    """Light and dark: under the failing cell of the demo, the headline and the restart line
    end within the first 900 px; screenshots of that screen (docs/first-screen-*.png)."""
    import json

    from playwright.sync_api import expect, sync_playwright

    base, token = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": FIRST_SCREEN})
        try:
            panel = _run_all_cells(page, base, token)
            expect(panel).to_contain_text("Restart required")
            cell = page.locator(".jp-CodeCell").filter(has=page.locator(
                ".jp-InputArea", has_text="cudadiag.watch(loader")).first
            figures = {}
            for theme in ("light", "dark"):
                if theme == "dark":
                    _choose_theme(page, "JupyterLab Dark")
                output = cell.locator(".jp-Cell-outputWrapper")
                output.evaluate("e => e.scrollIntoView({block: 'start'})")
                page.wait_for_timeout(500)  # the scroll settles
                figures[theme] = cell.evaluate(_MEASURE)
                page.screenshot(path=str(ARTIFACTS / f"first-screen-{theme}.png"))
            (ARTIFACTS / "first-screen.json").write_text(json.dumps(figures, indent=1))
            for theme, seen in figures.items():
                assert seen["headline_bottom"] is not None, (theme, seen)
                assert seen["headline_bottom"] <= FIRST_SCREEN, (theme, seen)
                assert seen["restart_bottom"] is not None, (theme, seen)
                assert seen["restart_bottom"] <= FIRST_SCREEN, (theme, seen)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "first-screen-failure.png"))
            raise
        finally:
            browser.close()


def _choose_theme(page, name: str) -> None:
    """JupyterLab's own command (Settings > Theme), then wait until the page has the theme."""
    page.evaluate("n => window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: n})", name)
    page.wait_for_function(
        "n => document.body.dataset.jpThemeName === n", arg=name, timeout=30_000)
