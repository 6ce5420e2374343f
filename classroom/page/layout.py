"""A page as a list of sections, for a class: read in order, or one per screen in presentation mode; prose with the
glossary's tooltips, and figures and tables sized for where they are drawn, each collected for its section's export."""

import functools
import html
import inspect
import re
import weakref
from collections.abc import Callable

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from classroom.page import export, export_menu, glossary, part, run, slides
from classroom.page.slides import presenting
from classroom.page.snippet import snippet
from mechlib import figures


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
    this = run.current()
    this.questions = st.container()
    try:
        with part.collecting(title) as collected:
            draw()
    except part.Refused:
        pass  # its refusal is on screen, in the part
    finally:
        this.questions = None
    export_menu.menu(collected)


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


def figure(name: str, builder: Callable[..., go.Figure], *args, **kwargs) -> None:
    """Draw ``builder(*args, **kwargs)`` (a ``mechlib.figures`` builder; restyled for the back of a room in
    presentation mode) and collect it, as shown, with its "reproduce in Python" snippet, derived from this call and
    what the part and the page computed (``snippet``): the call is written once, here. The figure is drawn at an
    explicit size that fits its place at 1280 px (``_room``), and exported at that size, so the PNG has the
    screen's aspect ratio by construction."""
    fig = builder(*args, **kwargs)
    collected = part.current()
    shown = figures.fit_width(figures.for_slides(fig) if presenting() else fig, _room())
    with slides.own_slide():
        st.plotly_chart(shown, width=shown.layout.width, config={"toImageButtonOptions": {
            "format": "png", "scale": export.SCALE, "filename": export.file_name(name)}})
    if collected is not None:
        collected.figures[name] = shown  # exports match the screen: its size, and slide-sized type when presenting
        records = [level.copy() for level in part.records()]  # as they are now: the part computes on after this
        collected.snippets[name] = lambda: snippet(records, builder, args, kwargs)  # written when the menu opens


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
    if (collected := part.current()) is not None:
        collected.tables[name] = frame


def metric(column: DeltaGenerator, label: str, value: str, help: str | None = None) -> None:
    """``st.metric`` in ``column``, recorded for the bundle."""
    column.metric(label, value, help=help)
    part.record(label, value)


@functools.cache
def source(*functions: Callable) -> str:
    """The source of mechlib ``functions``, one after another, for a page's "Under the hood": read once per
    process (``inspect`` tokenises the module's file on every call)."""
    return "\n".join(inspect.getsource(function) for function in functions)
