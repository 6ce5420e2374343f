"""The door every page's experiment goes through: its cost is stated while it computes (a miss), and a cached
result is returned without a spinner (a hit: the rerun of every follower in a live class)."""

from contextlib import contextmanager

from classroom import experiments
from mechlib.device import costs


@costs(lambda x: 1.0, "a square")
def square(x: int) -> int:
    """A stand-in experiment that builds no model: cheap, its cost declared, its calls countable."""
    square.calls += 1
    return x * x


def test_the_cost_is_stated_on_a_miss_and_a_hit_draws_no_spinner(monkeypatch):
    said = []

    @contextmanager
    def spinner(text):
        said.append(text)
        yield

    monkeypatch.setattr(experiments.st, "spinner", spinner)
    square.calls = 0
    experiments._cached.clear()
    assert experiments.compute(square, 7) == 49 and experiments.compute(square, 7) == 49
    assert square.calls == 1 and len(said) == 1 and said[0].startswith("Computing: about")
    assert experiments.compute(square, 8) == 64 and square.calls == 2 and len(said) == 2
