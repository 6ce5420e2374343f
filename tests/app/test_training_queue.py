"""The server's training queue (``local_queue``): a few trainings at once, places and waits; and the estimates
(``estimates``): a wait, a training's time left. One training per session is the door's contract on both backends
(``tests/app/test_training_jobs.py``)."""

import threading
import time

import pytest

from classroom.training import estimates, local_queue


def test_queue_limits_concurrency_and_reports_positions():
    queue = local_queue.TrainingQueue(limit=1)
    order, positions, running = [], {}, []
    first_in = threading.Event()

    def job(name: str, hold: float):
        with queue.slot(10, on_wait=lambda p, _: positions.setdefault(name, []).append(p), poll_s=0.01):
            order.append(name)
            running.append(queue.running)  # checked below: an assert in a thread would only warn
            first_in.set()
            time.sleep(hold)

    a = threading.Thread(target=job, args=("a", 0.3))
    a.start()
    first_in.wait()
    b = threading.Thread(target=job, args=("b", 0.0))
    b.start()
    time.sleep(0.05)
    c = threading.Thread(target=job, args=("c", 0.0))
    c.start()
    for t in (a, b, c):
        t.join()
    assert order == ["a", "b", "c"] and running == [1, 1, 1]
    assert positions["b"][0] == 1 and positions["c"][0] == 2 and queue.running == 0


def test_leaving_the_queue_gives_up_the_place():
    queue = local_queue.TrainingQueue(limit=1)
    release = threading.Event()

    def holder():
        with queue.slot(10, on_wait=lambda p, _: None, poll_s=0.01):
            release.wait()

    t = threading.Thread(target=holder)
    t.start()
    time.sleep(0.05)

    def leave(position, wait_s):
        raise KeyboardInterrupt  # the user closed the tab while waiting

    with pytest.raises(KeyboardInterrupt):
        with queue.slot(10, on_wait=leave, poll_s=0.01):
            pass
    assert queue._gate.waiting == []
    release.set()
    t.join()
    assert queue.running == 0


def test_seconds_left_is_the_steps_to_go_at_the_measured_rate():
    assert estimates.seconds_left(50, 200, 10.0) == pytest.approx(30.0)  # 5 steps/s, 150 steps to go
    assert estimates.seconds_left(200, 200, 10.0) == 0.0


def test_a_training_that_usually_stops_early_expects_its_usual_stop_not_its_bound():
    """The preset at 14 steps/s: step 70 of at most 3,000, usually stopping at 200 — about 9 s left, not the bound's
    209 s; past its usual stop (or with none) no expectation, only the bound."""
    assert estimates.expected_seconds_left(70, 3000, 5.0, 200) == pytest.approx(130 / 14)
    assert estimates.seconds_left(70, 3000, 5.0) == pytest.approx(2930 / 14)
    assert estimates.expected_seconds_left(70, 100, 5.0, 200) == pytest.approx(30 / 14)   # fewer steps set than usual
    assert estimates.expected_seconds_left(200, 3000, 5.0, 200) == 0.0
    assert estimates.expected_seconds_left(250, 3000, 5.0, 200) is None
    assert estimates.expected_seconds_left(70, 3000, 5.0, None) is None


@pytest.mark.parametrize("remaining, ahead, expected", [
    ([30.0, 100.0], 0, 30.0),    # next in line: the first running training to finish
    ([30.0, 100.0], 1, 90.0),    # one ahead takes the slot freed at 30 s and holds it 60 s; 90 s comes before 100 s
    ([30.0, 100.0], 2, 100.0),
    ([30.0, 100.0], 3, 150.0),   # 90 → 150 (the one ahead at 90 s), 100 → 160: the 150 s slot comes first
    ([30.0], 0, 0.0),            # an idle slot: no wait (it is taken as soon as the queue looks)
    ([30.0], 1, 30.0),           # the one ahead takes the idle slot; then the 30 s one frees
    ([], 2, 60.0),               # two idle slots taken by the two ahead for 60 s each
])
def test_seconds_until_a_slot_frees_known_answers(remaining, ahead, expected):
    assert estimates.seconds_until_slot(remaining, ahead, duration_s=60.0, limit=2) == pytest.approx(expected)


def hold(queue: local_queue.TrainingQueue, steps: int = 100) -> tuple[threading.Event, threading.Thread, list]:
    """A training holding a slot of ``queue`` until the returned event is set; its ticket in the list."""
    release, tickets = threading.Event(), []

    def holder():
        with queue.slot(steps, on_wait=lambda p, _: None, poll_s=0.01) as ticket:
            tickets.append(ticket)
            release.wait()

    thread = threading.Thread(target=holder)
    thread.start()
    while not tickets:
        time.sleep(0.01)
    return release, thread, tickets


class Left(Exception):
    """The user left the page while waiting."""


def ask(queue: local_queue.TrainingQueue) -> tuple[str, tuple[int, float | None] | None]:
    """A training asks for a slot and leaves at its first wait: ("runs" | "waits", (position, wait_s))."""
    seen = []

    def leave(position, wait_s):
        seen.append((position, wait_s))
        raise Left

    try:
        with queue.slot(10, on_wait=leave):
            return "runs", None
    except Left:
        return "waits", seen[0]


def test_the_wait_is_estimated_from_the_running_trainings_rate_and_the_finished_trainings_times():
    queue = local_queue.TrainingQueue(limit=1)
    release, thread, (running,) = hold(queue, steps=100)
    assert ask(queue) == ("waits", (1, None))  # nothing measured yet: no estimate rather than a made-up one
    running.started, running.step = time.monotonic() - 10.0, 25  # 25 of 100 steps in 10 s: 30 s to go
    kind, (position, wait_s) = ask(queue)
    assert position == 1 and wait_s == pytest.approx(30.0, abs=0.5)
    running.step = 0  # before its first step, the running one counts as a typical finished training (the median)
    queue._durations.extend([40.0, 12.0, 50.0])  # median 40 s, of which 10 s have passed
    assert ask(queue)[1][1] == pytest.approx(30.0, abs=0.5)
    release.set()
    thread.join()


def test_a_finished_training_adds_its_wall_time_and_a_failed_one_does_not():
    queue = local_queue.TrainingQueue(limit=1)
    with queue.slot(10, on_wait=lambda p, _: None):
        time.sleep(0.2)
    with pytest.raises(ValueError):
        with queue.slot(10, on_wait=lambda p, _: None):
            raise ValueError("a refused size")
    (measured,) = queue._durations
    assert 0.2 <= measured < 1.0

