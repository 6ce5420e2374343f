"""The sidebar's Live class panel: start a class (the teacher's machine), join one by its code, and once in one:
the teacher's controls (the join card's toggle, the teacher's link, the class's answers as CSV, the lead), or a
student's name and Follow the teacher; the room's look runs under it (``follow.watch``)."""

from urllib.parse import urlencode

import streamlit as st

from classroom import keys
from classroom.live.follow import watch
from classroom.live.join_card import public
from classroom.live.membership import (ROOM, TEACHER, code, holds_token, join, leading, leave, room, rooms, start,
                                       student, token, voter)
from classroom.live.rooms import RoomError, random_name

__all__ = ["panel"]


def _say_error(error: RoomError) -> None:
    st.error(f"{error}.", icon=":material/group_off:")


def _teacher_panel(code_: str) -> None:
    st.markdown(f"**Leading class {code_}**")
    st.toggle("Show the join code on screen", True, key=keys.ROOM_SHOW_JOIN)
    with st.popover("Your teacher's link", icon=":material/key:", width="stretch"):
        st.caption("Opens this class as its teacher in another browser (the projector's). Keep it to yourself: "
                   "it lets its holder move the class and reveal answers.")
        st.code(f"{public()[0]}/?{urlencode({ROOM: code_, TEACHER: token()})}", language=None, wrap_lines=True)
    st.download_button("The class's answers (CSV)", rooms().counts_csv(code_), f"class-{code_}-answers.csv",
                       "text/csv", icon=":material/download:", width="stretch")


def _second_teacher_panel(code_: str) -> None:
    """A browser of the teacher's that another one took the lead from (by opening the teacher's link)."""
    st.markdown(f"**Class {code_}** is led from another of your browsers, the one that opened your teacher's link "
                "last: this one moves nobody.")
    if st.button("Lead from here", icon=":material/co_present:", width="stretch"):
        rooms().claim(code_, token(), student())
        st.rerun()


def _back_to_teacher() -> None:
    st.session_state[keys.ROOM_FOLLOW] = True
    room().version = None


def _student_panel(code_: str) -> None:
    st.markdown(f"**In class {code_}**")
    st.text_input("your name in the class", st.session_state.get(keys.ROOM_NAME) or random_name(voter()),
                  key=keys.ROOM_NAME, max_chars=40)
    st.toggle("Follow the teacher", True, key=keys.ROOM_FOLLOW,
              help="While on, your screen shows the teacher's page, settings and slide within a couple of seconds. "
                   "Turn it off to explore on your own.")
    if not st.session_state[keys.ROOM_FOLLOW]:
        st.button("Back to the teacher's view", icon=":material/sync:", width="stretch", on_click=_back_to_teacher)


def panel() -> None:
    """The sidebar's class panel."""
    with st.expander("Live class", expanded=bool(code()), icon=":material/groups:"):
        code_ = code()
        if code_ is None:
            from classroom.session import teacher
            if teacher() and st.button("Start a class", icon=":material/co_present:", width="stretch"):
                start()
                st.rerun()
            with st.form("join a class", border=False):
                typed = st.text_input("join a class: its code", max_chars=20, placeholder="e.g. K7QM 2XPD")
                if st.form_submit_button("Join", width="stretch") and typed.strip():
                    try:
                        join(typed)
                        st.rerun()
                    except RoomError as error:
                        _say_error(error)
            return
        if leading():
            _teacher_panel(code_)
        elif holds_token():
            _second_teacher_panel(code_)
        else:
            _student_panel(code_)
        if st.button("Leave the class", icon=":material/logout:", width="stretch", type="tertiary"):
            leave()
            st.rerun()
        watch()
