"""The live class in the app (``rooms``): the sidebar's panel (start a class, join one, follow the teacher), the
join card the teacher projects, the teacher's view published after each of its runs, and followers moved to it.

A follower's session looks at the room's version every ``POLL_S`` seconds (a fragment with ``run_every``: a small
read, no page rerun) and reruns only when it moved: to the teacher's page, settings and slide if it follows, in
place otherwise (a reveal is drawn on every screen). To another page it goes the way a click on a page link goes,
its browser clicking the link itself (``_follow_link``). The teacher's token arrives in the teacher's link
(``?teacher=``), moves into the session at once and leaves the address, which the projector shows."""

import time
from urllib.parse import urlencode

import redis
import segno
import streamlit as st

from classroom import pages
from classroom.live import public_address
from classroom.live.rooms import (
    Question,
    RoomError,
    Rooms,
    View,
    question_id,
    random_name,
    typed_code,
)
from classroom.page import slides
from classroom.page.text import literal
from classroom.state import backend

__all__ = ["ROOM", "TEACHER", "POLL_S", "rooms", "code", "leading", "following", "join_from_link", "panel",
           "join_card", "join_banner", "showing_join", "publish", "room_question"]

ROOM = "room"          # the URL key naming the room: students' links carry it
TEACHER = "teacher"    # the URL key of the teacher's link: the token
POLL_S = 0.5           # a follower looks at the room this often
REPORT_S = 4.0         # and reports its presence this often
OWN_KEYS = {ROOM, TEACHER}
DEFAULT_CHARS = 500    # the longest default value published for followers (a prompt's text)


def rooms() -> Rooms:
    return Rooms(backend.kv())


def code() -> str | None:
    return st.session_state.get("room code")


def _token() -> str | None:
    return st.session_state.get("room token")


def _holds_token() -> bool:
    return bool(code() and _token())


def leading() -> bool:
    """This session holds the teacher's token for its room and leads it (``Rooms.leader``, read at the start of each
    run and at each of the teacher's looks): another browser of the teacher's that opened the teacher's link since
    leads instead."""
    return _holds_token() and st.session_state.get("room leads", False)


def following() -> bool:
    return bool(code()) and not _holds_token() and st.session_state.get("room follow", True)


def _student() -> str:
    """This session: the teacher's lead is a session's (the projector's browser, or the laptop's)."""
    from classroom.session import session_id
    return session_id()


def _voter() -> str:
    """This browser: a student in the class, who answers once and is counted once however many tabs or reloads
    (``session.browser_id``: the token of its cookie; forty tabs of one browser answered forty times)."""
    from classroom.session import browser_id
    return browser_id()


def _join(typed: str, token: str | None = None) -> None:
    """Join the room ``typed`` names (as the teacher when ``token`` is its token); raises ``RoomError``. A student
    takes the teacher's view at the start of the next full run (``_arrive``)."""
    room = typed_code(typed)
    rooms().require(room)
    st.session_state["room code"] = room
    st.session_state["room token"] = token if token and rooms().is_teacher(room, token) else None
    if _token():
        rooms().claim(room, token, _student())
    st.session_state["room leads"] = bool(_token())
    st.session_state.pop("room version", None)
    st.session_state["room arrive"] = not _token()
    st.query_params[ROOM] = room


def join_from_link(page: str) -> None:
    """At the start of every full run on ``page`` (its URL path), before any widget: a follower's move to the
    teacher's view takes its settings (``_move``, ``_apply``) and a move by link is over (``_by_link``); a link's
    ``?room=`` joins its room (``?teacher=`` as its teacher), once, and the token leaves the address; a student who
    has just joined takes the teacher's view before anything is drawn (``_arrive``). An unknown or expired code is
    said above the page and dropped from the address."""
    st.session_state["room page"] = page
    st.session_state.pop("room move", None)
    _apply(*st.session_state.pop("room go", ({}, {})))
    if _holds_token():
        st.session_state["room leads"] = rooms().leader(code()) == _student()
    linked, token = st.query_params.get(ROOM), st.query_params.get(TEACHER)
    if TEACHER in st.query_params:
        del st.query_params[TEACHER]
    try:
        if linked is not None and (typed_code(linked) != code() or token is not None):
            _join(linked, token)
    except RoomError as error:
        del st.query_params[ROOM]
        st.session_state["url_notes"] = [f"The link's class: {error}."]
    if st.session_state.pop("room arrive", False) and following():
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
    st.session_state["room version"] = rooms().version(code())
    if view is None or view == _my_view(page):
        return
    address, settings, texts = _move(view)
    _apply(settings, texts)
    if view.page != page or any(st.query_params.get(key) != text for key, text in address.items()):
        st.switch_page(pages.at(view.page).file, query_params=address)


def _start() -> None:
    room, token = rooms().start(_student())
    st.session_state["room code"], st.session_state["room token"] = room, token
    st.session_state["room leads"] = True
    st.session_state["room join dialog"] = slides.presenting()
    st.session_state.pop("room version", None)
    st.query_params[ROOM] = room


def _leave() -> None:
    for key in ("room code", "room token", "room leads", "room version", "room follow", "room target", "room move",
                "room go", "room arrive", "room join dialog"):
        st.session_state.pop(key, None)
    st.query_params.pop(ROOM, None)


def _public() -> tuple[str, str | None]:
    """(the origin students open, a note for the teacher where they cannot): ``public_address.join_origin`` for the
    teacher's browser's address and the address this server listens on."""
    return public_address.join_origin(st.context.url or "", st.get_option("server.address"), public_address.setting(),
                                      public_address.network_address())


def join_link(room: str) -> str:
    return f"{_public()[0]}/?{urlencode({ROOM: room})}"


def _qr_svg(link: str) -> str:
    """The join link as a QR code, drawn here (``segno``), as SVG markup."""
    return segno.make(link, error="m").svg_inline(scale=8, dark="#111111", light="#ffffff")


def showing_join() -> bool:
    """Whether the teacher's screen shows how to join (the teacher panel's toggle, on by default)."""
    return leading() and st.session_state.get("room show join", True)


def join_card(qr_px: int, beside: bool) -> None:
    """How to join, drawn here: the code in large type, the link students open and its QR code (``beside`` the
    text, else under it); where no other machine can open that link, the teacher is told why."""
    room = code()
    origin, note = _public()
    link = f"{origin}/?{urlencode({ROOM: room})}"
    text, qr = st.columns([3, 1], vertical_alignment="center") if beside else (st.container(), st.container())
    with text:
        st.markdown(f"### Join the class: **{room[:4]} {room[4:]}**")
        st.markdown(f"Open **{literal(link)}**, or open the app and type the code under *Join a class*.")
        if note:
            st.warning(f"{note}.", icon=":material/wifi_off:")
    qr.image(_qr_svg(link), width=qr_px)


@st.dialog("Join the class", width="large")
def _join_dialog() -> None:
    join_card(qr_px=320, beside=False)


def join_banner() -> None:
    """On the teacher's screen while it shows how to join: the card above the page; in presentation mode, where a
    slide fills the screen, the code in the top row (``slides.join_place``), whose button opens the card over the
    slide until it is closed (and opens it once when a class starts while presenting). The start page's title slide
    draws the card in its own layout (``join_card``)."""
    if not showing_join():
        return
    if not slides.presenting():
        with st.container(border=True):
            join_card(qr_px=180, beside=True)
        return
    room = code()
    slides.join_place().button(f"{room[:4]} {room[4:]}", icon=":material/qr_code_2:", width="stretch",
                               help="How to join this class: its code, link and QR code",
                               on_click=lambda: st.session_state.update({"room join dialog": True}))
    if st.session_state.pop("room join dialog", False):
        _join_dialog()


def _say_error(error: RoomError) -> None:
    st.error(f"{error}.", icon=":material/group_off:")


def _teacher_panel(room: str) -> None:
    st.markdown(f"**Leading class {room}**")
    st.toggle("Show the join code on screen", True, key="room show join")
    with st.popover("Your teacher's link", icon=":material/key:", width="stretch"):
        st.caption("Opens this class as its teacher in another browser (the projector's). Keep it to yourself: "
                   "it lets its holder move the class and reveal answers.")
        st.code(f"{_public()[0]}/?{urlencode({ROOM: room, TEACHER: _token()})}", language=None, wrap_lines=True)
    st.download_button("The class's answers (CSV)", rooms().counts_csv(room), f"class-{room}-answers.csv",
                       "text/csv", icon=":material/download:", width="stretch")


def _second_teacher_panel(room: str) -> None:
    """A browser of the teacher's that another one took the lead from (by opening the teacher's link)."""
    st.markdown(f"**Class {room}** is led from another of your browsers, the one that opened your teacher's link "
                "last: this one moves nobody.")
    if st.button("Lead from here", icon=":material/co_present:", width="stretch"):
        rooms().claim(room, _token(), _student())
        st.rerun()


def _student_panel(room: str) -> None:
    st.markdown(f"**In class {room}**")
    st.text_input("your name in the class", st.session_state.get("room name") or random_name(_voter()),
                  key="room name", max_chars=40)
    st.toggle("Follow the teacher", True, key="room follow",
              help="While on, your screen shows the teacher's page, settings and slide within a couple of seconds. "
                   "Turn it off to explore on your own.")
    if not st.session_state["room follow"]:
        st.button("Back to the teacher's view", icon=":material/sync:", width="stretch",
                  on_click=lambda: st.session_state.update({"room follow": True, "room version": None}))


@st.fragment(run_every=POLL_S)
def _watch() -> None:
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
    room = code()
    if room is None:
        return
    if not rooms().exists(room):
        _leave()
        st.rerun()
    if _holds_token():
        if (rooms().leader(room) == _student()) != leading():
            st.rerun()  # the lead moved: the app's run reads it again and redraws the panel
        if leading():
            connected, follow = rooms().presence(room)
            st.caption(f"{connected} students connected, {follow} following you")
        return
    now = time.monotonic()
    if now - st.session_state.get("room reported", 0.0) > REPORT_S:
        st.session_state["room reported"] = now
        rooms().here(room, _voter(), st.session_state.get("room name") or random_name(_voter()), following())
    version = rooms().version(room)
    if version != st.session_state.get("room version"):
        st.session_state["room version"] = version
        view = rooms().view(room) if following() else None
        for key in ("room move", "room go"):  # a newer view replaces a move the browser has not made
            st.session_state.pop(key, None)
        if view is not None and view != _my_view():
            address, *st.session_state["room go"] = _move(view)
            if view.page != st.session_state.get("room page") or any(
                    st.query_params.get(key) != text for key, text in address.items()):
                _by_link(view.page, address)
        if "room move" not in st.session_state:
            st.rerun()
    if (move := st.session_state.get("room move")) is not None:
        _follow_link(*move)


def _my_view(page: str | None = None) -> View:
    page = st.session_state.get("room page", "") if page is None else page
    params = tuple(sorted((key, st.query_params[key]) for key in st.query_params if key not in OWN_KEYS))
    return View(page, params, st.session_state.get(slides.SUB, 0))


def _led_view(page: str) -> View:
    """The teacher's view of ``page``, with the defaults a follower's own settings go back to: this session's
    values of its other settings (a widget's key is a name; the app's own session keys have spaces)."""
    view = _my_view(page)
    named = {key for key, _ in view.params} | OWN_KEYS
    defaults = tuple(sorted((key, str(value)) for key, value in st.session_state.items()
                            if isinstance(key, str) and key.isidentifier() and key not in named
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
    address, settings, texts = {ROOM: code()}, {slides.SUB: view.slide}, {}
    for key, text in theirs.items():
        if st.session_state.get(key) is not None:
            settings[key] = _as_value(st.session_state[key], text)
        else:
            address[key] = texts[key] = text
    seen = st.session_state.get("room seen keys", {}).get(view.page, set())  # this session's settings there
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
    target = pages.at(page)
    st.session_state["room target"] = page
    st.session_state["room moves"] = st.session_state.get("room moves", 0) + 1
    st.session_state["room move"] = (target.file, target.title, address, st.session_state["room moves"])


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


def panel() -> None:
    """The sidebar's class panel."""
    with st.expander("Live class", expanded=bool(code()), icon=":material/groups:"):
        room = code()
        if room is None:
            from classroom.session import teacher
            if teacher() and st.button("Start a class", icon=":material/co_present:", width="stretch"):
                _start()
                st.rerun()
            with st.form("join a class", border=False):
                typed = st.text_input("join a class: its code", max_chars=20, placeholder="e.g. K7QM 2XPD")
                if st.form_submit_button("Join", width="stretch") and typed.strip():
                    try:
                        _join(typed)
                        st.rerun()
                    except RoomError as error:
                        _say_error(error)
            return
        if leading():
            _teacher_panel(room)
        elif _holds_token():
            _second_teacher_panel(room)
        else:
            _student_panel(room)
        if st.button("Leave the class", icon=":material/logout:", width="stretch", type="tertiary"):
            _leave()
            st.rerun()
        _watch()


def publish(page: str) -> None:
    """After every run: the page it drew (its URL path) is this session's; the teacher's view becomes the room's."""
    st.session_state["room page"] = page
    if ("room move" not in st.session_state and st.session_state.pop("room target", None) not in (None, page)
            and following()):
        st.session_state["room version"] = None  # the move was lost (see ``_by_link``): the next look makes it again
    if code() is not None:  # the settings this session has shown on the page: a follower coming back resets them
        seen = st.session_state.setdefault("room seen keys", {}).setdefault(page, set())
        seen.update(key for key in st.query_params if key not in OWN_KEYS)
    if leading():
        try:
            rooms().lead(code(), _token(), _student(), _led_view(page))
        except RoomError:  # the room expired, or another of the teacher's browsers took the lead meanwhile
            if rooms().exists(code()):
                st.session_state["room leads"] = False
            else:
                _leave()


def room_question(key: str, text: str, options: list[str], accepted, where: str, shown: bool) -> Question | None:
    """The room's state of this question: asked by the teacher's screen once it shows it (``shown``: in
    presentation mode, on the slide shown; open until revealed), or as the teacher asked it, for a student. None
    outside a room, in a teacher's browser that does not lead, for a question the teacher's screen has not shown,
    and for a student whose teacher has not asked it (exploring)."""
    if code() is None or (_holds_token() and not leading()):
        return None
    qid = question_id(key, text, tuple(options))
    try:
        if leading() and shown:
            return rooms().ask(code(), _token(), Question(qid, text, tuple(options), tuple(accepted), where))
        return rooms().question(code(), qid)
    except RoomError:
        return None


def reveal(qid: str, revealed: bool) -> None:
    rooms().reveal(code(), _token(), qid, revealed)


def answer(qid: str, option: str | None) -> None:
    """This student's answer to the room's question (None: none given yet)."""
    if option is not None:
        try:
            rooms().answer(code(), qid, _voter(), option)
        except RoomError as error:
            _say_error(error)


def tally(qid: str) -> dict[str, int]:
    return rooms().tally(code(), qid)


def my_answer(qid: str) -> str | None:
    return rooms().answer_of(code(), qid, _voter())


def presence() -> tuple[int, int]:
    return rooms().presence(code())
