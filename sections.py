"""A page as a list of sections, for a class: read in order, or one per screen in presentation mode; each
section's figures, tables and numbers exported for slides, each figure with the Python that reproduces it,
and questions a student answers before the live result reveals the answer."""

import html
import re
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlencode

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from mechlib import export, figures, glossary

PRESENT = "present"  # the URL's ?present=true (or =1) and the toggle's key
PART = "part"        # the URL key of the section shown in presentation mode


def presenting() -> bool:
    return bool(st.session_state.get(PRESENT))


@dataclass
class Collected:
    """What one section showed: its figures (with the code that reproduces each), tables and numbers."""

    title: str
    figures: dict[str, go.Figure] = field(default_factory=dict)
    snippets: dict[str, str] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    numbers: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[Callable, tuple]] = field(default_factory=list)  # the mechlib experiments it ran, in order


_run = threading.local()  # the section being drawn by this script thread (each session's run has its own thread)


def _current() -> Collected | None:
    return getattr(_run, "collected", None)


@contextmanager
def _collecting(title: str) -> Iterator[Collected]:
    _run.collected = Collected(title)
    try:
        yield _run.collected
    finally:
        _run.collected = None


# ---------------------------------------------------------------------------------------------------------------
# The page's parts


def show(parts: list[tuple[str, Callable[[], None]]]) -> None:
    """Draw the page's sections: all in order, or in presentation mode the one chosen (Previous / Next).
    Each section closes with its export menu."""
    titles = [title for title, _ in parts]
    if not presenting():
        for title, draw in parts:
            _draw(title, draw)
        return
    with getattr(_run, "stage", None) or st.container():  # on top of the page, above its title and settings
        title, draw = parts[_navigation(titles)]
        _draw(title, draw)


def _draw(title: str, draw: Callable[[], None]) -> None:
    """A section: its title, its questions (first, whatever the section computes before asking them), its
    body, its export menu."""
    st.subheader(title)
    _run.questions = st.container()
    try:
        with _collecting(title) as collected:
            draw()
    finally:
        _run.questions = None
    _export_menu(collected)


def _question_box():
    """A bordered box for a question, in the section's place for questions: before the evidence that answers it."""
    return (getattr(_run, "questions", None) or st.container()).container(border=True)


def stage() -> None:
    """The place, just below the shell's controls, where presentation mode draws the chosen section: the first
    screen shows it, with the page's title, notes and settings below."""
    _run.stage = st.container()


def _navigation(titles: list[str]) -> int:
    """Previous / Next and a select box of the page's sections, bound to the URL as ``part``."""
    if PART in st.session_state and st.session_state[PART] not in titles:  # another page's section
        st.session_state[PART] = titles[0]
    current = st.session_state.get(PART, st.query_params.get(PART))  # a link's part, before its widget reads it
    index = titles.index(current) if current in titles else 0

    def step(by: int) -> None:
        st.session_state[PART] = titles[min(max(titles.index(st.session_state[PART]) + by, 0), len(titles) - 1)]

    back, choice, forward = st.columns([1, 4, 1], vertical_alignment="bottom")
    back.button("Previous", icon=":material/arrow_back:", on_click=step, args=(-1,), disabled=index == 0,
                width="stretch")
    forward.button("Next", icon=":material/arrow_forward:", on_click=step, args=(1,), disabled=index == len(titles) - 1,
                   width="stretch")
    picked = choice.selectbox(f"section ({index + 1} of {len(titles)})", titles, 0, key=PART, bind="query-params")
    return titles.index(picked)


@contextmanager
def controls() -> Iterator[None]:
    """The page's own widgets: in presentation mode folded into "Settings", so a section fits the screen."""
    with st.expander("Settings", icon=":material/tune:") if presenting() else st.container():
        yield


def beside(spec: int | list[int]) -> list[DeltaGenerator]:
    """``st.columns(spec)`` for figures and tables that sit side by side; in presentation mode they stack, each
    the screen's full width, so that every token label of a chart has room at slide-sized type."""
    if presenting():
        return [st.container() for _ in range(spec if isinstance(spec, int) else len(spec))]
    return st.columns(spec)


def prose(markdown: str) -> None:
    """Explanatory text, with the glossary's terms as tooltips; presentation mode folds it into "Notes"."""
    marked = with_tooltips(markdown)  # page text only: a prompt, a token or a file name never goes through here
    if presenting():
        with st.expander("Notes", icon=":material/notes:"):
            st.markdown(marked, unsafe_allow_html=True)
    else:
        st.markdown(marked, unsafe_allow_html=True)


_FIRST = re.compile(r"(?<![\w`])(" + "|".join(re.escape(term) for term in sorted(glossary.TERMS, key=len, reverse=True))
                    + r")(?![\w`])")


def with_tooltips(markdown: str) -> str:
    """``markdown`` with the first occurrence of each glossary term as an HTML <abbr> whose tooltip defines it.
    Code spans and LaTeX ($…$) are left alone."""
    seen: set[str] = set()

    def tip(match: re.Match) -> str:
        term = match[1]
        if term in seen:
            return term
        seen.add(term)
        return f'<abbr title="{html.escape(glossary.TERMS[term])}">{term}</abbr>'

    pieces = re.split(r"(`[^`]*`|\$[^$]*\$)", markdown)  # odd pieces are code or maths
    return "".join(piece if i % 2 else _FIRST.sub(tip, piece) for i, piece in enumerate(pieces))


# ---------------------------------------------------------------------------------------------------------------
# Figures, tables and numbers: shown, and collected for export


def figure(fig: go.Figure, name: str, code: str, using: Callable | None = None) -> None:
    """Show ``fig`` (restyled for the back of a room in presentation mode) and collect it, as shown, with its
    "reproduce in Python" snippet: ``code`` builds ``fig`` from ``result``, the section's latest mechlib experiment (or the
    latest call of ``using``), run on the page's model; a section that ran none gives code that stands alone."""
    collected = _current()
    shown = figures.for_slides(fig) if presenting() else fig
    st.plotly_chart(shown, config={"toImageButtonOptions": {"format": "png", "scale": export.SCALE,
                                                            "filename": export.file_name(name)}})
    if collected is not None:
        collected.figures[name] = shown  # exports match the screen: slide-sized type in presentation mode
        collected.snippets[name] = snippet(collected, code, using)


def table(frame: pd.DataFrame, name: str, static: bool = False, **options) -> None:
    """``st.dataframe`` of ``frame`` (``st.table`` where ``static``: sentences read whole, not in cells to
    scroll), collected for the section's CSV export."""
    if static:
        st.table(frame.set_index(frame.columns[0]))
    else:
        st.dataframe(frame, hide_index=True, **options)
    if (collected := _current()) is not None:
        collected.tables[name] = frame


def record(name: str, value: str) -> None:
    """A number the section shows (a check, a metric), for its bundle's numbers.csv."""
    if (collected := _current()) is not None:
        collected.numbers[name] = value


def metric(column: DeltaGenerator, label: str, value: str, help: str | None = None) -> None:
    """``st.metric`` in ``column``, recorded for the bundle."""
    column.metric(label, value, help=help)
    record(label, value)


def _export_menu(collected: Collected) -> None:
    if not (collected.figures or collected.tables or collected.numbers):
        return
    with st.popover("Export this section", icon=":material/download:"):
        reason = export.available()
        for name, fig in collected.figures.items():
            st.markdown(f"**{figures.plain(name)}**")
            png, svg = st.columns(2)
            png.download_button(f"PNG ({export.SCALE}×)", lambda fig=fig: export.png(fig), export.file_name(name) + ".png",
                                "image/png", key=f"png {collected.title} {name}", on_click="ignore", disabled=bool(reason))
            svg.download_button("SVG", lambda fig=fig: export.svg(fig), export.file_name(name) + ".svg", "image/svg+xml",
                                key=f"svg {collected.title} {name}", on_click="ignore", disabled=bool(reason))
            with st.expander("Reproduce in Python"):
                st.code(collected.snippets[name], language="python")
        if reason:
            st.caption(f"{reason}. The chart's own camera button still saves a PNG at {export.SCALE}× scale.")
        for name, frame in collected.tables.items():
            st.download_button(f"{name} (CSV)", lambda frame=frame: export.csv(frame), export.file_name(name) + ".csv",
                               "text/csv",
                               key=f"csv {collected.title} {name}", on_click="ignore")
        st.download_button("Everything in this section (zip)", lambda: export.bundle(
            collected.figures, collected.tables, collected.numbers, collected.snippets),
            export.file_name(collected.title) + ".zip", "application/zip", key=f"zip {collected.title}",
            on_click="ignore", type="primary")


# ---------------------------------------------------------------------------------------------------------------
# "Reproduce in Python"


def record_call(experiment: Callable, model_key: tuple, args: tuple) -> None:
    """A mechlib experiment the section ran (``shell.section`` reports each), for its figures' snippets."""
    if (collected := _current()) is not None:
        collected.calls.append((experiment, (model_key, args)))


def model_line(model_key: tuple) -> str:
    """Python that loads the page's model, from its cache key."""
    kind, what = model_key
    if kind == "zoo":
        return f"model = zoo.load({what!r})"
    if kind == "random":
        return f"model = zoo.random_model(ModelConfig.from_json({what!r}))"
    return "model = zoo.from_checkpoint(open('model.safetensors', 'rb').read())[1]  # the model, downloaded"


def snippet(collected: Collected, code: str, using: Callable | None = None) -> str:
    """A script that rebuilds a figure: imports, the model, the experiment's call with the page's values, ``code``."""
    calls = [call for call in collected.calls if using is None or call[0] is using]
    lines = ["import numpy as np", "", "from mechlib import data, figures, zoo"]
    if calls:
        experiment, (model_key, args) = calls[-1]
        module = experiment.__module__.rsplit(".", 1)[-1]
        lines[-1] += f", {module}"
        if model_key[0] == "random":
            lines.append("from mechlib.config import ModelConfig")
        lines += ["", model_line(model_key)]
        ids = next((arg for arg in args if isinstance(arg, tuple) and arg and all(isinstance(i, int) for i in arg)), None)
        if ids is not None:
            lines += [f"ids = {ids!r}", "labels = data.token_labels(model.tokenizer, ids)"]
        shown = ", ".join("ids" if arg is ids else repr(arg) for arg in args)
        lines.append(f"result = {module}.{experiment.__name__}(model{', ' if args else ''}{shown})")
    return "\n".join(lines + [code, "fig.show()"])


# ---------------------------------------------------------------------------------------------------------------
# Questions


def predict(key: str, question: str, options: list[str], answer: str, why: str) -> None:
    """Predict, then reveal: the student picks an option first; the answer shown is the one this run computed,
    so it stays true when the model or the sizes change."""
    assert answer in options, (answer, options)
    with _question_box():
        st.markdown(f"**Predict, then reveal.** {question}")
        guess = st.radio("your prediction", options, index=None, key=f"predict {key}", horizontal=True)
        if guess is None:  # new options (another model) drop an old guess: the answer hides until the next one
            st.session_state[f"reveal {key}"] = False
        if st.toggle("Reveal the answer", key=f"reveal {key}", disabled=guess is None,
                     help="Pick a prediction first." if guess is None else None):
            mark = ":green[**✓ as you predicted**]" if guess == answer else ":red[**✗ not what you predicted**]"
            st.markdown(f"This run: **{answer}** {mark}. {why}")


def exercise(key: str, task: str, options: list[str], correct: Collection[str], why: str) -> None:
    """An exercise with a checked answer: ``correct`` is computed from the live model, so the check follows it."""
    with _question_box():
        st.markdown(f"**Exercise.** {task}")
        answer = st.selectbox("your answer", options, index=None, key=f"exercise {key}", placeholder="choose…")
        if answer is not None:
            st.markdown(":green[**✓ right**]" if answer in correct else ":red[**✗ not this one: try again**]")
        if st.toggle("Show the answer", key=f"solution {key}"):
            st.markdown(f"**{', '.join(correct) or 'none here'}**. {why}")


# ---------------------------------------------------------------------------------------------------------------
# The shell's controls: presentation mode and the link to this view


def linked_present() -> bool:
    """Whether the page's link asks for presentation mode (``?present=true``, or the short ``?present=1``), read
    before the toggle is drawn: the app collapses the sidebar from it."""
    return st.query_params.get(PRESENT, "").lower() in ("1", "true")


def presentation_toggle() -> None:
    """The toggle at the top of every page, bound to ``?present=``; a link's ``present=1`` reads as true."""
    if st.query_params.get(PRESENT) == "1":  # the short form: the widget reads the corrected link on a rerun
        st.query_params[PRESENT] = "true"
        st.rerun()
    st.toggle("Presentation mode", False, key=PRESENT, bind="query-params",
              help="One section per screen, large figure fonts, every token label; the prose folds into Notes.")


def view_link() -> str:
    """The address of this view: the page's URL with every setting that differs from a fresh session's."""
    query = urlencode({key: st.query_params[key] for key in st.query_params})
    base = st.context.url or ""
    return f"{base}?{query}" if query else base


def copy_link(where: DeltaGenerator) -> None:
    """"Copy link to this view": the address in a code box, whose copy button puts it on the clipboard."""
    with where.popover("Copy link to this view", icon=":material/link:"):
        st.code(view_link(), language=None, wrap_lines=True)
        st.caption("Every setting that differs from a fresh session is in it: the model, sizes, layer, head, prompt, "
                   "section and presentation mode. A trained model's link works for everyone on this server until "
                   "the model expires.")
