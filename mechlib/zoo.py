"""Shared models: a process-wide, lock-protected cache of read-only models.

Thirty sessions may ask for the same model at once; it is built once (a lock per key) and every
session gets the same object, in eval mode with ``requires_grad_(False)`` and ``read_only`` set
(``.train()``, ``requires_grad_(True)`` and ``load_state_dict`` on it raise). Nobody mutates a cached
model: interventions are forward arguments or work on a copy (``copy.deepcopy`` gives a writable one).
"""

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

from mechlib import io
from mechlib.config import ModelConfig
from mechlib.device import DEVICE
from mechlib.model import Transformer

__all__ = ["random_model", "from_checkpoint", "uploaded", "LIMITS"]

# Models of each kind kept at once; the least recently used goes first.
LIMITS = {"random": 8, "upload": 16}

_lock = threading.Lock()
_models: OrderedDict[tuple, Transformer] = OrderedDict()
_key_locks: dict[tuple, threading.Lock] = {}


def _lookup(key: tuple) -> Transformer | None:
    with _lock:
        if key in _models:
            _models.move_to_end(key)
            return _models[key]
    return None


def _cached(key: tuple, build: Callable[[], Transformer]) -> Transformer:
    if (model := _lookup(key)) is not None:
        return model
    with _lock:
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:  # concurrent first requests for one key: one builds, the others wait for it
        try:
            if (model := _lookup(key)) is not None:
                return model
            model = build().to(DEVICE).eval().requires_grad_(False)
            model.read_only = True
            with _lock:
                _models[key] = model
                same_kind = [k for k in _models if k[0] == key[0]]
                for old in same_kind[: max(0, len(same_kind) - LIMITS[key[0]])]:
                    del _models[old]
            return model
        finally:
            with _lock:
                if _key_locks.get(key) is key_lock:
                    del _key_locks[key]


def random_model(cfg: ModelConfig) -> Transformer:
    """The shared, read-only model with random weights drawn from ``cfg`` (its seed included)."""
    return _cached(("random", cfg, str(DEVICE)), lambda: Transformer(cfg))


def from_checkpoint(data: bytes) -> tuple[str, Transformer]:
    """(sha256 digest, the shared read-only model) of an uploaded checkpoint; raises ``io.CheckpointError``."""
    digest = hashlib.sha256(data).hexdigest()
    return digest, _cached(("upload", digest, str(DEVICE)), lambda: io.load(data))


def uploaded(digest: str) -> Transformer | None:
    """The model uploaded with this digest, or None once it has left the cache (upload it again)."""
    return _lookup(("upload", digest, str(DEVICE)))
