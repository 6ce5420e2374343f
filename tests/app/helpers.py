"""Shared AppTest helpers."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def open_page(path: str, **state) -> AppTest:
    """The app with ``state`` preset, switched to the page at ``path``, after its first run."""
    at = AppTest.from_file(APP, default_timeout=180)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(path)
    at.run()
    assert not at.exception, at.exception
    return at
