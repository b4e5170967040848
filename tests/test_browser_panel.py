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
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
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
            page.goto(f"{base}/lab/tree/demo.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            # the kernel must be connected before "Run All Cells", or nothing runs
            expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(
                timeout=60_000)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

            news = page.get_by_role("button", name="No", exact=True)
            if news.is_visible():
                news.click()  # JupyterLab's "notify me about news?" toast covers the panel
            panel = page.locator(".cudadiag-panel").first
            expect(panel).to_be_visible(timeout=90_000)
            expect(panel).to_contain_text("device_assert")
            expect(panel.locator(".cd-restart")).to_contain_text("Restart required")
            expect(panel).to_contain_text("observation point")

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


def _run_below_the_failure(page) -> None:
    """"Run All" stops at the failing cell (and the next one fails too: the context is
    gone): run the cells from the isolated re-run down (isolate, compare, validate, panel)."""
    page.locator(".jp-Cell").filter(has_text="%cuda_isolate --batch last").first.click()
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
