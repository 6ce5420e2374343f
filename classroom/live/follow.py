"""Following the teacher: the teacher's view published after each of its runs, and followers moved to it.

A follower's session looks at the room's version every ``POLL_S`` seconds (a fragment with ``run_every``: a small
read, no page rerun) and reruns only when it moved: to the teacher's page, settings and slide if it follows, in
place otherwise (a reveal is drawn on every screen). To another page it goes the way a click on a page link goes,
its browser clicking the link itself (``_follow_link``)."""

import time

import redis
import streamlit as st

from classroom import keys, pages
from classroom.live.membership import (ROOM, TEACHER, code, following, holds_token, join, leading, leave, room, rooms,
                                       student, token, voter)
from classroom.live.rooms import RoomError, View, random_name, typed_code
from classroom.state import backend

__all__ = ["POLL_S", "join_from_link", "watch", "publish"]

POLL_S = 0.5           # a follower looks at the room this often
REPORT_S = 4.0         # and reports its presence this often
URL_KEYS = {ROOM, TEACHER}  # the live class's own URL keys: never a teacher's setting
DEFAULT_CHARS = 500    # the longest default value published for followers (a prompt's text)


def join_from_link(page: str) -> None:
    """At the start of every full run on ``page`` (its URL path), before any widget: a follower's move to the
    teacher's view takes its settings (``_move``, ``_apply``) and a move by link is over (``_by_link``); a link's
    ``?room=`` joins its room (``?teacher=`` as its teacher), once, and the token leaves the address; a student who
    has just joined takes the teacher's view before anything is drawn (``_arrive``). An unknown or expired code is
    said above the page and dropped from the address."""
    state = room()
    state.page, state.move = page, None
    _apply(*(state.go or ({}, {})))
    state.go = None
    if holds_token():
        state.leads = rooms().leader(code()) == student()
    linked, teacher_token = st.query_params.get(ROOM), st.query_params.get(TEACHER)
    if TEACHER in st.query_params:
        del st.query_params[TEACHER]
    try:
        if linked is not None and (typed_code(linked) != code() or teacher_token is not None):
            join(linked, teacher_token)
    except RoomError as error:
        del st.query_params[ROOM]
        st.session_state[keys.URL_NOTES] = [f"The link's class: {error}."]
    if room().arrive:
        room().arrive = False
        if following():
            _arrive(page)


def _apply(settings: dict[str, object], texts: dict[str, str]) -> None:
    """A move's settings (None: forgotten), and the values the teacher's address gives the widgets that were not
    drawn when the move was decided (``texts``): set for those this session has drawn since (the first run after a
    join draws its widgets after its look, say), whose values a link's address no longer changes."""
    for key, value in settings.items():
        if value is None:
            st.session_state.pop(key, None)
        else:
            st.session_state[key] = value
    for key, text in texts.items():
        if st.session_state.get(key) is not None:
            st.session_state[key] = _as_value(st.session_state[key], text)


def _arrive(page: str) -> None:
    """A student who has just joined takes the teacher's view at once, presentation mode included, before this run
    draws anything: its settings, and the teacher's page and address (``st.switch_page``: in a session's first
    run no look of the room's is on its way, which a switch would have the browser answer under the page left)."""
    view = rooms().view(code())
    room().version = rooms().version(code())
    if view is None or view == _my_view(page):
        return
    address, settings, texts = _move(view)
    _apply(settings, texts)
    if view.page != page or any(st.query_params.get(key) != text for key, text in address.items()):
        st.switch_page(pages.at(view.page).file, query_params=address)


@st.fragment(run_every=POLL_S)
def watch() -> None:
    """The room's look (``_look``), every ``POLL_S``: while the class's Redis cannot be reached, a sentence that
    names its setting (never its value) instead of an error box, and the screen keeps the class's last view."""
    try:
        _look()
    except redis.RedisError as error:
        st.warning(f"{backend.unreachable(error)}. This screen keeps the class's last view until it is back.",
                   icon=":material/cloud_off:")


def _look() -> None:
    """Every ``POLL_S``: for the teacher, how many students are connected and follow; for a student, report this
    session's presence (every ``REPORT_S``), and when the room moved, rerun the app (a reveal is drawn), on the
    teacher's view for a follower: in place, or by a link to another page or address (``_by_link``), drawn here
    by each look until the browser has followed it. Its body also runs in every full run, where the sidebar's
    widgets are drawn already: so it only reads the session's settings, which the next run's start sets
    (``join_from_link``)."""
    state, code_ = room(), code()
    if code_ is None:
        return
    if not rooms().exists(code_):
        leave()
        st.rerun()
    if holds_token():
        if (rooms().leader(code_) == student()) != leading():
            st.rerun()  # the lead moved: the app's run reads it again and redraws the panel
        if leading():
            connected, follow = rooms().presence(code_)
            st.caption(f"{connected} students connected, {follow} following you")
        return
    now = time.monotonic()
    if now - state.reported > REPORT_S:
        state.reported = now
        rooms().here(code_, voter(), st.session_state.get(keys.ROOM_NAME) or random_name(voter()), following())
    version = rooms().version(code_)
    if version != state.version:
        state.version = version
        view = rooms().view(code_) if following() else None
        state.move = state.go = None  # a newer view replaces a move the browser has not made
        if view is not None and view != _my_view():
            address, *go = _move(view)
            state.go = tuple(go)
            if view.page != state.page or any(st.query_params.get(key) != text for key, text in address.items()):
                _by_link(view.page, address)
        if state.move is None:
            st.rerun()
    if state.move is not None:
        _follow_link(*state.move)


def _my_view(page: str | None = None) -> View:
    page = room().page if page is None else page
    params = tuple(sorted((key, st.query_params[key]) for key in st.query_params if key not in URL_KEYS))
    return View(page, params, st.session_state.get(keys.SUB, 0))


def _led_view(page: str) -> View:
    """The teacher's view of ``page``, with the defaults a follower's own settings go back to: this session's
    values of its other settings (widget keys that are URL names, never the app's own: ``keys.own``)."""
    view = _my_view(page)
    named = {key for key, _ in view.params} | URL_KEYS
    defaults = tuple(sorted((key, str(value)) for key, value in st.session_state.items()
                            if isinstance(key, str) and key.isidentifier() and not keys.own(key) and key not in named
                            and isinstance(value, int | float | str) and len(str(value)) <= DEFAULT_CHARS))
    return View(view.page, view.params, view.slide, defaults)


def _as_value(current, text: str):
    """``text`` from the teacher's address as the value a widget holding ``current`` takes."""
    if isinstance(current, bool):
        return text.lower() == "true"
    if isinstance(current, int):
        return int(float(text))
    if isinstance(current, float):
        return float(text)
    return text


def _move(view: View) -> tuple[dict[str, str], dict[str, object], dict[str, str]]:
    """The address, the session's settings (None: forgotten) and the address's values for widgets not yet drawn
    (``_apply``) of the teacher's view. A setting whose widget this session has drawn is set in the session (the
    address of a widget bound to it cannot be set); the others go in the address, which a new widget reads. A
    setting the teacher's address lacks is at its widget's default there: the teacher's value of it
    (``View.defaults``) where the teacher's session has one, else off for a toggle (every one of the app's starts
    off) and forgotten for another widget; this session's own settings on that page from an earlier visit
    included."""
    theirs = dict(view.params)
    address, settings, texts = {ROOM: code()}, {keys.SUB: view.slide}, {}
    for key, text in theirs.items():
        if st.session_state.get(key) is not None:
            settings[key] = _as_value(st.session_state[key], text)
        else:
            address[key] = texts[key] = text
    seen = room().seen.get(view.page, set())  # this session's settings there
    defaults = dict(view.defaults)
    for key in seen | {key for key, _ in _my_view().params}:
        if key in theirs:
            continue
        if key in defaults and st.session_state.get(key) is not None:
            settings[key] = _as_value(st.session_state[key], defaults[key])
        elif isinstance(st.session_state.get(key), bool):
            settings[key] = False
        else:
            settings[key] = None
    return address, settings, texts


def _by_link(page: str, address: dict[str, str]) -> None:
    """The move to ``page`` (its URL path) at ``address``, by the link ``_follow_link`` draws. Should the next full
    run land elsewhere (the student clicked another page first), ``publish`` has the next look make it again."""
    target, state = pages.at(page), room()
    state.target, state.moves = page, state.moves + 1
    state.move = (target.file, target.title, address, state.moves)


# Clicks the page link before it once per ``data`` (the session's count of moves by link: a move made again, after a
# student came back to the teacher, counts anew), as a student would: the link is in the container whose documented
# ``st-key-`` class is named here.
CLICK_LINK = st.components.v2.component("follow_the_teacher", js="""
export default function ({ data }) {
  if (window.followedMove === data) return;
  let tries = 0;
  const timer = setInterval(() => {
    const link = document.querySelector(".st-key-follow-the-teacher a");
    if (link || ++tries > 100) {
      clearInterval(timer);
      window.followedMove = data;
      link?.click();
    }
  }, 20);
  return () => clearInterval(timer);
}""")


def _follow_link(file: str, title: str, address: dict[str, str], move: int) -> None:
    """The teacher's view on another page, or with settings this session has no widget for, is reached by a page
    link that the browser clicks itself (``CLICK_LINK``), drawn in the look. Streamlit's frontend stops the page's
    timers at a link's click and asks for the new page after them, so every look this browser sent before the move
    is answered before it, on the page and the fragment it was made on, and none after. (``st.switch_page`` from
    the server leaves the browser looking until the switched run's first message: a look answered after the switch
    clears the browser's page.) The link stays in the sidebar should the click not come."""
    with st.container(key="follow-the-teacher"):
        st.page_link(file, label=f"Following the teacher to {title}…", icon=":material/sync:", query_params=address)
        CLICK_LINK(data=move)


def publish(page: str) -> None:
    """After every run: the page it drew (its URL path) is this session's; the teacher's view becomes the room's."""
    state = room()
    state.page = page
    if state.move is None:  # no move pending: one made is over, or was lost
        lost, state.target = state.target not in (None, page), None
        if lost and following():
            state.version = None  # the move was lost (see ``_by_link``): the next look makes it again
    if code() is not None:  # the settings this session has shown on the page: a follower coming back resets them
        state.seen.setdefault(page, set()).update(key for key in st.query_params if key not in URL_KEYS)
    if leading():
        try:
            rooms().lead(code(), token(), student(), _led_view(page))
        except RoomError:  # the room expired, or another of the teacher's browsers took the lead meanwhile
            if rooms().exists(code()):
                state.leads = False
            else:
                leave()
