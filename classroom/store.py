"""Checkpoints shared by a short id: a model trained or uploaded in one session, reachable from a link in another.

A teacher trains a model and shares the link; thirty students open it, and a reload does not lose it. The
store is process-wide and bounded four ways: a number of checkpoints, a number per owner (a browser) that made
them, a number of bytes, and a lifetime after the last use. A pinned checkpoint (the preset's result, a model the
teacher pins for a lesson) is outside all four: the class's links to it never expire while the server runs. Every
checkpoint is validated as an upload is (``zoo.from_checkpoint``) when it comes in, so a link can only ever name a
model that loads.
"""

import base64
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from mechlib import zoo
from mechlib.io import MAX_BYTES, CheckpointError

ID_CHARS = 16           # base32 letters of the content's sha256: 80 bits. 40 bits fell to a birthday search in 10 minutes
MAX_COUNT = 64
MAX_PINNED = 8          # pinned checkpoints; pinning a ninth unpins the one pinned longest ago
PER_OWNER = 8           # one browser's share: a student uploading checkpoint after checkpoint pushes out only their own
MAX_MB = 512.0
TTL_S = 12 * 3600.0     # a class and its homework: twelve hours after the last time a session opened it


class StoreError(KeyError):
    """A short id that names nothing here: never stored, or expired or pushed out since."""

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class Stored:
    label: str          # "trained k3q7m2xa4rbt5wzd: 2L×4H d64 …" or "uploaded k3q7m2xa4rbt5wzd: mine.safetensors":
                        # the model list shows it
    data: bytes


def short_id(data: bytes) -> str:
    """The first ``ID_CHARS`` base32 letters of the checkpoint's sha256, lower case: the same bytes, the same id."""
    return base64.b32encode(hashlib.sha256(data).digest()).decode()[:ID_CHARS].lower()


class CheckpointStore:
    """Validated checkpoints by short id, least recently used first out; thread-safe."""

    def __init__(self, max_count: int = MAX_COUNT, max_mb: float = MAX_MB, ttl_s: float = TTL_S,
                 per_owner: int = PER_OWNER, clock: Callable[[], float] = time.monotonic):
        self.max_count, self.max_bytes, self.ttl_s, self.clock = max_count, max_mb * 2**20, ttl_s, clock
        self.per_owner = per_owner
        self._items: OrderedDict[str, tuple[Stored, float]] = OrderedDict()  # id -> (checkpoint, last use)
        self._owners: dict[str, str] = {}                                    # id -> the browser that stored it
        self._pinned: list[str] = []                                         # ids, the longest pinned first
        self._lock = threading.Lock()

    def put(self, kind: str, name: str, data: bytes, owner: str) -> Stored:
        """Validate ``data`` (raises ``CheckpointError``) and keep it for ``owner`` (a browser); returns its entry,
        whose label names its id. Past ``per_owner``, the owner's least recently used unpinned checkpoint goes. An id
        already kept for other bytes is refused: a link names one model, the first."""
        if len(data) > min(MAX_BYTES, self.max_bytes):
            raise CheckpointError(f"the checkpoint is {len(data) / 10**6:,.1f} MB; links keep checkpoints up to "
                                  f"{min(MAX_BYTES, self.max_bytes) / 10**6:,.0f} MB")
        zoo.from_checkpoint(data)
        key = short_id(data)
        with self._lock:
            stored = self._items.pop(key, (Stored(f"{kind} {key}: {name}", data), 0.0))[0]
            self._items[key] = (stored, self.clock())
            if stored.data != data:
                raise CheckpointError(f"another checkpoint is kept under this one's id {key}; it cannot be shared "
                                      "by a link (save it again after any change to its weights)")
            self._owners.setdefault(key, owner)
            mine = [k for k in self._items if self._owners[k] == self._owners[key] and k not in self._pinned]
            for old in mine[: max(0, len(mine) - self.per_owner)]:
                del self._items[old]
            self._evict()
        return stored

    def get(self, key: str) -> Stored:
        """The checkpoint with this id, its lifetime renewed; raises ``StoreError`` saying why there is none."""
        with self._lock:
            self._evict()
            if key not in self._items:
                raise StoreError(f"no model with id {key} is kept on this server: it was never made here, or it "
                                 f"expired ({self.ttl_s / 3600:g} h after its last use, or pushed out by newer ones)")
            self._items.move_to_end(key)
            stored = self._items[key][0]
            self._items[key] = (stored, self.clock())
            return stored

    def pin(self, key: str) -> None:
        """Keep the checkpoint ``key`` while the server runs, outside every bound; past ``MAX_PINNED``, the one
        pinned longest ago is unpinned. Raises ``StoreError`` when there is none."""
        with self._lock:
            if key not in self._items:
                raise StoreError(f"no model with id {key} is kept on this server to pin")
            if key in self._pinned:
                self._pinned.remove(key)
            self._pinned.append(key)
            del self._pinned[: max(0, len(self._pinned) - MAX_PINNED)]

    def unpin(self, key: str) -> None:
        with self._lock:
            if key in self._pinned:
                self._pinned.remove(key)

    def pinned(self, key: str) -> bool:
        with self._lock:
            return key in self._pinned

    def __len__(self) -> int:
        with self._lock:
            self._evict()
            return len(self._items)

    def _evict(self) -> None:
        """Expired ones first, then the least recently used until the count and the bytes fit (lock held); pinned
        ones stay, and count toward neither bound."""
        now = self.clock()
        loose = [key for key in self._items if key not in self._pinned]  # least recently used first
        for key in [key for key in loose if now - self._items[key][1] > self.ttl_s]:
            del self._items[key]
            loose.remove(key)
        while loose and (len(loose) > self.max_count
                         or sum(len(self._items[key][0].data) for key in loose) > self.max_bytes):
            del self._items[loose.pop(0)]
        for key in [key for key in self._owners if key not in self._items]:
            del self._owners[key]


STORE = CheckpointStore()  # the server's: every session reads and writes this one
