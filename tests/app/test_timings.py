"""What a computation says about its time before it runs: the last run on this model, else the experiment's other
runs here scaled by memory, else that its time is not known yet."""

from collections import OrderedDict

import pytest

from classroom import timings
from classroom.admission import budget_mb


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(timings, "_last", OrderedDict())


def remember(experiment: str, key, mb: float, seconds: float) -> None:
    timings._last[experiment, key] = (mb, seconds)


def test_the_same_model_last_time_comes_first():
    remember("scores", ("zoo", "a"), 10.0, 2.0)
    remember("scores", ("zoo", "b"), 10.0, 9.0)
    assert timings.expected("scores", ("zoo", "a"), 500.0) == "it took 2.0 s on this model last time"


def test_another_model_is_scaled_by_memory_with_the_median_rate():
    remember("fit", ("zoo", "a"), 10.0, 1.0)    # 0.1 s per MB
    remember("fit", ("zoo", "b"), 100.0, 20.0)  # 0.2
    remember("fit", ("zoo", "c"), 10.0, 30.0)   # 3.0: an outlier the median ignores
    remember("other", ("zoo", "d"), 1.0, 100.0)
    assert timings.expected("fit", ("zoo", "new"), 50.0) == "about 10.0 s, from its last 3 runs here"
    assert timings.expected("fit", None, 5.0) == "about 1.0 s, from its last 3 runs here"
    remember("run", (1, 16, 100), 10.0, 1.0)  # an experiment that builds its own models: keyed by its arguments
    assert timings.expected("run", None, 30.0) == "about 3.0 s, from its last run here"


def test_before_its_first_run_its_time_is_not_known_and_the_line_says_so():
    remember("other", ("zoo", "a"), 10.0, 1.0)
    assert timings.expected("fit", ("zoo", "a"), 10.0) is None
    budget = f"{budget_mb():,.0f} MB"
    assert timings.cost_line(12.3, None) == (f"Computing: about 12 MB of the server's {budget} budget; its first run "
                                             "on this server, so its time is not known yet…")
    assert timings.cost_line(1_234.0, "it took 2.0 s on this model last time") == (
        f"Computing: about 1,234 MB of the server's {budget} budget; it took 2.0 s on this model last time…")


def test_a_computation_is_timed_and_the_oldest_forgotten(monkeypatch):
    monkeypatch.setattr(timings, "KEPT", 2)
    for model in "abc":
        with timings.timed("scores", ("zoo", model), 1.0):
            pass
    assert list(timings._last) == [("scores", ("zoo", "b")), ("scores", ("zoo", "c"))]
    assert 0 <= timings._last["scores", ("zoo", "c")][1] < 1
