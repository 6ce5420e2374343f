"""The door every page's experiment goes through: its cost is stated while it computes (a miss), and a cached
result is returned without a spinner (a hit: the rerun of every follower in a live class)."""

import importlib
import inspect
import re
from contextlib import contextmanager
from pathlib import Path

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


def test_every_experiment_a_page_computes_declares_its_memory_or_reads_ids():
    """``experiment_mb`` without a declared cost counts one forward of the ids an experiment gets after its model:
    every other experiment a page or the app passes to ``compute`` must declare its own (a missing one raised only
    when the Train page's preset finished)."""
    root = Path(__file__).resolve().parents[2]
    sources = [*root.glob("app_pages/*.py"), *root.glob("classroom/*.py")]
    called = {name for path in sources for name in re.findall(r"compute\((\w+\.\w+)", path.read_text())}
    assert len(called) > 20
    for name in sorted(called):
        module, function = name.split(".")
        experiment = getattr(importlib.import_module(f"mechlib.{module}"), function)
        reads_ids = list(inspect.signature(experiment).parameters)[1:2] == ["ids"]
        assert hasattr(experiment, "estimate_mb") or reads_ids, f"{name} declares no cost and reads no ids"
