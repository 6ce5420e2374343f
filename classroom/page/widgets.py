"""Widgets bound to the URL, so that a link opens the same view: sliders and select boxes whose remembered values
follow the data, a link's numbers checked before they are parsed, and the link to this view."""

import math
from urllib.parse import urlencode

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from classroom import keys
from classroom.page.slides import presenting


def _restate(key: str, value) -> None:
    """Put a remembered widget value (``value``: moved to fit, where it no longer does) back into the session
    before its widget is drawn. A bound value reaches the URL only when it changes, and Streamlit leaves it out
    while it equals the widget's default; so when the fresh session's default moves (another model's last
    layer, another prompt's length, another model's top tokens) a value that was the default before is the
    one the link lacks. Re-stating it each run makes Streamlit write it whenever it differs from the default."""
    st.session_state[key] = value


def slider(label: str, low: int, high: int, default: int, key: str, step: int = 1) -> int:
    """An int slider bound to the URL; a remembered value outside [low, high] moves to the nearest end.
    ``default`` is what a fresh session shows, and the widget is always given it: Streamlit leaves a bound
    value out of the URL when it equals the widget's default, so a slider drawn without one (default: its
    minimum) would drop its minimum from links. With a single possible value there is nothing to slide:
    it is stated instead."""
    if low == high:
        st.caption(f"{label}: {low} (the only one)")
        return low
    if key in st.session_state:
        _restate(key, min(max(st.session_state[key], low), high))
    return st.slider(label, low, high, default, step=step, key=key, bind="query-params")


def select_slider(label: str, options: list[int], default: int, key: str) -> int:
    """A select slider over ints bound to the URL, always given the fresh session's ``default`` (see ``slider``);
    a remembered value no longer offered moves to the nearest option."""
    if key in st.session_state:
        current = st.session_state[key]
        _restate(key, min(options, key=lambda o: (abs(o - current), o)))
    value = default if default in options else min(options, key=lambda o: abs(o - default))
    return st.select_slider(label, options, value, key=key, bind="query-params")


def selectbox(label: str, options: list, key: str, format_func=str, index: int = 0):
    """A select box bound to the URL whose options change with the data (a model's tokens): the fresh session
    shows ``options[index]``; a remembered value no longer offered goes back to it (see ``_restate``)."""
    if st.session_state.get(key) is not None:  # None, an option meaning "nothing", is never re-stated: Streamlit
        _restate(key, st.session_state[key] if st.session_state[key] in options else options[index])  # reads it as unset
    return st.selectbox(label, options, index, format_func=format_func, key=key, bind="query-params")


def clean_url_ints(bounds: dict[str, tuple[int, int]]) -> None:
    """A link's whole-number parameters, checked before their widgets parse them (Streamlit's own parsing
    overflows on ``?seed=1e400`` and breaks the session): a value that is not a whole number is dropped, one
    outside [low, high] (±inf included) moves to the nearest end, and the script reruns on the corrected link
    (widgets read the link the run started with); a warning names each. A parameter whose widget already
    holds a value is the widget's own, and left alone."""
    notes = []
    for key, (low, high) in bounds.items():
        raw = st.query_params.get(key)
        if raw is None or key in st.session_state:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if math.isnan(value) or (math.isfinite(value) and value != int(value)):
            del st.query_params[key]
            notes.append(f"The link's {key} is not a whole number, so it is ignored.")
        elif not low <= value <= high:
            st.query_params[key] = str(nearest := low if value < low else high)
            notes.append(f"The link's {key} is outside {low:,}–{high:,}, so {nearest:,} is used.")
    if notes:
        st.session_state[keys.URL_NOTES] = notes
        st.rerun()


def clean_url_text(key: str, most: int) -> None:
    """A link's text parameter ``key`` cut to ``most`` characters before its widget reads it (a text input's own
    limit holds for typing, not for a link: a link's 1 MB prompt was sent back to the browser on every run), with a
    note, and the script reruns on the corrected link."""
    raw = st.query_params.get(key)
    if raw is None or len(raw) <= most or key in st.session_state:
        return
    st.query_params[key] = raw[:most]
    st.session_state[keys.URL_NOTES] = [f"The link's {key} is {len(raw):,} characters; its first {most:,} are used."]
    st.rerun()


def url_notes() -> None:
    """What the link asked for and did not get (a value out of range, a model that is gone, refused sizes), on
    the page above its content, where a student who opened the link reads it; once."""
    for note in st.session_state.pop(keys.URL_NOTES, []):
        st.warning(note, icon=":material/link_off:")


def view_link() -> str:
    """The address of this view: the page's URL with every setting that differs from a fresh session's."""
    query = urlencode({key: st.query_params[key] for key in st.query_params})
    base = st.context.url or ""
    return f"{base}?{query}" if query else base


def copy_link(where: DeltaGenerator) -> None:
    """"Copy link to this view" ("Link" on a slide): the address in a code box, whose copy button puts it on the
    clipboard."""
    with where.popover("Link" if presenting() else "Copy link to this view", icon=":material/link:", width="stretch"):
        st.code(view_link(), language=None, wrap_lines=True)
        st.caption("Every setting that differs from a fresh session is in it: the model, sizes, layer, head, prompt, "
                   "section and presentation mode. A trained model's link works for everyone on this server until "
                   "the model expires.")
