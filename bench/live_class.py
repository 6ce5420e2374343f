"""The room mode of ``bench/classroom_load.py`` (``--room``): a live class, one teacher and ``--clients`` students
following them, each a websocket speaking Streamlit's protocol as a browser tab does (a follower's tab reruns the
room's fragment every ``run_every`` seconds, as Streamlit's frontend does on its ``auto_rerun`` message, and clicks
the page link the app asks it to click when the teacher went to another page).

The teacher starts a class on the Patterns page, presenting (and presents throughout: the moves are the slide's
settings and its part), the students join by its link over the first 30 s, and the server
is then left alone with them for ``IDLE_S``: its CPU with the whole class idle and following. Then, for
``--minutes``, the teacher moves one of the page's widgets every 20–40 s; a third of the way in they open the
Equivalence page, whose questions the room asks, the students answer 10–30 s later, and the teacher reveals one
30–40 s after opening it (one question a run: asked again, a revealed question stays revealed). Printed: the time
from the teacher's click to each follower's first full run showing the teacher's page and settings, and from the
reveal to its first run drawing the graded answer, each click's own figures beside the teacher's run; how often a
follower had not shown the teacher's view by the teacher's next click, and how often one of its looks, sent before
the page changed, was answered under the page left (Streamlit's frontend then clears the page it shows); the
server's CPU with the idle class; the reply times of the teacher's moves and the answers."""

import asyncio
import random
import time
from urllib.parse import parse_qsl

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.asyncio.client import connect

from bench import results
from bench.student import Stats, Student, quantiles

IDLE_S = 60.0
TEACHER_MOVES_S = (20.0, 40.0)
ANSWER_S = (10.0, 30.0)
REVEAL_AFTER_S = (30.0, 40.0)
START = "Start a class"
REVEAL = "Reveal to the class"
ANSWER_LABELS = ("your answer", "your prediction")  # the room's radios: an exercise's, a prediction's
CLICKER = "follow_the_teacher"  # the component that clicks the page link before it (``classroom.live.follow._follow_link``)


def settings(query: str) -> tuple:
    """An address's settings without the room's own key: what a follower must match."""
    return tuple(sorted((k, v) for k, v in parse_qsl(query) if k != "room"))


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system), in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime, stime in clock ticks (100 a second on Linux)


class Room:
    """What the teacher last asked of the class, and when: the followers compare their screens with it."""

    def __init__(self):
        self.moves = []  # (the teacher's click, the view it led to: page and settings), in order
        self.reveal_since = None
        self.answer_s, self.teacher_s = [], []

    def lead(self, since: float, teacher) -> None:
        """The teacher's click at ``since`` (its reply the last of ``teacher_s``) led to the teacher's view now (its
        settings; the page changes only with them here). A click that left the view as it was moves nobody and is
        not counted."""
        view = (teacher.page, settings(teacher.query))
        if not self.moves or self.moves[-1][1] != view:
            self.moves.append((since, view, self.teacher_s[-1]))

    def follow_s(self, followers: list["Follower"]) -> list[tuple[str, float, list[float], int]]:
        """For each click: the page it led to, the teacher's own run, each follower's time from it to its first full
        run drawing the teacher's view before the next click, and how many never drew it in that time."""
        moves = []
        for (since, view, reply), (until, *_) in zip(self.moves, self.moves[1:] + [(float("inf"), None, None)]):
            times, missed = [], 0
            for follower in followers:
                reached = [t for t, shown, _ in follower.finished if since < t < until and shown == view]
                times.extend(t - since for t in reached[:1])
                missed += not reached
            moves.append((view[0], reply, times, missed))
        return moves

    def reveal_times(self, followers: list["Follower"]) -> list[float]:
        """Each follower's time from the teacher's reveal to its first full run drawing its graded answer."""
        return [next(t - self.reveal_since for t, _, drew in follower.finished if t > self.reveal_since and drew)
                for follower in followers if any(t > self.reveal_since and drew for t, _, drew in follower.finished)]


class Follower:
    """A student's tab that follows the teacher: reads its websocket all the time and reruns the room's fragment at
    the interval the server asks for, from the fragment's run on (a full run's first message stops the timers, as
    Streamlit's frontend does)."""

    def __init__(self, url: str, room: Room, rng: random.Random):
        self.url, self.room, self.rng = url, room, rng
        self.origin = url.replace("ws", "http", 1).removesuffix("/_stcore/stream")
        self.query, self.page_hash, self.page, self.ticks, self.link, self.clicked = "", "", "", {}, None, None
        self.fragments = set()  # the fragments the last full run drew: a look's run of another one breaks the page
        self.finished, self.radios, self.drew_reveal = [], {}, False  # radios: widget id -> options
        self.blanked, self.blank_since, self.redrawn_s = 0, None, []  # looks answered under a page left, and when
        # the blank page they leave in a browser was drawn again (the next full run)

    def _message(self, fragment: str = "") -> BackMsg:
        message = BackMsg()
        message.rerun_script.query_string = self.query
        message.rerun_script.page_script_hash = self.page_hash
        message.rerun_script.context_info.url = f"{self.origin}/{self.page}?{self.query}"  # the browser's address
        if fragment:
            message.rerun_script.fragment_id = fragment
            message.rerun_script.is_auto_rerun = True
        return message

    async def _tick(self, fragment: str, interval: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(interval)
            await self.ws.send(self._message(fragment).SerializeToString())

    def _click(self, link) -> None:
        """A click on the page link the app's clicker draws beside: as the frontend, stop every timer and ask for the
        link's page and address (the page this tab shows stays its own until the run's first message)."""
        for task in self.ticks.values():
            task.cancel()
        self.ticks = {}
        self.query = link.query_string  # the address the click goes to
        message = self._message()
        message.rerun_script.page_script_hash = link.page_script_hash
        asyncio.ensure_future(self.ws.send(message.SerializeToString()))

    async def answer(self) -> None:
        """Pick an option of every question the room asks on this page, as a student clicking one each."""
        if not self.radios:
            return
        message = self._message()
        for widget, options in self.radios.items():
            state = message.rerun_script.widget_states.widgets.add()
            state.id, state.string_value = widget, self.rng.choice(options)
        self.answer_sent = time.perf_counter()
        await self.ws.send(message.SerializeToString())

    async def run(self, code: str, stop: asyncio.Event) -> None:
        self.query, self.answer_sent = f"room={code}", None
        self.ws = await connect(self.url, max_size=None, open_timeout=60, ping_interval=None)
        await self.ws.send(self._message().SerializeToString())
        try:
            while not stop.is_set():
                try:
                    raw = await asyncio.wait_for(self.ws.recv(), 1.0)
                except TimeoutError:
                    continue
                self._read(raw, stop)
        finally:
            for task in self.ticks.values():
                task.cancel()
            await self.ws.close()

    def _read(self, raw: bytes, stop: asyncio.Event) -> None:
        reply = ForwardMsg()
        reply.ParseFromString(raw)
        kind = reply.WhichOneof("type")
        if kind == "new_session" and not reply.metadata.run.fragment_ids:  # a full run's first message: as the
            self.page_hash = reply.new_session.page_script_hash  # frontend, a fragment's run leaves the page as it is
            for task in self.ticks.values():  # and, as the frontend, stop every timer: the run's fragments set theirs
                task.cancel()
            self.ticks = {}
            self.fragments = set()
        elif kind == "new_session" and (reply.new_session.page_script_hash != self.page_hash
                                        or not set(reply.metadata.run.fragment_ids) <= self.fragments):
            self.blanked += 1  # a look run under the page left (Streamlit's frontend clears the page it shows), or
            self.blank_since = self.blank_since or time.perf_counter()  # of a fragment the page lacks (its deltas
            # fail: "Bad delta path", the page goes blank)
        elif kind == "navigation":  # every full run's: the page it drew, by its URL path
            paths = {page.page_script_hash: page.url_pathname for page in reply.navigation.app_pages}
            self.page = paths.get(reply.navigation.page_script_hash, "")
        elif kind == "page_info_changed":
            self.query = reply.page_info_changed.query_string
        elif kind == "auto_rerun" and reply.auto_rerun.fragment_id not in self.ticks:
            self.fragments.add(reply.auto_rerun.fragment_id)
            self.ticks[reply.auto_rerun.fragment_id] = asyncio.ensure_future(
                self._tick(reply.auto_rerun.fragment_id, reply.auto_rerun.interval, stop))
        elif kind == "delta" and reply.delta.WhichOneof("type") == "new_element":
            element = reply.delta.new_element
            if element.WhichOneof("type") == "radio" and element.radio.label in ANSWER_LABELS:
                self.radios[element.radio.id] = tuple(element.radio.options)
            elif element.WhichOneof("type") == "page_link":
                self.link = element.page_link
            elif (element.WhichOneof("type") == "bidi_component" and element.bidi_component.component_name == CLICKER
                  and element.bidi_component.json != self.clicked):  # once per move, as the clicker's script
                self.clicked = element.bidi_component.json
                self._click(self.link)
            elif element.WhichOneof("type") == "markdown" and "predicted**" in element.markdown.body:
                self.drew_reveal = True  # a graded answer
        elif kind == "script_finished":
            full = reply.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY
            self.drew_reveal, drew = False, self.drew_reveal
            if not full:
                return
            now = time.perf_counter()
            if self.blank_since is not None:
                self.redrawn_s.append(now - self.blank_since)
                self.blank_since = None
            if self.answer_sent is not None:
                self.room.answer_s.append(now - self.answer_sent)
                self.answer_sent = None
            self.finished.append((now, (self.page, settings(self.query)), drew))


async def teach(student, room: Room, followers: list[Follower], minutes: float, stop: asyncio.Event) -> None:
    """The teacher's moves, questions and reveals for ``minutes``; each move's target for the followers."""
    rng = student.rng
    end = time.perf_counter() + 60 * minutes
    next_question = time.perf_counter() + 20 * minutes  # a third of the way in: one question a run
    while time.perf_counter() < end:
        await asyncio.sleep(rng.uniform(*TEACHER_MOVES_S))
        if time.perf_counter() >= end:  # a move now would be cut short by the class leaving
            break
        if time.perf_counter() >= next_question:
            next_question = float("inf")
            await ask(student, room, followers)
            continue
        widgets = student.movable()
        if not widgets:
            continue
        change, label = rng.choice(widgets)
        state, fragment = change(label)
        since = time.perf_counter()
        room.teacher_s.append(await student.rerun([state], fragment))
        room.lead(since, student)
    stop.set()


async def ask(student, room: Room, followers: list[Follower]) -> None:
    """The teacher opens the Equivalence page (its step-6 exercise asks the room), the students answer, the
    teacher reveals, then goes back to Patterns."""
    since = time.perf_counter()
    room.teacher_s.append(await open_page(student, "equivalence"))
    room.lead(since, student)
    opened = time.perf_counter()
    for follower in followers:
        asyncio.get_event_loop().call_later(student.rng.uniform(*ANSWER_S),
                                            lambda f=follower: asyncio.ensure_future(f.answer()))
    await asyncio.sleep(student.rng.uniform(*REVEAL_AFTER_S) - (time.perf_counter() - opened))
    room.reveal_since = time.perf_counter()
    room.teacher_s.append(await student.rerun(press=REVEAL))
    await asyncio.sleep(10.0)
    since = time.perf_counter()
    room.teacher_s.append(await open_page(student, "patterns"))
    room.lead(since, student)


async def open_page(student, page: str) -> float:
    """The teacher opens ``page`` in the room, presenting (the address keeps the room's key and presentation mode)."""
    kept = [pair for pair in parse_qsl(student.query) if pair[0] in ("room", "present")]
    student.page, student.sliders, student.choices = page, {}, {}
    student.query = "&".join(f"{k}={v}" for k, v in kept)
    return await student.rerun()


async def measure_room(url: str, pids: list[int], args, name: str) -> None:
    """The live class: see the module's docstring; ``name``: the run's in bench/RESULTS.md's log."""
    def counted(xs: list[float]) -> str:
        return f"{quantiles(xs)} ({len(xs)})"

    room, stop = Room(), asyncio.Event()
    teacher = Student(url, Stats(), random.Random(7))
    await teacher.connect()
    teacher.page, teacher.query = "patterns", "present=true"  # the teacher presents throughout
    await teacher.rerun()
    await teacher.rerun(press=START)
    code = dict(parse_qsl(teacher.query)).get("room")
    assert code, f"the teacher's Start a class gave no room: {teacher.query!r}"
    followers = [Follower(url, room, random.Random(i)) for i in range(args.clients)]
    tasks = []
    for follower in followers:
        tasks.append(asyncio.ensure_future(follower.run(code, stop)))
        await asyncio.sleep(30.0 / len(followers))
    await asyncio.sleep(10.0)  # the last ones' first runs
    before = {pid: cpu_s(pid) for pid in pids}
    await asyncio.sleep(IDLE_S)
    idle = {pid: (cpu_s(pid) - before[pid]) / IDLE_S for pid in pids}
    await teach(teacher, room, followers, args.minutes, stop)
    await asyncio.gather(*tasks)
    await teacher.ws.close()

    print(f"a live class: 1 teacher and {args.clients} students following, {args.minutes:g} min of teaching after "
          f"{IDLE_S:.0f} s idle")
    moves = room.follow_s(followers)
    follow_s = [t for *_, times, _ in moves for t in times]
    print(f"  the teacher's click to a follower's updated screen: {counted(follow_s)} (goal: p95 ≤ 2 s)")
    for k, (page, reply, times, _) in enumerate(moves, 1):
        print(f"    click {k}, onto {page}, the teacher's run {reply * 1e3:,.0f} ms: {counted(times)}")
    print("  a follower that had not drawn the teacher's view before the teacher's next click: "
          f"{sum(missed for *_, missed in moves)} times")
    redrawn = [t for follower in followers for t in follower.redrawn_s]
    print(f"  a look answered on a page that lacked it (under the page the follower had left, or of a fragment the "
          f"last full run did not draw: its browser blanks the page): "
          f"{sum(follower.blanked for follower in followers)} times; the page drawn again by the next full run "
          f"{counted(redrawn)}, {sum(follower.blank_since is not None for follower in followers)} left blank")
    reveals = room.reveal_times(followers) if room.reveal_since else []
    print(f"  the teacher's reveal to a student's graded answer:  {counted(reveals)}")
    print("  server CPU with the class idle and following: "
          + ", ".join(f"{100 * share:.1f} % of one core (pid {pid})" for pid, share in idle.items())
          + " (goal: ≤ 20 %)")
    print(f"  the teacher's moves, reply:   {counted(room.teacher_s)}")
    results.report(name, f"follow {counted(follow_s)} · idle followers' CPU "
                   + ", ".join(f"{100 * share:.1f} % of one core" for share in idle.values()), args.record)
    print(f"  the students' answers, reply: {counted(room.answer_s)}")
    print(f"  exceptions shown to the teacher {len(teacher.stats.exceptions)}, errors "
          f"{sum(teacher.stats.errors.values())}")
