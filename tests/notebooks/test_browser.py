"""The quickstart in a real JupyterLab, driven in headless Chromium: run all cells, see the dashboard.

The server runs on a free localhost port with a token over a temporary copy of notebooks/;
Chromium is the system's (/usr/bin/chromium, never downloaded). Screenshots go to
artifacts/browser/ as the test's artefact. Without a launchable browser the test skips.
"""
from __future__ import annotations

import json
import logging
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

from nb_paths import NOTEBOOK_DIR

pytestmark = [pytest.mark.browser, pytest.mark.slow]

log = logging.getLogger(__name__)

CHROMIUM = Path(os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "browser"
NOTEBOOK = "01_quickstart.ipynb"
RUN_TIMEOUT_MS = 240_000
# Every code cell shows "[n]:" once it ran; "[*]:" while queued or running, "[ ]:" before.
ALL_CELLS_RAN = """() => {
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')];
  return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
}"""
KERNEL_READY = """() => {
  const name = document.querySelector('.jp-NotebookPanel-toolbar .jp-Toolbar-kernelName');
  const status = document.querySelector('.jp-Notebook-ExecutionIndicator');
  return name && /Python/.test(name.textContent) && status && status.dataset.status === 'idle';
}"""
ERROR_OUTPUTS = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, proc: subprocess.Popen, log_path: Path, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer {url} within {timeout_s:.0f} s:\n{log_path.read_text()[-3000:]}")


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server over a copy of the notebooks; yields its base URL and token."""
    root = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOK_DIR, root)
    config = tmp_path / "config"
    (config / "labconfig").mkdir(parents=True)
    # No "receive Jupyter news?" toast over the screenshot.
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    # Render every cell, not only those scrolled into view, so outputs can be inspected.
    settings = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings")}
    log_path = tmp_path / "lab.log"
    log_file = log_path.open("w")
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.open_browser=False",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")          # containers and CI often run as root
    proc = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(f"{base}/api/status?token={token}", proc, log_path)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log_file.close()
        log.info("jupyter lab log:\n%s", log_path.read_text()[-4000:])


@pytest.fixture
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set WORKBENCH_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        try:
            chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        except Exception as exc:            # noqa: BLE001  (any launch failure means: no browser here)
            pytest.skip(f"cannot launch {CHROMIUM}: {exc}")
        try:
            yield chromium
        finally:
            chromium.close()


def test_quickstart_runs_and_shows_the_dashboard(lab, browser):
    base, token = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=90_000)
    page.wait_for_function(KERNEL_READY, timeout=90_000)
    page.wait_for_timeout(2_000)            # the session settles after the first idle

    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    select_kernel = page.locator(".jp-Dialog .jp-mod-accept")
    try:                                    # a slow kernel start makes Lab ask which kernel to use
        select_kernel.wait_for(timeout=3_000)
        select_kernel.click()
    except PlaywrightTimeout:
        pass
    try:
        page.wait_for_function(ALL_CELLS_RAN, timeout=RUN_TIMEOUT_MS)
    finally:
        page.screenshot(path=str(ARTIFACTS / "01_quickstart_end.png"))

    errors = [e.inner_text() for e in page.locator(ERROR_OUTPUTS).all()]
    assert not [e for e in errors if "Traceback" in e or "Error" in e], errors

    # The dashboard: tabs, and the summary tab's table with the simulated time.
    dashboard = page.locator(".jp-OutputArea-output .widget-tab").first
    dashboard.scroll_into_view_if_needed()
    dashboard.wait_for(state="visible", timeout=30_000)
    for tab in ("summary", "timeline", "roofline"):
        assert dashboard.locator(".lm-TabBar-tab", has_text=tab).count() == 1
    summary = dashboard.locator("table").first
    summary.wait_for(state="visible", timeout=30_000)
    assert "neuron trn2" in summary.inner_text()
    page.screenshot(path=str(ARTIFACTS / "01_quickstart_dashboard.png"))
    dashboard.locator(".lm-TabBar-tab", has_text="timeline").click()
    dashboard.locator(".main-svg").first.wait_for(state="visible", timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "01_quickstart_timeline.png"))

    # The comparison chart is a plotly figure: rendered SVG, not a "loading" placeholder.
    page.wait_for_selector(".jp-OutputArea-output .main-svg", timeout=30_000)
    page.locator(".jp-OutputArea-output .main-svg").last.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "01_quickstart_compare.png"))
    assert page.locator(".jp-OutputArea-output .main-svg").count() >= 1
