"""What every page shares with the app shell: URL-bound widgets, and the first-request guard."""

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from mechlib import zoo
from mechlib.model import Transformer


def require_shell() -> None:
    """Make sure app.py (sidebar, navigation) ran before this page in this run; call first on every page.

    Because a pages/ folder exists, Streamlit 1.67 can run a page file alone in its legacy multipage
    mode: on a fresh server's first request, and on every AppTest rerun. app.py leaves a mark just
    before it runs the page; without it, switch that mode off (as st.navigation itself does) and
    rerun, so app.py runs first.
    """
    if not st.session_state.pop("shell_ran", False):
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


SESSION_MODELS = 8  # trained or uploaded models a session keeps; the oldest goes first


def add_session_model(label: str, data: bytes) -> None:
    """Add a trained or uploaded checkpoint (already validated) to this session; the sidebar selects it on
    the next run (a widget's value cannot change after it is drawn). The session keeps the bytes, so the
    model survives the server-wide cache evicting it while other students train."""
    models = st.session_state.setdefault("session_models", {})
    models.pop(label, None)
    models[label] = data
    while len(models) > SESSION_MODELS:
        models.pop(next(iter(models)))
    st.session_state["select_model"] = label


def session_model(label: str) -> Transformer:
    """This session's model ``label``: from the shared cache, or validated again from its bytes."""
    return zoo.from_checkpoint(st.session_state["session_models"][label])[1]
