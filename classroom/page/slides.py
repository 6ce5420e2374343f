"""Presentation mode: a page as slides for a projected class, and reading mode for someone studying alone.

One row on top of every page holds the modes, the page's settings, Previous / part / Next and the link to the
view; one row under a part's heading holds its number, its notes and its export menu. A part is several slides:
its question (with its answer, once revealed), then each figure, and each five rows of a table, with the part's
lines of text under each, so that every slide has the screen's width and fits its height. Next walks the whole
lesson path (``lessons.ROUTE``): every slide of a part, every part of a page, then the lesson's next page. Type is
sized for the back of a room.
"""

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.delta_generator_singletons import context_dg_stack
from streamlit.errors import StreamlitAPIException

from classroom import keys, lessons
from classroom.page.run import current

TEXT_PX, HEADING_PX = 24, 36  # the least a slide's text and headings may be, read at the back of a room

# Streamlit's own test ids and HTML elements, never its generated class names. The top row sits in the header's
# height, between its two buttons (the sidebar's and the menu): the header lets it show and be clicked through, but
# for those buttons, which take the pointer back (it is inherited: a button left with its parent's "none" passed the
# click meant for the sidebar's » to the top row under it, and the sidebar could not be opened while presenting).
# A text's last paragraph keeps the 1rem that Streamlit's text element takes back below it (a negative margin):
# without it, the next element covered the text's last line. KaTeX keeps its relative sizes; charts (svg) get
# their type from ``figures.for_slides``, since plotly measures its text to lay it out.
STYLE = f"""<style>
[data-testid="stMain"] :is(p, li, label, td, th, input, textarea, button, summary, span, code, small,
  [data-testid="stMetricValue"] *, [data-testid="stMetricLabel"] *):not(.katex, .katex *, svg *, h1 *, h2 *, h3 *) {{
  font-size: {TEXT_PX}px !important; line-height: 1.25 !important; }}
[data-baseweb="popover"] :is(li, li *, p, span, label, input, button):not(svg *) {{ font-size: {TEXT_PX}px !important; }}
[data-testid="stDialog"] :is(p, li, span, label, button, code, div):not(svg *) {{ font-size: {TEXT_PX}px !important; }}
[data-testid="stDialog"] :is(h1, h2, h3, h3 *) {{ font-size: {HEADING_PX}px !important; }}
[data-testid="stSidebar"] :is(p, li, label, span, input, button, code):not(svg *) {{ font-size: {TEXT_PX}px !important; }}
[data-testid="stMain"] h1, [data-testid="stMain"] h1 * {{ font-size: {HEADING_PX + 8}px !important; }}
[data-testid="stMain"] :is(h2, h2 *, h3, h3 *) {{ font-size: {HEADING_PX}px !important; line-height: 1.2 !important; }}
[data-testid="stMain"] [data-testid="stVerticalBlock"] {{ gap: 0.25rem !important; }}
[data-testid="stMain"] :is(h1, h2, h3) {{ padding-top: 0.2rem !important; padding-bottom: 0.2rem !important; }}
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p {{ margin-bottom: 0.2rem !important; }}
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p:last-child {{ margin-bottom: 1rem !important; }}
[data-testid="stMainBlockContainer"] {{ padding-top: 0.6rem !important; padding-bottom: 1rem !important;
  padding-left: 3.5rem !important; padding-right: 3.5rem !important; }}
[data-testid="stHeader"] {{ background: transparent !important; }}
[data-testid="stHeader"], [data-testid="stHeader"] :not(button, button *, a, a *) {{ pointer-events: none !important; }}
[data-testid="stHeader"] :is(button, button *, a, a *) {{ pointer-events: auto !important; }}
</style>"""

def presenting() -> bool:
    return bool(st.session_state.get(keys.PRESENT))


def reading() -> bool:
    """Reading mode: every piece of evidence drawn at once, each question folded above its section."""
    return bool(st.session_state.get(keys.READ)) and not presenting()


def linked_present() -> bool:
    """Whether the page's link asks for presentation mode (``?present=true``, or the short ``?present=1``), read
    before the toggle is drawn: the app collapses the sidebar from it."""
    return st.query_params.get(keys.PRESENT, "").lower() in ("1", "true")


# ---------------------------------------------------------------------------------------------------------------
# The row on top


def chrome(page: str, join: bool) -> None:
    """The one row on top of every page, for ``page`` (its file, as ``lessons`` names it): the mode toggles, in
    presentation mode the page's settings and Previous / part / Next, and, where the teacher shows a live class how
    to join (``join``), a place for its code (``join_place``); then the link to this view (filled after the page
    runs, by ``link_place``)."""
    run = current()
    run.page = page
    if st.query_params.get(keys.PRESENT) == "1":  # the short form: the widget reads the corrected link on a rerun
        st.query_params[keys.PRESENT] = "true"
        st.rerun()
    run.join = None
    if st.session_state.get(keys.PRESENT, linked_present()):  # the toggle's value before it is drawn: the row's shape
        columns = st.columns([1.6, 1.6, 1.6, 2.0, 1.3, 1.2, 1.9] if join else [1.4, 1.7, 1.6, 3.6, 1.2, 1.2],
                             vertical_alignment="center")
        mode, settings, nav, run.link = columns[0], columns[1], columns[2:5], columns[5]
        run.join = columns[6] if join else None
    else:  # the main column beside an open sidebar: room for the two toggles' labels and the link's
        mode, settings, _, run.link = st.columns([1.2, 1.6, 2.4, 2.2], vertical_alignment="center")
    mode.toggle("Present", False, key=keys.PRESENT, bind="query-params",
                help="Presentation mode: one slide per screen, large type, Next walks the whole lesson.")
    if presenting():
        st.html(STYLE)
        run.settings, run.nav, run.stage = settings, tuple(nav), st.container(key="slide")
    else:
        settings.toggle("Reading mode", False, key=keys.READ, bind="query-params",
                        help="Show every answer at once, with each question folded above it: for studying alone. "
                             "Off, a question's evidence is drawn only when it is revealed.")
        run.settings = run.nav = run.stage = None
        _forget_part()
    run.titles, run.popover = [], None


def _forget_part() -> None:
    """Outside presentation mode the address names no part. Streamlit drops ``part`` at the end of a run that draws
    no part box while the box is bound to it; a live class's quick moves (out of presentation mode, then to another
    page) have left it unbound in the address, where it stayed: the teacher's or a follower's address then differed
    from the other's for good (``tests/browser/test_live_class.py``, two copies at once)."""
    if keys.PART in st.query_params:
        try:
            del st.query_params[keys.PART]
        except StreamlitAPIException:  # still bound to the part box: this run's end drops it
            pass


def link_place() -> DeltaGenerator:
    run = current()
    return run.link


def join_place() -> DeltaGenerator:
    """The top row's place for a live class's code, in presentation mode (``chrome``'s ``join``)."""
    run = current()
    return run.join


def stage() -> DeltaGenerator:
    """Where presentation mode draws the current slide: just below the top row, above the page's own title."""
    run = current()
    return run.stage


def finish() -> None:
    """After the page, in presentation mode: Previous and Next, drawn last so that they know how many slides the
    part just drew (a reveal can add some); a page without parts gets them too, toward the lesson's pages beside it."""
    run = current()
    if not presenting():
        return
    titles, counts = run.titles, st.session_state.get(keys.COUNTS, {})
    part, sub = st.session_state.get(keys.PART), st.session_state.get(keys.SUB, 0)
    back, _, forward = run.nav
    _button(back, -1, titles, not titles or (part == titles[0] and sub == 0))
    _button(forward, 1, titles, not titles or (part == titles[-1] and sub + 1 >= counts.get(part, 1)))


@contextmanager
def controls() -> Iterator[None]:
    """The page's own widgets: in presentation mode in the top row's "Settings" (one for the page, however many
    times a page asks), one click from every slide."""
    run = current()
    if not presenting() or run.settings is None:
        yield
        return
    if run.popover is None:
        run.popover = run.settings.popover("Settings", icon=":material/tune:", width="stretch")
    with run.popover:
        yield


# ---------------------------------------------------------------------------------------------------------------
# Previous / part / Next, through the lesson


def _page_beside(page: str, by: int) -> str | None:
    """The lesson's next (``by`` = 1) or previous (-1) page from ``page``; the start page, outside the lesson, comes
    before its first page. None past either end."""
    here = lessons.ROUTE.index(page) if page in lessons.ROUTE else None
    target = (0 if by > 0 else None) if here is None else here + by
    return lessons.ROUTE[target] if target is not None and 0 <= target < len(lessons.ROUTE) else None


def _move(titles: list[str], by: int) -> None:
    """Next (``by`` = 1) or Previous (-1) within the page: the part's next slide, else the next part. A callback:
    it runs before the next run's script."""
    counts, part = st.session_state.get(keys.COUNTS, {}), st.session_state.get(keys.PART)
    sub = st.session_state.get(keys.SUB, 0)
    index = titles.index(part) if part in titles else 0
    if 0 <= sub + by < counts.get(part, 1):
        st.session_state[keys.SUB] = sub + by
    elif 0 <= index + by < len(titles):
        st.session_state[keys.PART] = titles[index + by]
        st.session_state[keys.SUB] = counts.get(titles[index + by], 1) - 1 if by < 0 else 0


def _button(where: DeltaGenerator, by: int, titles: list[str], at_edge: bool) -> None:
    """Previous or Next: a button within the page; at the page's edge, a link to the lesson's page beside it, or
    disabled past the lesson."""
    run = current()
    label, icon = ("Next", ":material/arrow_forward:") if by > 0 else ("Previous", ":material/arrow_back:")
    beside = _page_beside(run.page, by) if at_edge else None
    if beside:
        where.page_link(beside, label=label, icon=icon, width="stretch")
        return
    where.button(label, icon=icon, on_click=_move, args=(titles, by), width="stretch",
                 type="primary" if by > 0 else "secondary", disabled=at_edge)


def navigation(titles: list[str]) -> int:
    """The select box of the page's parts (``part`` in the URL) in the top row, beside Previous and Next (drawn by
    ``finish``); returns the chosen part's index. Arriving from another page opens the first part."""
    run = current()
    run.titles = titles
    if st.session_state.get(keys.PART) not in titles:
        linked = st.query_params.get(keys.PART)
        st.session_state[keys.PART] = linked if linked in titles else titles[0]
        st.session_state[keys.SUB] = 0

    def reset_slide() -> None:
        st.session_state[keys.SUB] = 0

    picked = run.nav[1].selectbox("part", titles, 0, key=keys.PART, bind="query-params", label_visibility="collapsed",
                                   on_change=reset_slide)
    return titles.index(picked)


# ---------------------------------------------------------------------------------------------------------------
# Slides within a part


def part_note() -> None:
    """The row under a slide's heading: "part k of n · slide j of m" (filled once the part has drawn), the part's
    notes (``notes``) and its export menu (``export_place``), so that neither takes a slide's height."""
    run = current()
    note, run.notes_column, run.export = st.columns([5, 1.3, 2.6], vertical_alignment="center")
    run.note, run.notes = note.empty(), None


def notes() -> DeltaGenerator | None:
    """Where a part's explanatory text goes in presentation mode: one "Notes" popover in the row under its
    heading, however many paragraphs the part has. None outside a part."""
    run = current()
    if run.places is None:
        return None
    if run.notes is None:
        run.notes = run.notes_column.popover("Notes", icon=":material/notes:", width="stretch")
    return run.notes


def export_place() -> DeltaGenerator | None:
    """Where a part's export menu goes in presentation mode (the row under its heading); None elsewhere."""
    return current().export if presenting() else None


def drawing_part(title: str, number: int, parts: int, draw: Callable[[], None]) -> None:
    """Draw one part (``number`` of ``parts``) as the current slide: the side-by-side places it asks for
    (``place``) are slides, and only the current one keeps what was drawn in it."""
    run = current()
    run.places, run.discard = 0, []
    counts = st.session_state.setdefault(keys.COUNTS, {})
    try:
        draw()
    finally:
        for holder in run.discard:
            holder.empty()
        counts[title] = max(1, run.places)
        run.places = None
    sub = min(st.session_state.get(keys.SUB, 0), counts[title] - 1)
    st.session_state[keys.SUB] = sub
    run.note.caption(f"part {number} of {parts}" + (f" · slide {sub + 1} of {counts[title]}" if counts[title] > 1
                                                     else ""))


_placed: "weakref.WeakSet[DeltaGenerator]" = weakref.WeakSet()  # every place handed out, to tell a figure it is in one
_hidden: "weakref.WeakSet[DeltaGenerator]" = weakref.WeakSet()  # the places of the slides not shown: cleared at the end


def place(parent: DeltaGenerator | None = None) -> DeltaGenerator:
    """A place (in ``parent``, else here) for one of a part's slides: its question, a figure, a table's rows. In
    presentation mode each is a slide of its own (what is drawn in the others is cleared as the part ends);
    elsewhere a plain container."""
    run = current()
    parent = parent or st
    if run.places is None:
        return parent.container()
    index, run.places = run.places, run.places + 1
    if index == st.session_state.get(keys.SUB, 0):
        where = parent.container()
    else:
        holder = parent.empty()
        run.discard.append(holder)
        where = holder.container()
        _hidden.add(where)
    _placed.add(where)
    return where


def on_screen(where: DeltaGenerator) -> bool:
    """Whether what is drawn in the place ``where`` stays on screen: anywhere but in presentation mode, where only the
    slide shown does (the others are cleared as the part ends). What keeps itself alive on screen (a fragment that
    reruns every few seconds) is drawn only there: one drawn into a cleared slide writes, at its next run, into an
    element the page no longer has, and the browser's page goes blank."""
    return where not in _hidden


def holders() -> tuple[DeltaGenerator, ...]:
    """The containers what is drawn now is inside (Streamlit's ``with`` blocks), innermost last."""
    return tuple(context_dg_stack.get())


def inside_place() -> bool:
    """Whether what is drawn now is inside a place already (a side-by-side column that is a slide of its own)."""
    return any(holder in _placed for holder in holders())


@contextmanager
def own_slide() -> Iterator[None]:
    """A figure's or a table's own slide in presentation mode (``place``), unless it is inside one already."""
    if presenting() and not inside_place():
        with place():
            yield
    else:
        yield


def pages(rows: int, per_slide: int) -> list[tuple[DeltaGenerator, slice]]:
    """Where each run of ``per_slide`` rows of a ``rows``-row table goes: a slide each (``place``); inside a
    side-by-side place (which is one slide already) only the first run, the caption saying how many rows the slide
    leaves out."""
    if current().places is None:
        return [(st.container(), slice(0, rows))]
    runs = [slice(start, min(start + per_slide, rows)) for start in range(0, max(rows, 1), per_slide)]
    if inside_place():  # side by side with a figure, whose place is a slide already
        return [(st.container(), runs[0])]
    return [(place(), run) for run in runs]
