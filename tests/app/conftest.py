"""AppTest set-up shared by the page tests."""

import pytest
from streamlit.runtime.pages_manager import PagesManager


@pytest.fixture(autouse=True)
def navigation_mode(monkeypatch):
    """Run every AppTest run through app.py, as the real server does once st.navigation has run.

    Because a pages/ folder exists, AppTest (Streamlit 1.67) starts each run in the legacy multipage
    mode, which runs the last page file alone: no sidebar, and pages/shell.require_shell then reruns,
    losing a button click. The fresh-server first request, where that mode is real, is covered by the
    browser tests.
    """
    original = PagesManager.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", init)
