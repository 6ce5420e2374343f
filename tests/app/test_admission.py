"""The server-wide memory budget: admission control over the computations that run at once (classroom.admission)."""

import threading
import time

import pytest

from classroom.admission import BudgetError, Gate, MemoryBudget, require_budget


@pytest.fixture(autouse=True)
def budget_of_100_mb(monkeypatch):
    monkeypatch.setenv("MECHLIB_MEMORY_BUDGET_MB", "100")


def test_one_computation_above_the_budget_is_refused_at_once():
    start = time.monotonic()
    with pytest.raises(BudgetError, match="the layer would need about 101 MB, above this server's budget of 100 MB"):
        with MemoryBudget().hold(101, "the layer"):
            pass
    assert time.monotonic() - start < 0.1


def test_a_computation_waits_while_the_running_ones_fill_the_budget_and_runs_when_they_end():
    memory, order = MemoryBudget(), []

    def second_computation() -> None:
        with memory.hold(40, "second"):
            order.append(memory.held_mb)

    with memory.hold(70, "first"):
        second = threading.Thread(target=second_computation)
        second.start()
        time.sleep(0.3)
        assert order == [] and memory.held_mb == 70  # 70 + 40 > 100: it waits
    second.join(timeout=5)
    assert order == [40]  # admitted once the first let go


def test_computations_that_fit_together_run_together():
    memory = MemoryBudget()
    with memory.hold(50, "a"), memory.hold(50, "b"):
        assert memory.held_mb == 100


def test_a_computation_that_finds_no_room_in_time_is_refused_and_holds_nothing():
    memory = MemoryBudget()
    with memory.hold(80, "a student's layer"):
        with pytest.raises(BudgetError, match=r"the check would need about 30 MB, and this server's other computations "
                                              r"held 80 of its 100 MB for 0 s; try again in a moment"):
            with memory.hold(30, "the check", wait_s=0.2):
                pass
        assert memory.held_mb == 80
    assert memory.held_mb == 0


def test_first_come_first_served_a_small_one_does_not_overtake_a_waiting_large_one():
    memory, admitted = MemoryBudget(), []

    def take(mb: float, name: str) -> None:
        with memory.hold(mb, name):
            admitted.append(name)
            time.sleep(0.1)

    with memory.hold(60, "running"):
        large = threading.Thread(target=take, args=(90, "large"))
        large.start()
        time.sleep(0.2)
        small = threading.Thread(target=take, args=(10, "small"))  # would fit now (60 + 10), but arrives second
        small.start()
        time.sleep(0.2)
        assert admitted == []
    large.join(timeout=5)
    small.join(timeout=5)
    assert admitted == ["large", "small"]


def test_an_error_inside_a_computation_gives_its_memory_back():
    memory = MemoryBudget()
    with pytest.raises(RuntimeError):
        with memory.hold(60, "a"):
            raise RuntimeError("the computation failed")
    assert memory.held_mb == 0
    with memory.hold(100, "b"):  # the whole budget is free again
        assert memory.held_mb == 100


def test_a_request_above_the_budget_names_both_figures():
    with pytest.raises(BudgetError, match=r"a model of 5 parameters would need about 1,234 MB, above this server's "
                                          r"budget of 100 MB per request; choose smaller sizes"):
        require_budget(1234.0, "a model of 5 parameters")
    require_budget(99.0, "a small thing")  # under the budget: no error


def test_a_gate_of_slots_serves_its_line_in_order_and_reports_each_waiting_position():
    """The trainings' use of the gate: a slot each, no deadline, ``on_wait`` told its place while it waits."""
    gate, positions, order = Gate(lambda: 1), {"second": [], "third": []}, []

    def take(name: str) -> None:
        with gate.hold(name, 1, on_wait=positions[name].append, poll_s=0.05):
            order.append(name)
            time.sleep(0.2)  # long enough for the third to be told it is next

    with gate.hold("first", 1):
        threads = [threading.Thread(target=take, args=(name,)) for name in ("second", "third")]
        for thread in threads:
            thread.start()
            time.sleep(0.15)
        assert gate.waiting == ["second", "third"] and gate.holding == ["first"]
    for thread in threads:
        thread.join(timeout=5)
    assert order == ["second", "third"] and gate.held == 0
    assert set(positions["second"]) == {1} and positions["third"][0] == 2 and positions["third"][-1] == 1


def test_a_wait_that_raises_gives_up_its_place():
    gate = Gate(lambda: 1)

    def leave(position: int) -> None:
        raise KeyboardInterrupt  # the student closed the tab

    with gate.hold("first", 1):
        with pytest.raises(KeyboardInterrupt):
            with gate.hold("second", 1, on_wait=leave):
                pass
        assert gate.waiting == []
