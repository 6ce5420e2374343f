"""One training per session: a session's claim on its training, taken before the training queues and given back when
it ends, however it ends. The claim is a key in a key-value store with the ``redis`` client's ``set``/``delete``:
this server's own (``LocalKV``) for its worker processes, the class's Redis for RQ jobs, so that every replica sees
it."""

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from classroom.state.local_kv import LocalKV
from classroom.training.errors import SessionBusy

__all__ = ["one_per_session"]

PREFIX = "classroom:training:owner:"


@contextmanager
def one_per_session(claims: redis.Redis | LocalKV, owner: str, ttl_s: int | None = None) -> Iterator[None]:
    """Hold ``owner``'s (a session's) claim in ``claims`` while the block runs; ``SessionBusy`` at once if another
    block holds it. ``ttl_s``: where a holder can die without its ``finally`` (a replica, killed), the claim lapses
    after this long."""
    key = PREFIX + owner
    if not claims.set(key, b"1", nx=True, ex=ttl_s):
        raise SessionBusy("this session already has a training running or waiting for a slot; one training per "
                          "session at a time")
    try:
        yield
    finally:
        claims.delete(key)
