"""How long each experiment took on this server, so that the next computation states its time before it runs: the
same experiment on the same model last time, else its other runs here scaled by their memory estimates."""

import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from classroom.admission import budget_mb

KEPT = 512  # computations remembered, server-wide; the oldest is forgotten first

_lock = threading.Lock()
_last: OrderedDict[tuple[str, tuple], tuple[float, float]] = OrderedDict()  # (experiment, key) -> (MB, s)


@contextmanager
def timed(experiment: str, key: tuple, mb: float) -> Iterator[None]:
    """Remember how long the block took: a computation of ``experiment`` on the model ``key`` (for an experiment
    that loads or builds its own models, its arguments) whose memory estimate was ``mb``."""
    start = time.perf_counter()
    yield
    with _lock:
        _last[experiment, key] = (mb, time.perf_counter() - start)
        _last.move_to_end((experiment, key))
        while len(_last) > KEPT:
            _last.popitem(last=False)


def expected(experiment: str, model: tuple | None, mb: float) -> str | None:
    """How long ``experiment`` should take, and from what: its last computation on the model ``model`` (None: an
    experiment that builds its own), else the median seconds per estimated MB of its other computations here
    times ``mb``; None before its first one here."""
    with _lock:
        if model is not None and (experiment, model) in _last:
            return f"it took {_last[experiment, model][1]:,.1f} s on this model last time"
        rates = [seconds / held for (name, _), (held, seconds) in _last.items() if name == experiment and held > 0]
    if not rates:
        return None
    runs = "its last run" if len(rates) == 1 else f"its last {len(rates)} runs"
    return f"about {statistics.median(rates) * mb:,.1f} s, from {runs} here"


def cost_line(mb: float, expectation: str | None) -> str:
    """What a computation says while it runs: its memory against the server's budget, and its expected time
    (``expected``); before an experiment's first computation on this server, that its time is not known yet."""
    time_part = expectation or "its first run on this server, so its time is not known yet"
    return f"Computing: about {mb:,.0f} MB of the server's {budget_mb():,.0f} MB budget; {time_part}…"
