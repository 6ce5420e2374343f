"""A live class's rooms, on both backends (this process's and Redis): codes, the teacher's token, the view that
followers read, questions counted once per student and revealed only by the teacher, expiry, the export."""

import csv
import io

import pytest
import redis

from classroom.live.rooms import (CODE_ALPHABET, CODE_LENGTH, GONE_S, TTL_S, Question, RoomError, Rooms, View,
                                  question_id, random_name, typed_code)
from classroom.state.local_kv import LocalKV


class Clock:
    def __init__(self):
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["local", "redis"])
def rooms(request):
    if request.param == "local":
        yield Rooms(LocalKV())
        return
    server = request.getfixturevalue("redis_server")
    shared = redis.Redis.from_url(server.url.rsplit("/", 1)[0] + "/6")
    shared.flushdb()
    yield Rooms(shared)
    shared.flushdb()


TEACHER = "the teacher's session"
QUESTION = Question(question_id("heads", "Which head breaks it?", ("L1H0", "L1H1")), "Which head breaks it?",
                    ("L1H0", "L1H1"), ("L1H0",), "Circuits: two layers · ablation")


def test_a_code_is_eight_letters_easy_to_read_and_typed_any_way(rooms):
    code, token = rooms.start(TEACHER)
    assert len(code) == CODE_LENGTH and set(code) <= set(CODE_ALPHABET) and not set("01OIL") & set(code)
    assert typed_code(f" {code[:4].lower()}-{code[4:]} ") == code and rooms.exists(code)
    assert len(token) >= 32 and token not in code


def test_an_unknown_code_is_refused_with_a_message(rooms):
    with pytest.raises(RoomError, match="no class has the code ABCDEFGH on this server"):
        rooms.answer("ABCDEFGH", QUESTION.qid, "s1", "L1H0")


def test_only_the_teachers_token_leads_asks_and_reveals(rooms):
    code, token = rooms.start(TEACHER)
    view = View("circuits-two", (("model", "zoo: attn-only-2l"), ("part", "Ablation")), 1)
    for wrong in (None, "", "a guess", rooms.start(TEACHER)[1]):
        with pytest.raises(RoomError, match="only the teacher's session can lead the class"):
            rooms.lead(code, wrong, TEACHER, view)
        with pytest.raises(RoomError, match="only the teacher's session can ask the class"):
            rooms.ask(code, wrong, QUESTION)
    assert rooms.view(code) is None and rooms.version(code) == 0
    assert rooms.lead(code, token, TEACHER, view) and rooms.view(code) == view and rooms.version(code) == 1
    assert not rooms.lead(code, token, TEACHER, view) and rooms.version(code) == 1  # the same view moves nobody
    rooms.ask(code, token, QUESTION)
    with pytest.raises(RoomError, match="only the teacher's session can reveal"):
        rooms.reveal(code, "a guess", QUESTION.qid)
    assert not rooms.question(code, QUESTION.qid).revealed


def test_one_of_the_teachers_browsers_leads_the_last_to_claim_it(rooms):
    code, token = rooms.start(TEACHER)
    assert rooms.leader(code) == TEACHER
    with pytest.raises(RoomError, match="only the teacher's session can lead the class"):
        rooms.claim(code, "a guess", "a student's session")
    rooms.claim(code, token, "the projector's session")  # the teacher's link opened on the projector
    assert rooms.leader(code) == "the projector's session"
    with pytest.raises(RoomError, match="another of the teacher's browsers leads the class"):
        rooms.lead(code, token, TEACHER, View("patterns", ()))
    assert rooms.view(code) is None and rooms.version(code) == 0  # the laptop moved nobody
    assert rooms.lead(code, token, "the projector's session", View("patterns", ())) and rooms.version(code) == 1
    rooms.claim(code, token, TEACHER)  # Lead from here
    assert rooms.leader(code) == TEACHER


def test_each_student_counts_once_and_a_new_answer_replaces_the_old(rooms):
    code, token = rooms.start(TEACHER)
    with pytest.raises(RoomError, match="not open in the room"):
        rooms.answer(code, QUESTION.qid, "s1", "L1H0")  # not asked yet
    rooms.ask(code, token, QUESTION)
    rooms.answer(code, QUESTION.qid, "s1", "L1H1")
    rooms.answer(code, QUESTION.qid, "s1", "L1H0")
    rooms.answer(code, QUESTION.qid, "s2", "L1H1")
    assert rooms.tally(code, QUESTION.qid) == {"L1H0": 1, "L1H1": 1}
    assert rooms.answer_of(code, QUESTION.qid, "s1") == "L1H0"
    with pytest.raises(RoomError, match="not one of the question's options"):
        rooms.answer(code, QUESTION.qid, "s3", "L0H0")
    before = rooms.version(code)
    rooms.reveal(code, token, QUESTION.qid)
    assert rooms.version(code) == before + 1 and rooms.question(code, QUESTION.qid).revealed
    with pytest.raises(RoomError, match="not open in the room"):
        rooms.answer(code, QUESTION.qid, "s3", "L1H0")
    rooms.reveal(code, token, QUESTION.qid, revealed=False)  # reopened: the answers given stay
    rooms.answer(code, QUESTION.qid, "s3", "L1H0")
    assert rooms.tally(code, QUESTION.qid) == {"L1H0": 2, "L1H1": 1}
    assert rooms.ask(code, token, QUESTION) == rooms.question(code, QUESTION.qid)  # asked again: its state stays


def test_other_settings_asking_other_numbers_are_another_question():
    assert question_id("bin", "Which bin?", ("a", "b")) != question_id("bin", "Which bin at seed 1?", ("a", "b"))
    assert question_id("bin", "Which bin?", ("a", "b")) == question_id("bin", "Which bin?", ("a", "b"))


def test_presence_counts_the_students_seen_lately_and_those_following():
    clock = Clock()
    rooms = Rooms(LocalKV(clock), clock)
    code, _ = rooms.start(TEACHER)
    rooms.here(code, "s1", "calm otter", True)
    rooms.here(code, "s2", "swift heron", False)
    clock.now += 5
    rooms.here(code, "s3", "keen lynx", True)
    assert rooms.presence(code) == (3, 2)
    clock.now += 8  # s1 and s2 last reported 13 s ago: gone
    assert rooms.presence(code) == (1, 1)


def test_a_student_silent_for_a_minute_leaves_the_rooms_presence(rooms):
    clock = Clock()
    rooms.clock = clock
    code, _ = rooms.start(TEACHER)
    for k in range(300):  # a class's worth of joins over a lesson
        rooms.here(code, f"browser {k}", "calm otter", True)
    clock.now += GONE_S + 1
    rooms.here(code, "browser 300", "swift heron", True)
    assert rooms.presence(code) == (1, 1)
    assert len(rooms.kv.hgetall(f"classroom:room:{code}:students")) == 1  # the others' rows are gone


def test_a_room_ends_hours_after_its_last_use():
    clock = Clock()
    rooms = Rooms(LocalKV(clock), clock)
    code, token = rooms.start(TEACHER)
    clock.now += TTL_S - 60
    rooms.lead(code, token, TEACHER, View("", ()))  # a use: the room lives on
    clock.now += TTL_S - 60
    assert rooms.exists(code) and rooms.view(code) == View("", ())
    clock.now += 120
    assert not rooms.exists(code) and rooms.view(code) is None


def test_names_are_two_words_from_the_session_and_hold_nothing_personal():
    assert random_name("session a") == random_name("session a") and len(random_name("session a").split()) == 2
    assert len({random_name(f"session {i}") for i in range(50)}) > 20


def test_the_export_has_every_question_with_its_counts_and_accepted_options(rooms):
    code, token = rooms.start(TEACHER)
    rooms.ask(code, token, QUESTION)
    rooms.answer(code, QUESTION.qid, "s1", "L1H0")
    rows = list(csv.DictReader(io.StringIO(rooms.counts_csv(code))))
    assert [(r["option"], r["accepted"], r["count"]) for r in rows] == [("L1H0", "True", "1"), ("L1H1", "False", "0")]
    assert rows[0]["where"] == "Circuits: two layers · ablation" and rows[0]["question"] == "Which head breaks it?"


def test_the_teachers_defaults_travel_with_the_view_but_move_nobody(rooms):
    code, token = rooms.start(TEACHER)
    view = View("patterns", (("dest", "14"),), 0, (("head", "0"), ("layer", "1")))
    assert rooms.lead(code, token, TEACHER, view) and rooms.view(code).defaults == view.defaults
    assert not rooms.lead(code, token, TEACHER, View("patterns", (("dest", "14"),), 0, (("head", "0"),)))
    assert rooms.version(code) == 1


def test_the_export_lists_the_questions_in_the_order_the_class_was_asked_them():
    clock = Clock()
    rooms = Rooms(LocalKV(clock), clock)
    code, token = rooms.start(TEACHER)
    later = Question(question_id("lens", "At which layer?", ("0", "1")), "At which layer?", ("0", "1"), ("1",),
                     "The residual stream · Logit lens")
    for question in (later, QUESTION):  # the ids' hash order is not the order asked
        clock.now += 10
        rooms.ask(code, token, question)
    assert rooms.question(code, later.qid).asked == 1_010.0
    rooms.ask(code, token, later)  # asked again: it keeps its first place
    rows = list(csv.DictReader(io.StringIO(rooms.counts_csv(code))))
    assert [row["where"] for row in rows] == ["The residual stream · Logit lens"] * 2 + ["Circuits: two layers · ablation"] * 2


def test_the_export_holds_no_formula():
    """Issue 38 (low): an option or question starting with = + - @ was a formula cell in the teacher's spreadsheet."""
    rooms = Rooms(LocalKV())
    code, token = rooms.start(TEACHER)
    question = Question(question_id("bin", "=HYPERLINK(\"x\")", ("-0.5 to 0", "@SUM(A1)")), "=HYPERLINK(\"x\")",
                        ("-0.5 to 0", "@SUM(A1)"), ("-0.5 to 0",), "+page")
    rooms.ask(code, token, question)
    rows = list(csv.DictReader(io.StringIO(rooms.counts_csv(code))))
    assert {row["option"] for row in rows} == {"'-0.5 to 0", "'@SUM(A1)"}
    assert rows[0]["question"] == "'=HYPERLINK(\"x\")" and rows[0]["where"] == "'+page"
