"""The real app in headless Chromium: a server on a free loopback port, and a Playwright page.

Where Chromium or Playwright is missing the browser tests skip with the reason; under CI
(CI=true) they fail instead, so a green CI always includes them.
"""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bench.slides_walk import CHROMIUM, IDLE

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"Chromium not found at {CHROMIUM} (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is not installed (pip install -r requirements-test.txt)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server():
    reason = _missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests must run in CI: {reason}")
        pytest.skip(reason)
    port = _free_port()
    log = (ARTIFACTS / "streamlit-server.log")
    ARTIFACTS.mkdir(exist_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                        break
                except OSError:
                    time.sleep(0.3)
            else:
                pytest.fail(f"the Streamlit server did not start within 60 s; see {log}")
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="session")
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    yield page
    page.close()


def wait_for_app(page, charts: int, timeout_ms: int = 90_000) -> None:
    """Until ``charts`` plotly charts have drawn their SVG and the script has finished (``IDLE``: no status widget, and
    the frontend's own run state)."""
    page.wait_for_function(
        "n => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .main-svg').length >= n", arg=charts,
        timeout=timeout_ms)
    page.wait_for_function(IDLE, timeout=timeout_ms)
