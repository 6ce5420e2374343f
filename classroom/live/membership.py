"""This session's place in a live class (``rooms``): one ``RoomState`` under one session key, and what follows
from it: the room's code, whether this session is its teacher and leads it, whether it follows; joining, starting
and leaving a room. The teacher's token arrives in the teacher's link (``?teacher=``), moves into the session at
once and leaves the address, which the projector shows."""

from dataclasses import dataclass, field

import streamlit as st

from classroom import keys
from classroom.live.rooms import Rooms, typed_code
from classroom.page import slides
from classroom.state import backend

__all__ = ["ROOM", "TEACHER", "RoomState", "room", "rooms", "code", "token", "holds_token", "leading", "following",
           "student", "voter", "join", "start", "leave"]

ROOM = "room"          # the URL key naming the room: students' links carry it
TEACHER = "teacher"    # the URL key of the teacher's link: the token


@dataclass
class RoomState:
    """What a session keeps of its live class. ``version``: the room's version its screen shows (None: look again);
    ``page``: the URL path of its last run; a follower's move by link is ``target`` (the page), ``move`` (the
    link's file, title, address and count, drawn by each look until the browser follows it), ``moves`` (that
    count), ``go`` (its settings and the address's values for widgets not drawn yet, set at the next run's start);
    ``arrive``: a student who has just joined takes the teacher's view before anything is drawn; ``seen``: per page,
    the settings this session has shown there; ``reported``: when its presence was last reported."""

    code: str | None = None
    token: str | None = None
    leads: bool = False
    version: int | None = None
    page: str = ""
    target: str | None = None
    move: tuple | None = None
    moves: int = 0
    go: tuple[dict, dict] | None = None
    arrive: bool = False
    join_dialog: bool = False
    reported: float = 0.0
    seen: dict[str, set[str]] = field(default_factory=dict)


def room() -> RoomState:
    """This session's ``RoomState``, made on first use; changed in place."""
    return st.session_state.setdefault(keys.ROOM, RoomState())


def rooms() -> Rooms:
    return Rooms(backend.kv())


def code() -> str | None:
    return room().code


def token() -> str | None:
    return room().token


def holds_token() -> bool:
    return bool(code() and token())


def leading() -> bool:
    """This session holds the teacher's token for its room and leads it (``Rooms.leader``, read at the start of each
    run and at each of the teacher's looks): another browser of the teacher's that opened the teacher's link since
    leads instead."""
    return holds_token() and room().leads


def following() -> bool:
    return bool(code()) and not holds_token() and st.session_state.get(keys.ROOM_FOLLOW, True)


def student() -> str:
    """This session: the teacher's lead is a session's (the projector's browser, or the laptop's)."""
    from classroom.session import session_id
    return session_id()


def voter() -> str:
    """This browser: a student in the class, who answers once and is counted once however many tabs or reloads
    (``session.browser_id``: the token of its cookie; forty tabs of one browser answered forty times)."""
    from classroom.session import browser_id
    return browser_id()


def join(typed: str, teacher_token: str | None = None) -> None:
    """Join the room ``typed`` names (as the teacher when ``teacher_token`` is its token); raises ``RoomError``. A
    student takes the teacher's view at the start of the next full run (``follow.arrive``)."""
    code_ = typed_code(typed)
    rooms().require(code_)
    held = teacher_token if teacher_token and rooms().is_teacher(code_, teacher_token) else None
    if held:
        rooms().claim(code_, held, student())
    state = room()
    state.code, state.token, state.leads, state.version, state.arrive = code_, held, bool(held), None, not held
    st.query_params[ROOM] = code_


def start() -> None:
    """Start a room with this session as its teacher; starting while presenting opens the join card once."""
    code_, held = rooms().start(student())
    state = room()
    state.code, state.token, state.leads, state.version = code_, held, True, None
    state.join_dialog = slides.presenting()
    st.query_params[ROOM] = code_


def leave() -> None:
    """Out of the room; what the session's screen and browser know stays (its page, the count of moves by link
    its browser has clicked, the settings it has shown)."""
    old = room()
    st.session_state[keys.ROOM] = RoomState(page=old.page, moves=old.moves, seen=old.seen, reported=old.reported)
    st.session_state.pop(keys.ROOM_FOLLOW, None)
    st.query_params.pop(ROOM, None)
