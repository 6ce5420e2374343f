"""A training's time left and a waiting training's wait, from what the trainings measured: the same estimates for
this server's queue (``local_queue``), the class's RQ queue (``rq_jobs``) and the Train page's progress line."""

import heapq
import statistics

__all__ = ["seconds_left", "expected_seconds_left", "seconds_until_slot", "estimate_wait"]


def seconds_left(step: int, steps: int, elapsed_s: float) -> float:
    """Seconds until step ``steps`` at the rate this training has measured: ``step`` (≥ 1) steps in ``elapsed_s``."""
    return (steps - step) * elapsed_s / step


def expected_seconds_left(step: int, steps: int, elapsed_s: float, usual_steps: int | None) -> float | None:
    """Seconds until a training that usually stops early (a preset, once its circuit forms) is expected to stop, at
    the rate it has measured: until ``usual_steps`` (or ``steps``, if sooner). None without a usual stop, or once
    past it: it then stops at whichever evaluation finds the circuit, and only ``seconds_left`` to ``steps``
    bounds it. A bound alone misleads: the preset's bound was 216 s on a run that ended 17 s in."""
    if usual_steps is None or step > usual_steps:
        return None
    return seconds_left(step, min(usual_steps, steps), elapsed_s)


def seconds_until_slot(remaining_s: list[float], ahead: int, duration_s: float, limit: int) -> float:
    """Seconds until a slot frees for a waiting training with ``ahead`` others before it in the queue. Of the
    ``limit`` slots, the running trainings' free after their ``remaining_s`` and the idle ones now; each training
    ahead takes the first slot to free and holds it for ``duration_s`` (a typical training's wall time)."""
    slots = sorted(remaining_s + [0.0] * (limit - len(remaining_s)))
    for _ in range(ahead):
        heapq.heapreplace(slots, slots[0] + duration_s)
    return slots[0]


def estimate_wait(running: list[tuple[int, int, float]], ahead: int, durations: list[float],
                  limit: int) -> float | None:
    """Seconds until a slot frees for a waiting training with ``ahead`` others before it (``seconds_until_slot``),
    given each running training's (step, steps, elapsed_s) and the wall times of recently finished ones: a running
    training's remaining time from its own measured steps/s (before its first step: the median finished training's
    wall time, less its time so far), and that median for each one ahead. None while that needs a finished training
    and none has finished yet."""
    typical = statistics.median(durations) if durations else None
    remaining = []
    for step, steps, elapsed in running:
        if step:
            remaining.append(seconds_left(step, steps, elapsed))
        elif typical is not None:
            remaining.append(max(typical - elapsed, 0.0))
        else:
            return None
    if ahead and typical is None:
        return None
    return seconds_until_slot(remaining, ahead, typical or 0.0, max(limit, len(remaining)))
