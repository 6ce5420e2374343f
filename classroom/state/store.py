"""Checkpoints shared by a short id: a model trained or uploaded in one session, reachable from a link in another.

A teacher trains a model and shares the link; thirty students open it, and a reload does not lose it. The store is
server-wide (in this process, or in Redis for every replica: ``shared``) and bounded four ways: a number of
checkpoints, a number per owner (a browser) that made them, a number of bytes, and a lifetime after the last use. A
pinned checkpoint (a browser's preset result, a model the teacher pins for a lesson) is outside all four: the class's
links to it never expire; pins are bounded per holder, so no student's trainings unpin the teacher's. Every
checkpoint is validated as an upload is (``zoo.stored``: the model is built) when it comes in, so a link can only
ever name a model that loads. Sessions keep a stored model's id, never its bytes: one copy per process, whoever
uploaded or linked it (``model``).
"""

import base64
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from classroom.admission import BudgetError, require_budget
from classroom.state import backend, redis_store
from mechlib import io, zoo
from mechlib.bounded import Bounded
from mechlib.io import MAX_BYTES, CheckpointError
from mechlib.sae import SAE

ID_CHARS = 16           # base32 letters of the content's sha256: 80 bits. 40 bits fell to a birthday search in 10 minutes
MAX_COUNT = 64
MAX_PINNED = 8          # the teacher's pins; pinning a ninth unpins the one the teacher pinned longest ago
PRESET_PINS = 2         # each browser's preset results, pinned (the lesson's links name them): its third unpins its first
TEACHER = "teacher"     # who pins for a lesson (the app offers it to a browser on the server's own machine)
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


def max_pinned(holder: str) -> int:
    """How many checkpoints ``holder`` may keep pinned: the teacher's pins for a lesson, or a browser's preset
    results. A student's pins never unpin the teacher's: pins are bounded per holder."""
    return MAX_PINNED if holder == TEACHER else PRESET_PINS


def admit(data: bytes) -> None:
    """Refuse a checkpoint whose model is above the server's memory budget, from its header's config alone, before
    anything is built from it (mechlib builds any size); raises ``CheckpointError``."""
    cfg = io.config(data)
    try:
        require_budget(cfg.estimate_mb(batch=1), f"its model of {cfg.n_params():,} parameters")
    except BudgetError as error:
        raise CheckpointError(f"the checkpoint is too large for this server: {error}") from None


class CheckpointStore:
    """Validated checkpoints by short id, least recently used first out: what every backend shares (validation,
    ids, messages). A backend keeps them: ``LocalStore`` in this process, ``RedisStore`` in Redis, for
    every replica of a class."""

    max_bytes: float
    ttl_s: float

    def put(self, kind: str, name: str, data: bytes, owner: str) -> Stored:
        """Validate ``data`` (raises ``CheckpointError``) and keep it for ``owner`` (a browser); returns its entry,
        whose label names its id. Past ``per_owner``, the owner's least recently used unpinned checkpoint goes. An id
        already kept for other bytes is refused: a link names one model, the first. A model above the server's
        memory budget is refused before it is built."""
        if len(data) > min(MAX_BYTES, self.max_bytes):
            raise CheckpointError(f"the checkpoint is {len(data) / 10**6:,.1f} MB; links keep checkpoints up to "
                                  f"{min(MAX_BYTES, self.max_bytes) / 10**6:,.0f} MB")
        admit(data)
        key = short_id(data)
        zoo.stored(key, lambda: data)
        stored = self._keep(key, Stored(f"{kind} {key}: {name}", data), owner)
        if stored.data != data:
            raise CheckpointError(f"another checkpoint is kept under this one's id {key}; it cannot be shared "
                                  "by a link (save it again after any change to its weights)")
        return stored

    def get(self, key: str) -> Stored:
        """The checkpoint with this id, its lifetime renewed; raises ``StoreError`` saying why there is none."""
        if (stored := self._find(key)) is None:
            raise self._missing(key)
        return stored

    def label(self, key: str) -> str:
        """The label of the checkpoint with this id, its lifetime renewed, without its bytes; raises ``StoreError``."""
        if (label := self._label(key)) is None:
            raise self._missing(key)
        return label

    def model(self, key: str) -> zoo.Model:
        """The shared read-only model of the checkpoint ``key``: one per process for every session that studies it,
        its bytes read from the store only when it is not built here (``zoo.stored``). Raises ``StoreError``, also
        when ``key`` names a sparse autoencoder."""
        built = zoo.stored(key, lambda: self.get(key).data)
        if isinstance(built, SAE):
            raise StoreError(f"{key} names a sparse autoencoder, not a model: it opens on the page "
                             "\"Dictionary learning\"")
        return built

    def sae(self, key: str) -> SAE:
        """The shared read-only sparse autoencoder of the checkpoint ``key`` (``model``'s twin). Raises
        ``StoreError``, also when ``key`` names a model."""
        built = zoo.stored(key, lambda: self.get(key).data)
        if not isinstance(built, SAE):
            raise StoreError(f"{key} names a model, not a sparse autoencoder")
        return built

    def _missing(self, key: str) -> StoreError:
        return StoreError(f"no model with id {key} is kept on this server: it was never made here, or it expired "
                          f"({self.ttl_s / 3600:g} h after its last use, or pushed out by newer ones)")

    def pin(self, key: str, holder: str) -> None:
        """Keep the checkpoint ``key`` outside every bound, pinned by ``holder`` (``TEACHER``, or a browser for its
        preset results); past ``max_pinned(holder)``, the one that holder pinned longest ago is unpinned. Raises
        ``StoreError`` when there is none."""
        if not self._pin(key, holder):
            raise StoreError(f"no model with id {key} is kept on this server to pin")

    def _keep(self, key: str, stored: Stored, owner: str) -> Stored:
        """Keep ``stored`` under ``key`` for ``owner`` as the most recently used, then apply the bounds; an entry
        already under ``key`` stays. Returns the entry kept."""
        raise NotImplementedError

    def _find(self, key: str) -> Stored | None:
        """The entry under ``key`` with its last use renewed, after the bounds are applied; None if there is none."""
        raise NotImplementedError

    def _label(self, key: str) -> str | None:
        """``_find``'s label alone: a link names a model without its bytes crossing from Redis."""
        raise NotImplementedError

    def _pin(self, key: str, holder: str) -> bool:
        raise NotImplementedError

    def unpin(self, key: str) -> None:
        raise NotImplementedError

    def pinned(self, key: str) -> bool:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


class LocalStore(CheckpointStore):
    """The store in this process's memory (``bounded.Bounded``, grouped by owner): the default, for one server."""

    def __init__(self, max_count: int = MAX_COUNT, max_mb: float = MAX_MB, ttl_s: float = TTL_S,
                 per_owner: int = PER_OWNER, clock: Callable[[], float] = time.monotonic):
        self.max_bytes, self.ttl_s = max_mb * 2**20, ttl_s
        self._items: Bounded[Stored] = Bounded(max_count=lambda: max_count, max_size=lambda: self.max_bytes,
                                               size=lambda stored: len(stored.data), per_group=lambda owner: per_owner,
                                               ttl_s=lambda owner: ttl_s, max_pinned=max_pinned, clock=clock)

    def _keep(self, key: str, stored: Stored, owner: str) -> Stored:
        return self._items.put(key, stored, owner)

    def _find(self, key: str) -> Stored | None:
        return self._items.get(key)

    def _label(self, key: str) -> str | None:
        return stored.label if (stored := self._items.get(key)) is not None else None

    def _pin(self, key: str, holder: str) -> bool:
        return self._items.pin(key, holder)

    def unpin(self, key: str) -> None:
        self._items.unpin(key)

    def pinned(self, key: str) -> bool:
        return self._items.pinned(key)

    def __len__(self) -> int:
        return len(self._items)


class RedisStore(CheckpointStore):
    """The store in Redis (``redis_store.RedisEntries``), for every replica of a class: ``client`` bytes in, bytes out;
    ``clock`` is the wall clock every replica shares."""

    def __init__(self, client: redis.Redis, max_count: int = MAX_COUNT, max_mb: float = MAX_MB, ttl_s: float = TTL_S,
                 per_owner: int = PER_OWNER, clock: Callable[[], float] = time.time, prefix: str = redis_store.PREFIX):
        self.max_bytes, self.ttl_s = max_mb * 2**20, ttl_s
        self._entries = redis_store.RedisEntries(client, max_count, self.max_bytes, ttl_s, per_owner, max_pinned, clock,
                                                 prefix)

    def _keep(self, key: str, stored: Stored, owner: str) -> Stored:
        return Stored(*self._entries.put(key, stored.label, stored.data, owner))

    def _find(self, key: str) -> Stored | None:
        return None if (found := self._entries.get(key)) is None else Stored(*found)

    def _label(self, key: str) -> str | None:
        return self._entries.label(key)

    def _pin(self, key: str, holder: str) -> bool:
        return self._entries.pin(key, holder)

    def unpin(self, key: str) -> None:
        self._entries.unpin(key)

    def pinned(self, key: str) -> bool:
        return self._entries.pinned(key)

    def __len__(self) -> int:
        return len(self._entries)


def _server_store() -> CheckpointStore:
    """The server's store: in Redis when ``backend.redis_url`` names one (every replica sees the same class), else in
    this process."""
    return LocalStore() if (client := backend.client()) is None else RedisStore(client)


STORE = _server_store()  # the server's: every session reads and writes this one
