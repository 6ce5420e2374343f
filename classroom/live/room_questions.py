"""The room's side of a question (``page.questions`` draws it): asked by the teacher's screen, answered once per
student, revealed by the teacher on every screen, counted."""

import streamlit as st

from classroom.live.membership import code, holds_token, leading, rooms, token, voter
from classroom.live.rooms import Question, RoomError, question_id

__all__ = ["room_question", "reveal", "answer", "tally", "my_answer", "presence"]


def room_question(key: str, text: str, options: list[str], accepted, where: str, shown: bool) -> Question | None:
    """The room's state of this question: asked by the teacher's screen once it shows it (``shown``: in
    presentation mode, on the slide shown; open until revealed), or as the teacher asked it, for a student. None
    outside a room, in a teacher's browser that does not lead, for a question the teacher's screen has not shown,
    and for a student whose teacher has not asked it (exploring)."""
    if code() is None or (holds_token() and not leading()):
        return None
    qid = question_id(key, text, tuple(options))
    try:
        if leading() and shown:
            return rooms().ask(code(), token(), Question(qid, text, tuple(options), tuple(accepted), where))
        return rooms().question(code(), qid)
    except RoomError:
        return None


def reveal(qid: str, revealed: bool) -> None:
    rooms().reveal(code(), token(), qid, revealed)


def answer(qid: str, option: str | None) -> None:
    """This student's answer to the room's question (None: none given yet); a refusal (the room ended) is said."""
    if option is not None:
        try:
            rooms().answer(code(), qid, voter(), option)
        except RoomError as error:
            st.error(f"{error}.", icon=":material/group_off:")


def tally(qid: str) -> dict[str, int]:
    return rooms().tally(code(), qid)


def my_answer(qid: str) -> str | None:
    return rooms().answer_of(code(), qid, voter())


def presence() -> tuple[int, int]:
    return rooms().presence(code())
