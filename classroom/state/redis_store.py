"""The store's entries in Redis, for a class served by several replicas: every replica reads and writes the same
checkpoints, and they outlive a restart of the replicas (and of Redis, with its persistence on: ``deploy/class.sh``
turns on its append-only file). Each operation is one Lua script, so the bounds hold whichever replica acts: the same
four bounds as ``store.LocalStore``'s (a count, a count per owner, bytes, a lifetime after the last use) and the same
pins. ``store.RedisStore`` keeps its checkpoints here, as ``store.LocalStore`` keeps them in a ``bounded.Bounded``;
this module knows nothing of checkpoints (an entry is a label and bytes), so it imports nothing of the store's.

Keys, under ``PREFIX``: ``ckpt:<id>`` a hash (label, data, owner); ``used`` a sorted set of ids by last use (the
replicas' wall clock, seconds); ``pins`` a hash of pinned ids to who pinned them, and ``pinned:<holder>`` each
holder's pinned ids, the longest pinned first."""

import time
from collections.abc import Callable

import redis

__all__ = ["RedisEntries", "PREFIX"]

PREFIX = "classroom:store:"

# evict(keep, now): expired entries first, then each owner's least recently used past its share, then the least
# recently used until the count and the bytes fit; pinned entries and ``keep`` stay (LocalStore's order).
_EVICT = """
local P, now, ttl, max_count, max_bytes, per_owner = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]),
    tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local function drop(id)
  redis.call('DEL', P .. 'ckpt:' .. id)
  redis.call('ZREM', P .. 'used', id)
end
local function evict(keep)
  local pins = {}
  for _, id in ipairs(redis.call('HKEYS', P .. 'pins')) do pins[id] = true end
  local loose = {}
  for _, id in ipairs(redis.call('ZRANGE', P .. 'used', 0, -1)) do
    if not pins[id] then
      if id ~= keep and now - tonumber(redis.call('ZSCORE', P .. 'used', id)) > ttl then drop(id)
      elseif id ~= keep then table.insert(loose, id) end
    end
  end
  local owner, count, bytes, mine = {}, 0, 0, {}
  for _, id in ipairs(redis.call('ZRANGE', P .. 'used', 0, -1)) do
    if not pins[id] then
      owner[id] = redis.call('HGET', P .. 'ckpt:' .. id, 'owner')
      mine[owner[id]] = (mine[owner[id]] or 0) + 1
      count = count + 1
      bytes = bytes + redis.call('HSTRLEN', P .. 'ckpt:' .. id, 'data')
    end
  end
  local left = {}
  for _, id in ipairs(loose) do
    if mine[owner[id]] > per_owner then
      mine[owner[id]] = mine[owner[id]] - 1
      count = count - 1
      bytes = bytes - redis.call('HSTRLEN', P .. 'ckpt:' .. id, 'data')
      drop(id)
    else
      table.insert(left, id)
    end
  end
  for _, id in ipairs(left) do
    if count <= max_count and bytes <= max_bytes then break end
    count = count - 1
    bytes = bytes - redis.call('HSTRLEN', P .. 'ckpt:' .. id, 'data')
    drop(id)
  end
end
"""

# ARGV[7..]: id, label, data, owner. Keeps the entry (a kept one stays), marks its use, applies the bounds.
_PUT = _EVICT + """
local id = ARGV[7]
local key = P .. 'ckpt:' .. id
if redis.call('EXISTS', key) == 0 then redis.call('HSET', key, 'label', ARGV[8], 'data', ARGV[9], 'owner', ARGV[10]) end
redis.call('ZADD', P .. 'used', now, id)
evict(id)
return redis.call('HMGET', key, 'label', 'data')
"""

# ARGV[7]: id, ARGV[8..]: the fields to return. Applies the bounds, then renews the entry's use; nil when there is
# none. A link's label alone asks for 'label' (the bytes stay in Redis), a model for 'label' and 'data'.
_GET = _EVICT + """
evict('')
local key = P .. 'ckpt:' .. ARGV[7]
if redis.call('EXISTS', key) == 0 then return nil end
redis.call('ZADD', P .. 'used', now, ARGV[7])
return redis.call('HMGET', key, unpack(ARGV, 8))
"""

# Unpins ARGV[7] (whoever pinned it).
_UNPIN = """
local P, id = ARGV[1], ARGV[7]
local holder = redis.call('HGET', P .. 'pins', id)
if holder then
  redis.call('LREM', P .. 'pinned:' .. holder, 0, id)
  redis.call('HDEL', P .. 'pins', id)
end
"""

# ARGV[7]: id, ARGV[8]: who pins it, ARGV[9]: the most that holder may keep pinned. 0 when there is no such entry.
_PIN = _EVICT + _UNPIN + """
if redis.call('EXISTS', P .. 'ckpt:' .. id) == 0 then return 0 end
local mine = P .. 'pinned:' .. ARGV[8]
redis.call('HSET', P .. 'pins', id, ARGV[8])
redis.call('RPUSH', mine, id)
while redis.call('LLEN', mine) > tonumber(ARGV[9]) do redis.call('HDEL', P .. 'pins', redis.call('LPOP', mine)) end
return 1
"""

_COUNT = _EVICT + """
evict('')
return redis.call('ZCARD', P .. 'used')
"""


class RedisEntries:
    """Entries (a label and bytes) by key in Redis (``client``: bytes in, bytes out), under ``prefix``: at most
    ``max_count`` and ``max_bytes`` of data, ``per_owner`` per owner, each ``ttl_s`` after its last use by
    ``clock`` (the wall clock every replica shares); pinned entries outside all four, ``max_pinned(holder)`` each."""

    def __init__(self, client: redis.Redis, max_count: int, max_bytes: float, ttl_s: float, per_owner: int,
                 max_pinned: Callable[[str], int], clock: Callable[[], float] = time.time, prefix: str = PREFIX):
        self._client, self._clock, self._prefix, self._max_pinned = client, clock, prefix, max_pinned
        self._bounds = (ttl_s, max_count, max_bytes, per_owner)
        self._put, self._get, self._pin, self._unpin, self._count = (
            client.register_script(script) for script in (_PUT, _GET, _PIN, _UNPIN, _COUNT))

    def _args(self, *more) -> list:
        return [self._prefix, self._clock(), *self._bounds, *more]

    def put(self, key: str, label: str, data: bytes, owner: str) -> tuple[str, bytes]:
        """Keep (label, data) under ``key`` for ``owner`` as the most recently used, then apply the bounds; an entry
        already under ``key`` stays. Returns the entry kept."""
        label, data = self._put(args=self._args(key, label, data, owner))
        return label.decode(), data

    def get(self, key: str) -> tuple[str, bytes] | None:
        """(label, data) under ``key`` with its last use renewed, after the bounds are applied; None if there is none."""
        found = self._get(args=self._args(key, "label", "data"))
        return None if found is None else (found[0].decode(), found[1])

    def label(self, key: str) -> str | None:
        """``get``'s label alone: its bytes stay in Redis."""
        found = self._get(args=self._args(key, "label"))
        return None if found is None else found[0].decode()

    def pin(self, key: str, holder: str) -> bool:
        """Pin ``key`` for ``holder``, unpinning that holder's oldest pin past ``max_pinned(holder)``; False when
        there is no such entry."""
        return bool(self._pin(args=self._args(key, holder, self._max_pinned(holder))))

    def unpin(self, key: str) -> None:
        self._unpin(args=self._args(key))

    def pinned(self, key: str) -> bool:
        return bool(self._client.hexists(self._prefix + "pins", key))

    def __len__(self) -> int:
        return int(self._count(args=self._args()))
