"""A page as a list of sections, for a class: read in order, or one per screen in presentation mode; each
section's figures, tables and numbers exported for slides, each figure with the Python that reproduces it,
and questions a student answers before the live result reveals the answer."""

import functools
import html
import inspect
import re
import threading
import weakref
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlencode

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

import slides
from classroom import glossary
from mechlib import export, figures
from slides import controls, presenting, reading


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
    """Draw the page's parts: all in order, or in presentation mode the one chosen with Previous / Next, on top of
    the page. Each part closes with its export menu."""
    titles = [title for title, _ in parts]
    if not presenting():
        for title, draw in parts:
            _draw(title, draw)
        return
    with slides.stage():
        index = slides.navigation(titles)
        title, draw = parts[index]
        _draw(title, lambda: slides.drawing_part(title, index + 1, len(titles), draw))


def _draw(title: str, draw: Callable[[], None]) -> None:
    """A part: its title, its questions (first, whatever the part computes before asking them), its body, its
    export menu."""
    st.subheader(title)
    if presenting():
        slides.part_note()
    _run.questions = st.container()
    try:
        with _collecting(title) as collected:
            draw()
    finally:
        _run.questions = None
    _export_menu(collected)


def _question_box():
    """A bordered box for a question, in the part's place for questions: before the evidence that answers it. In
    presentation mode it is a slide of its own, with its answer once revealed; the evidence follows on the next
    slides. Reading mode folds it, since the evidence is drawn anyway."""
    where = getattr(_run, "questions", None) or st.container()
    if reading():
        return where.expander("Predict, then reveal", icon=":material/quiz:")
    return (slides.place(where) if presenting() else where).container(border=True)


def beside(spec: int | list[int]) -> list[DeltaGenerator]:
    """``st.columns(spec)`` for figures and tables that sit side by side; in presentation mode each is a slide of its
    own at the screen's full width (``slides.place``), so that every token label of a chart has room at slide-sized
    type."""
    if presenting():
        return [slides.place() for _ in range(spec if isinstance(spec, int) else len(spec))]
    weights = [1] * spec if isinstance(spec, int) else spec
    room, gap = _room(), GAP_PX * (len(weights) - 1) / len(weights)  # each column gives up its share of the gaps
    columns = st.columns(spec, gap="small")
    for column, weight in zip(columns, weights):
        _widths[column] = int(room * weight / sum(weights) - gap)
    return columns


def prose(markdown: str) -> None:
    """Explanatory text, with the glossary's terms as tooltips; presentation mode folds it into "Notes" (a part's
    one popover beside its number)."""
    marked = with_tooltips(markdown)  # page text only: a prompt, a token or a file name never goes through here
    if presenting():
        with slides.notes() or st.expander("Notes", icon=":material/notes:"):
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


PAGE_PX = 780    # px a figure may be wide in the main column: 820 at 1280 × 720 with the sidebar open, less a box's padding
SLIDE_PX = 1100  # the same in presentation mode, sidebar closed: 1120 px at 1280 × 720 (1760 at 1920 × 1080)
GAP_PX = 16      # st.columns' small gap (1rem)
_widths: "weakref.WeakKeyDictionary[DeltaGenerator, int]" = weakref.WeakKeyDictionary()  # beside's columns: px wide


def _room() -> int:
    """The px a figure drawn here may be wide: the innermost ``beside`` column it is in, else the main column."""
    if presenting():
        return SLIDE_PX
    for holder in reversed(slides.holders()):
        if holder in _widths:
            return _widths[holder]
    return PAGE_PX


def figure(fig: go.Figure, name: str, code: str, using: Callable | None = None) -> None:
    """Show ``fig`` (restyled for the back of a room in presentation mode) and collect it, as shown, with its
    "reproduce in Python" snippet: ``code`` builds ``fig`` from ``result``, the section's latest mechlib experiment (or the
    latest call of ``using``), run on the page's model; a section that ran none gives code that stands alone.
    The figure is drawn at an explicit size that fits its place at 1280 px (``_room``), and exported at that size,
    so the PNG has the screen's aspect ratio by construction."""
    collected = _current()
    shown = figures.fit_width(figures.for_slides(fig) if presenting() else fig, _room())
    with slides.own_slide():
        st.plotly_chart(shown, width=shown.layout.width, config={"toImageButtonOptions": {
            "format": "png", "scale": export.SCALE, "filename": export.file_name(name)}})
    if collected is not None:
        collected.figures[name] = shown  # exports match the screen: its size, and slide-sized type when presenting
        collected.snippets[name] = snippet(collected, code, using)


_BLOCK = re.compile(r"^([-+*#>])(?= )")  # st.table reads a cell as Markdown: "+ W_pos" became a list item
SLIDE_ROWS = 5  # a table's rows on one slide at slide-sized type, with room for wrapped cells and the part's checks


def _escaped(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as ``st.table`` draws it: a cell's leading list marker escaped (a data grid reads cells as text)."""
    return frame.map(lambda value: _BLOCK.sub(r"\\\1", value) if isinstance(value, str) else value)


def table(frame: pd.DataFrame, name: str, static: bool = False, **options) -> None:
    """``st.dataframe`` of ``frame`` (``st.table`` where ``static``: sentences read whole, not in cells to
    scroll), collected for the part's CSV export. In presentation mode every table is an HTML table, whose type the
    slide's style can set (a data grid draws its own), SLIDE_ROWS rows a slide (``slides.pages``)."""
    if presenting():
        shown = _escaped(frame)
        for where, rows in slides.pages(len(frame), SLIDE_ROWS):
            with where:
                st.table(shown.iloc[rows], hide_index=True)
                if rows.stop - rows.start < len(frame):
                    st.caption(f"Rows {rows.start + 1}–{rows.stop} of {len(frame)}; Export this section has them all.")
    elif static:
        st.table(_escaped(frame).set_index(frame.columns[0]))
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


def export_key(title: str) -> str:
    """The widget key of the part ``title``'s export menu, whose value is whether it is open."""
    return f"export {title}"


def _export_menu(collected: Collected) -> None:
    """The part's "Export this section" menu, whose contents are drawn once it is opened (opening it reruns the
    page): drawn on every run, its buttons, snippets and the figures they keep alive took a tenth of a class's
    server time (py-spy)."""
    if not (collected.figures or collected.tables or collected.numbers):
        return
    menu = (slides.export_place() or st).popover("Export this section", icon=":material/download:",
                                                 width="stretch" if presenting() else "content",
                                                 key=export_key(collected.title), on_change="rerun")
    if not menu.open:
        return
    with menu:
        reason = export.available()
        for name, fig in collected.figures.items():
            st.markdown(f"**{figures.plain(name)}**")
            png, svg = st.columns([3, 1])  # the PNG button names its size: "PNG, 2340 × 1260 px"
            width, height = export.size(fig)  # the screen's size: the PNG keeps its aspect ratio, at SCALE × its pixels
            png.download_button(f"PNG, {width * export.SCALE} × {height * export.SCALE} px", lambda fig=fig: export.png(fig),
                                export.file_name(name) + ".png",
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


@functools.cache
def source(*functions: Callable) -> str:
    """The source of mechlib ``functions``, one after another, for a page's "Under the hood": read once per
    process (``inspect`` tokenises the module's file on every call)."""
    return "\n".join(inspect.getsource(function) for function in functions)


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


def _asked(key: str, question: str, options: list[str]) -> bool:
    """Whether the question ``key`` is revealed; a new question under that key (other settings, another model)
    starts unrevealed and unanswered, so its evidence is hidden again and an earlier guess is not graded on it."""
    asked = (question, tuple(options))
    if st.session_state.get(f"asked {key}") != asked:
        st.session_state[f"asked {key}"] = asked
        st.session_state[f"reveal {key}"] = False
        for guess in (f"guess {key}", f"predict {key}", f"exercise {key}"):
            st.session_state.pop(guess, None)
    return st.session_state[f"reveal {key}"]


def _reveal_button(key: str, label: str) -> bool:
    """The teacher's Reveal, as visible as the question; once revealed, a quiet button hides the answer again."""
    def flip(to: bool) -> None:
        st.session_state[f"reveal {key}"] = to

    revealed = st.session_state[f"reveal {key}"]
    st.button("Hide the answer" if revealed else label, key=f"reveal button {key}", on_click=flip, args=(not revealed,),
              type="tertiary" if revealed else "primary", icon=None if revealed else ":material/visibility:")
    return revealed


def predict(key: str, question: str, options: list[str], accepted: Collection[str], why: str) -> bool:
    """Predict, then reveal. ``accepted`` is the set of options that the rule the reveal states computes on this
    run (every head the ablation breaks, the bin holding the value), so the grading follows the model and the
    sizes. Returns whether the evidence that answers the question may be drawn: once it is revealed, or at once in
    reading mode (the question folded above it)."""
    assert accepted and set(accepted) <= set(options), (accepted, options)
    revealed = _asked(key, question, options)
    with _question_box():
        st.markdown(f"**Predict, then reveal.** {question}")
        kept = st.session_state.get(f"guess {key}")
        if revealed and presenting():  # a revealed slide keeps its room for the evidence: the options fold away
            guess = kept if kept in options else None
        else:
            guess = st.radio("your prediction", options, options.index(kept) if kept in options else None,
                             key=f"predict {key}", horizontal=True)
            st.session_state[f"guess {key}"] = guess
        if _reveal_button(key, "Reveal the answer"):
            st.markdown(answer_line(guess, accepted, why))
            revealed = True
    return revealed or reading()


def answer_line(guess: str | None, accepted: Collection[str], why: str) -> str:
    """The revealed answer: every accepted option, the student's guess graded against them, and the reason."""
    mark = ("" if guess is None else " :green[**✓ as you predicted**]" if guess in accepted
            else " :red[**✗ not what you predicted**]")
    return f"This run: **{', '.join(accepted)}**{mark}. {why}"


def ask(key: str, question: str, options: list[str]) -> str | None:
    """A prediction asked before the run that answers it (the Train page's): the guess, for ``answer_line`` once
    the run is done."""
    with _question_box():
        st.markdown(f"**Predict, then run.** {question}")
        return st.radio("your prediction", options, index=None, key=f"predict {key}", horizontal=True)


def exercise(key: str, task: str, options: list[str], correct: Collection[str], why: str) -> bool:
    """An exercise with a checked answer: ``correct`` is computed from the live model, so the check follows it.
    Returns whether the evidence that answers it may be drawn: once the answer is shown, or in reading mode."""
    revealed = _asked(key, task, options)
    with _question_box():
        st.markdown(f"**Exercise.** {task}")
        answer = st.selectbox("your answer", options, index=None, key=f"exercise {key}", placeholder="choose…")
        if answer is not None:
            st.markdown(":green[**✓ right**]" if answer in correct else ":red[**✗ not this one: try again**]")
        if _reveal_button(key, "Show the answer"):
            st.markdown(f"**{', '.join(correct) or 'none here'}**. {why}")
            revealed = True
    return revealed or reading()


# ---------------------------------------------------------------------------------------------------------------
# The link to this view


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
