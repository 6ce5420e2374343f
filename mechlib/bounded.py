"""A bounded map: entries kept least recently used first out, within a count, a total size, a count per group and
a lifetime after their last use (per group); pinned entries stay outside every bound, each holder's pins bounded on
their own. Thread-safe. The zoo keeps its shared models in one (grouped by kind, sized by their weights, uploads
expiring when idle); the app's store keeps its checkpoints in another (grouped by the browser that made them, sized
in bytes, expiring, the lesson's models pinned)."""

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Bounded"]

V = TypeVar("V")


class Bounded(Generic[V]):
    """``max_count`` and ``max_size`` (callables: a setting read when it applies) bound the unpinned entries
    together, ``size(value)`` measuring each; ``per_group[group]`` bounds a group's; ``ttl_s(group)`` drops an entry that
    long after its last use. The entry just put always stays. ``build`` makes a missing entry once however many
    threads ask for it at the same moment."""

    def __init__(self, max_count: Callable[[], float] = lambda: math.inf, max_size: Callable[[], float] = lambda: math.inf,
                 size: Callable[[V], float] = lambda value: 0.0, per_group: Callable[[Hashable], float] = lambda group: math.inf,
                 ttl_s: Callable[[Hashable], float] | None = None, max_pinned: Callable[[Hashable], float] = lambda holder: 0,
                 clock: Callable[[], float] = time.monotonic):
        self.max_count, self.max_size, self.size, self.per_group = max_count, max_size, size, per_group
        self.ttl_s, self.max_pinned, self.clock = ttl_s or (lambda group: math.inf), max_pinned, clock
        self.expiring = ttl_s is not None
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[V, Hashable, float]] = OrderedDict()  # key -> (value, group,
                                                                                         # last use); LRU first
        self._pinned: dict[Hashable, Hashable] = {}  # key -> who pinned it, the longest pinned first
        self._building: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable) -> V | None:
        """The entry, its last use renewed; None when there is none (never put, expired or pushed out). Only a
        lifetime can end an entry between puts, so only then are the bounds applied here: a lookup stays O(1) (the
        zoo's is on every page run, several times)."""
        with self._lock:
            if self.expiring:
                self._evict(None)
            if key not in self._entries:
                return None
            value, group, _ = self._entries.pop(key)
            self._entries[key] = (value, group, self.clock())
            return value

    def put(self, key: Hashable, value: V, group: Hashable = None) -> V:
        """Keep ``value`` under ``key`` (in ``group``) as the most recently used, then drop what the bounds no longer
        hold. A key already kept keeps its value and its group: the first one put stays. Returns the value kept."""
        with self._lock:
            value, group, _ = self._entries.pop(key, (value, group, 0.0))
            self._entries[key] = (value, group, self.clock())
            self._evict(key)
            return value

    def get_or_build(self, key: Hashable, build: Callable[[], V], group: Hashable = None) -> V:
        """The entry, or ``build()`` kept under ``key``: concurrent first requests for one key wait for one build."""
        if (value := self.get(key)) is not None:
            return value
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:
            try:
                if (value := self.get(key)) is not None:
                    return value
                return self.put(key, build(), group)
            finally:
                with self._lock:
                    if self._building.get(key) is building:
                        del self._building[key]

    def pin(self, key: Hashable, holder: Hashable = None) -> bool:
        """Keep ``key``'s entry outside every bound, pinned by ``holder``; past ``max_pinned(holder)``, the one that
        holder pinned longest ago is unpinned (another holder's pins are never touched). False when there is no such
        entry."""
        with self._lock:
            if key not in self._entries:
                return False
            self._pinned.pop(key, None)
            self._pinned[key] = holder
            theirs = [pinned for pinned, by in self._pinned.items() if by == holder]
            for pinned in theirs[: max(0, len(theirs) - int(self.max_pinned(holder)))]:
                del self._pinned[pinned]
            return True

    def unpin(self, key: Hashable) -> None:
        with self._lock:
            self._pinned.pop(key, None)

    def pinned(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._pinned

    def sweep(self) -> None:
        """Apply the bounds now: entries idle past their lifetime go even while nobody asks for one."""
        with self._lock:
            self._evict(None)

    def keys(self) -> list[Hashable]:
        """The keys, least recently used first; no use is renewed."""
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            self._evict(None)
            return len(self._entries)

    def _evict(self, keep: Hashable) -> None:
        """Expired entries first; then each group's least recently used past its bound; then the least recently
        used until the count and the size fit (lock held). Pinned entries and ``keep`` stay."""
        now = self.clock()
        loose = [key for key in self._entries if key not in self._pinned and key != keep]  # least recently used first
        for key in [key for key in loose if now - self._entries[key][2] > self.ttl_s(self._entries[key][1])]:
            del self._entries[key]
            loose.remove(key)
        groups: dict[Hashable, list[Hashable]] = {}
        for key in self._entries:
            if key not in self._pinned:
                groups.setdefault(self._entries[key][1], []).append(key)
        for group, keys in groups.items():
            for key in [key for key in keys if key != keep][: max(0, len(keys) - int(min(self.per_group(group), len(keys))))]:
                del self._entries[key]
                loose.remove(key)
        counted = [key for key in self._entries if key not in self._pinned]
        count, total = len(counted), sum(self.size(self._entries[key][0]) for key in counted)
        while loose and (count > self.max_count() or total > self.max_size()):
            key = loose.pop(0)
            count, total = count - 1, total - self.size(self._entries.pop(key)[0])
        self._pinned = {key: holder for key, holder in self._pinned.items() if key in self._entries}
