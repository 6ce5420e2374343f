"""What every page shares with the app shell: URL-bound widgets, and the first-request guard."""

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager


def require_shell() -> None:
    """Make sure app.py (sidebar, navigation) ran before this page; call first on every page.

    Because a pages/ folder exists, Streamlit 1.67 serves a fresh server's first request in its
    legacy multipage mode, which runs the page file alone. The sidebar's seed is then missing:
    switch that mode off (as st.navigation itself does) and rerun, so app.py runs first.
    """
    if "seed" not in st.session_state:
        PagesManager.uses_pages_directory = False
        st.rerun()


def slider(label: str, low: int, high: int, default: int, key: str, step: int = 1) -> int:
    """An int slider bound to the URL; a remembered value outside [low, high] moves to the nearest end."""
    if key in st.session_state:
        st.session_state[key] = min(max(st.session_state[key], low), high)
        return st.slider(label, low, high, step=step, key=key, bind="query-params")
    return st.slider(label, low, high, default, step=step, key=key, bind="query-params")


def select_slider(label: str, options: list[int], default: int, key: str) -> int:
    """A select slider over ints bound to the URL; a remembered value no longer offered moves to the nearest option."""
    if key in st.session_state:
        current = st.session_state[key]
        st.session_state[key] = min(options, key=lambda o: (abs(o - current), o))
        return st.select_slider(label, options, key=key, bind="query-params")
    value = default if default in options else min(options, key=lambda o: abs(o - default))
    return st.select_slider(label, options, value, key=key, bind="query-params")
