"""A live class: a room the teacher starts and the class joins by its code. The teacher's view (page, settings,
slide) is the room's, for students who follow it; the class's predictions go to the room, counted once per student,
and the teacher reveals each question on every screen at once.

A room is a few keys in the class's shared state (``shared.kv``: this process, or Redis across replicas), all
expiring ``TTL_S`` after the room's last use. It holds no personal data: a student is a session's random id and a
two-word name they may change. Only the holder of the teacher's token (made at the start, kept as its hash) moves
the view, opens, reveals or reopens a question; a student changes only their own answer and presence. The teacher
may hold it in several browsers (a laptop, the projector's); one of them leads: the one that started the room or
last claimed it (opened the teacher's link), so two cannot move the class in turn."""

import csv
import hashlib
import hmac
import io
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from classroom.page.text import quoted

__all__ = ["CODE_ALPHABET", "CODE_LENGTH", "TTL_S", "RoomError", "View", "Question", "question_id", "typed_code",
           "random_name", "Rooms"]

CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"  # no 0/O or 1/I/L: read off a projector and typed on a laptop
CODE_LENGTH = 8     # 31⁸ ≈ 8.5·10¹¹ codes: a thousand guesses a second for a 4-hour class finds one in 60,000
TTL_S = 4 * 3600    # a room ends this long after its last use
PRESENT_S = 10.0    # a student whose browser reported within this is connected
GONE_S = 60.0       # one silent this long has left: its row is dropped, so presence costs what the class is now
ADJECTIVES = ("amber", "brisk", "calm", "clever", "daring", "eager", "gentle", "golden", "happy", "jolly", "keen",
              "lively", "lucky", "mellow", "nimble", "quiet", "rapid", "silver", "steady", "sunny", "swift", "witty")
ANIMALS = ("badger", "beaver", "crane", "dolphin", "falcon", "ferret", "gecko", "heron", "ibis", "koala", "lemur",
           "lynx", "marten", "otter", "owl", "panda", "puffin", "raven", "seal", "stoat", "tapir", "wren")


class RoomError(Exception):
    """An unknown or expired code, an action only the teacher may take, an answer to a closed question."""


@dataclass(frozen=True)
class View:
    """What a follower sees: the page (its URL path, "" for the start page), the URL's settings (sorted, without the
    room's own keys) and the slide within the part shown in presentation mode. ``defaults``: the teacher's other
    settings, at their widgets' defaults, which the URL leaves out: a follower's own setting that the teacher's URL
    lacks goes back to it (not part of the view's identity: it changes with the settings the URL has)."""
    page: str
    params: tuple[tuple[str, str], ...]
    slide: int = 0
    defaults: tuple[tuple[str, str], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Question:
    qid: str                     # question_id: the question's key and a digest of its text and options
    text: str
    options: tuple[str, ...]
    accepted: tuple[str, ...]    # the options its computed rule accepts on the teacher's run
    where: str                   # the page and part it is asked in, for the export
    revealed: bool = False
    asked: float = 0.0           # when the teacher's screen first showed it (the room's clock): the export's order


def question_id(key: str, text: str, options: tuple[str, ...]) -> str:
    """A question asked under ``key`` with this text and these options: other settings asking other numbers under
    the same key are another question, with answers of their own."""
    return f"{key}|{hashlib.sha256(json.dumps([text, list(options)]).encode()).hexdigest()[:12]}"


def typed_code(typed: str) -> str:
    """A code as a student types it (any case, spaces and dashes ignored), or a ``RoomError`` quoting what was typed
    (a link's ``?room=`` is anyone's text: cut, and drawn as text, never as Markdown)."""
    code = "".join(ch for ch in typed.upper() if ch not in " -")
    if len(code) != CODE_LENGTH or not set(code) <= set(CODE_ALPHABET):
        raise RoomError(f"“{quoted(typed)}” is not a class's code: a code is {CODE_LENGTH} letters and digits, as "
                        "the teacher's screen shows it")
    return code


def random_name(student: str) -> str:
    """Two words drawn from the student's session id: the name the class sees until they change it."""
    digest = hashlib.sha256(student.encode()).digest()
    return f"{ADJECTIVES[digest[0] % len(ADJECTIVES)]} {ANIMALS[digest[1] % len(ANIMALS)]}"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Rooms:
    """Rooms in a key-value store with Redis's commands (``redis.Redis`` or ``local_kv.LocalKV``)."""

    def __init__(self, kv, clock: Callable[[], float] = time.time):
        self.kv, self.clock = kv, clock

    @staticmethod
    def _key(code: str, name: str) -> str:
        return f"classroom:room:{code}:{name}"

    def _names(self, code: str) -> list[str]:
        return [self._key(code, name) for name in ("meta", "view", "version", "questions", "answers", "students")]

    def _touch(self, code: str) -> None:
        for key in self._names(code):
            self.kv.expire(key, TTL_S)

    def start(self, session: str) -> tuple[str, str]:
        """A new room led by ``session``: (its code, the teacher's token)."""
        token = secrets.token_urlsafe(24)
        while True:
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            meta = json.dumps({"token": _digest(token), "lead": session})
            if self.kv.set(self._key(code, "meta"), meta, ex=TTL_S, nx=True):
                return code, token

    def exists(self, code: str) -> bool:
        return self.kv.get(self._key(code, "meta")) is not None

    @staticmethod
    def _unknown(code: str) -> RoomError:
        return RoomError(f"no class has the code {code} on this server: check the code on the teacher's screen "
                         f"(a class ends {TTL_S // 3600} hours after its last use)")

    def require(self, code: str) -> None:
        if not self.exists(code):
            raise self._unknown(code)

    def _meta(self, code: str) -> dict | None:
        """The room's teacher: {"token": the token's hash, "lead": the leading session}; None for no room."""
        raw = self.kv.get(self._key(code, "meta"))
        return json.loads(raw) if raw is not None else None

    @staticmethod
    def _holds(meta: dict | None, token: str | None) -> bool:
        return bool(token) and meta is not None and hmac.compare_digest(meta["token"], _digest(token))

    def is_teacher(self, code: str, token: str | None) -> bool:
        return self._holds(self._meta(code), token)

    def _teacher(self, code: str, token: str | None, action: str) -> dict:
        """The room's meta, once ``token`` is its teacher's."""
        if (meta := self._meta(code)) is None:
            raise self._unknown(code)
        if not self._holds(meta, token):
            raise RoomError(f"only the teacher's session can {action}")
        return meta

    def leader(self, code: str) -> str | None:
        """The teacher's session that leads the room."""
        meta = self._meta(code)
        return meta["lead"] if meta is not None else None

    def claim(self, code: str, token: str | None, session: str) -> None:
        """``session``, holding the teacher's token, leads the room from now on."""
        meta = self._teacher(code, token, "lead the class")
        self.kv.set(self._key(code, "meta"), json.dumps({**meta, "lead": session}), ex=TTL_S)

    def version(self, code: str) -> int:
        """Moves on every change a follower must see: the view, a question revealed or reopened."""
        return int(self.kv.get(self._key(code, "version")) or 0)

    def view(self, code: str) -> View | None:
        raw = self.kv.get(self._key(code, "view"))
        if raw is None:
            return None
        page, params, slide, defaults = json.loads(raw)
        return View(page, tuple(tuple(pair) for pair in params), slide, tuple(tuple(pair) for pair in defaults))

    def lead(self, code: str, token: str | None, session: str, view: View) -> bool:
        """The leading session's view becomes the room's; whether it changed."""
        if self._teacher(code, token, "lead the class")["lead"] != session:
            raise RoomError("another of the teacher's browsers leads the class: the one that opened the teacher's "
                            "link last")
        if self.view(code) == view:
            return False
        self.kv.set(self._key(code, "view"), json.dumps([view.page, view.params, view.slide, view.defaults]),
                    ex=TTL_S)
        self.kv.incr(self._key(code, "version"))
        self._touch(code)
        return True

    def ask(self, code: str, token: str | None, question: Question) -> Question:
        """The teacher's slide asks ``question``: open, unless the room already has it (revealed or not)."""
        self._teacher(code, token, "ask the class")
        if (known := self.question(code, question.qid)) is not None:
            return known
        question = replace(question, asked=self.clock())
        self.kv.hset(self._key(code, "questions"), question.qid, json.dumps(asdict(question)))
        self._touch(code)
        return question

    def question(self, code: str, qid: str) -> Question | None:
        raw = self.kv.hget(self._key(code, "questions"), qid)
        if raw is None:
            return None
        fields = json.loads(raw)
        return Question(**{**fields, "options": tuple(fields["options"]), "accepted": tuple(fields["accepted"])})

    def reveal(self, code: str, token: str | None, qid: str, revealed: bool = True) -> None:
        """Reveal the question on every screen (``revealed=False``: reopen it; the answers given stay)."""
        self._teacher(code, token, "reveal or reopen a question")
        if (known := self.question(code, qid)) is None:
            raise RoomError("the room has no such question")
        self.kv.hset(self._key(code, "questions"), qid, json.dumps({**asdict(known), "revealed": revealed}))
        self.kv.incr(self._key(code, "version"))
        self._touch(code)

    def answer(self, code: str, qid: str, student: str, option: str) -> None:
        """The student's answer; a new one replaces theirs. Only while the question is open."""
        self.require(code)
        question = self.question(code, qid)
        if question is None or question.revealed:
            raise RoomError("this question is not open in the room: its answer is revealed, or the teacher has not "
                            "asked it")
        if option not in question.options:
            raise RoomError(f"{option!r} is not one of the question's options")
        self.kv.hset(self._key(code, "answers"), f"{qid}\n{student}", option)

    def answer_of(self, code: str, qid: str, student: str) -> str | None:
        raw = self.kv.hget(self._key(code, "answers"), f"{qid}\n{student}")
        return raw.decode() if raw is not None else None

    def tally(self, code: str, qid: str) -> dict[str, int]:
        """How many students gave each option (every option, zeros included), one answer each."""
        question = self.question(code, qid)
        counts = dict.fromkeys(question.options if question else (), 0)
        for field, option in self.kv.hgetall(self._key(code, "answers")).items():
            if field.decode().split("\n")[0] == qid and option.decode() in counts:
                counts[option.decode()] += 1
        return counts

    def here(self, code: str, student: str, name: str, following: bool) -> None:
        """The student (a browser) reports itself, under their name, following the teacher or not."""
        self.kv.hset(self._key(code, "students"), student, json.dumps([name, self.clock(), following]))

    def presence(self, code: str) -> tuple[int, int]:
        """(students connected, of whom following): browsers that reported within ``PRESENT_S``. Those silent for
        ``GONE_S`` are dropped from the room (300 joins in a class kept 300 rows read at every teacher's look)."""
        now, key = self.clock(), self._key(code, "students")
        rows = {student: json.loads(raw) for student, raw in self.kv.hgetall(key).items()}
        if gone := [student for student, (_, seen, _) in rows.items() if now - seen > GONE_S]:
            self.kv.hdel(key, *gone)
        live = [following for _, seen, following in rows.values() if now - seen <= PRESENT_S]
        return len(live), sum(live)

    def counts_csv(self, code: str) -> str:
        """Every question the room was asked, in the order the teacher's screen showed them: where (the page and
        part), the question, each option, whether its rule accepts it on the teacher's run, and how many chose
        it."""
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["where", "question", "option", "accepted", "count", "revealed"])
        asked = [self.question(code, json.loads(raw)["qid"]) for raw in self.kv.hgetall(self._key(code, "questions")).values()]
        for question in sorted(asked, key=lambda question: question.asked):
            for option, count in self.tally(code, question.qid).items():
                writer.writerow([_cell(question.where), _cell(question.text), _cell(option), option in question.accepted,
                                 count, question.revealed])
        return out.getvalue()


def _cell(text: str) -> str:
    """A text cell of the export, never a formula: a spreadsheet runs a cell that starts with = + - @ (or a tab or a
    return), so such a cell gets a leading apostrophe, which spreadsheets show as text."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
