"""Shared models: a process-wide, lock-protected cache of read-only models.

Thirty sessions may ask for the same model at once; it is built once (a lock per key) and every
session gets the same object, in eval mode with ``requires_grad_(False)`` and ``read_only`` set
(``.train()`` on it raises). Nobody mutates a cached model: interventions are forward arguments
or work on a copy.
"""

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

from mechlib import io
from mechlib.config import ModelConfig
from mechlib.device import DEVICE
from mechlib.model import Transformer

__all__ = ["random_model", "from_checkpoint", "MAX_UPLOADED"]

MAX_UPLOADED = 16  # uploaded models kept at once, least recently used dropped first

_lock = threading.Lock()
_models: OrderedDict[tuple, Transformer] = OrderedDict()
_key_locks: dict[tuple, threading.Lock] = {}


def _cached(key: tuple, build: Callable[[], Transformer], limit: int | None = None) -> Transformer:
    with _lock:
        if key in _models:
            _models.move_to_end(key)
            return _models[key]
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:  # concurrent first requests for one key: one builds, the others wait for it
        with _lock:
            if key in _models:
                return _models[key]
        model = build().to(DEVICE).eval().requires_grad_(False)
        model.read_only = True
        with _lock:
            _models[key] = model
            _key_locks.pop(key, None)
            if limit is not None:
                same_kind = [k for k in _models if k[0] == key[0]]
                for old in same_kind[: max(0, len(same_kind) - limit)]:
                    del _models[old]
    return model


def random_model(cfg: ModelConfig) -> Transformer:
    """The shared, read-only model with random weights drawn from ``cfg`` (its seed included)."""
    return _cached(("random", cfg, str(DEVICE)), lambda: Transformer(cfg))


def from_checkpoint(data: bytes) -> Transformer:
    """The shared, read-only model in an uploaded checkpoint (validated; raises ``io.CheckpointError``)."""
    digest = hashlib.sha256(data).hexdigest()
    return _cached(("upload", digest, str(DEVICE)), lambda: io.load(data), limit=MAX_UPLOADED)
