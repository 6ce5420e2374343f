"""The few Redis commands a live class uses (``rooms``), kept in this process: the shared state of a class on one
server, with no service to start. Same names, arguments and replies as the ``redis`` client's (bytes out), so the
rooms are written once for both backends; a key's lifetime is checked when it is read, and every write drops the
expired keys it finds first, so a server that has held many rooms holds only the live ones."""

import threading
import time
from collections.abc import Callable

__all__ = ["LocalKV"]


def _bytes(value: str | bytes | int | float) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class LocalKV:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._values: dict[str, bytes | dict[bytes, bytes]] = {}
        self._expires: dict[str, float] = {}

    def _live(self, key: str):
        if (until := self._expires.get(key)) is not None and until <= self._clock():
            self._values.pop(key, None)
            self._expires.pop(key, None)
        return self._values.get(key)

    def _sweep(self) -> None:
        now = self._clock()
        for key in [key for key, until in self._expires.items() if until <= now]:
            self._values.pop(key, None)
            self._expires.pop(key, None)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self._live(key)

    def set(self, key: str, value, ex: float | None = None, nx: bool = False) -> bool | None:
        with self._lock:
            self._sweep()
            if nx and self._live(key) is not None:
                return None
            self._values[key] = _bytes(value)
            self._expires.pop(key, None)
            if ex is not None:
                self._expires[key] = self._clock() + ex
            return True

    def incr(self, key: str) -> int:
        with self._lock:
            value = int(self._live(key) or 0) + 1
            self._values[key] = _bytes(value)
            return value

    def hset(self, key: str, field: str, value) -> int:
        with self._lock:
            self._sweep()
            table = self._live(key)
            if table is None:
                table = self._values[key] = {}
            new = _bytes(field) not in table
            table[_bytes(field)] = _bytes(value)
            return int(new)

    def hget(self, key: str, field: str) -> bytes | None:
        with self._lock:
            return (self._live(key) or {}).get(_bytes(field))

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        with self._lock:
            return dict(self._live(key) or {})

    def hdel(self, key: str, *fields: str | bytes) -> int:
        with self._lock:
            table = self._live(key) or {}
            return sum(table.pop(_bytes(field), None) is not None for field in fields)

    def delete(self, *keys: str) -> int:
        with self._lock:
            gone = [key for key in keys if self._live(key) is not None]
            for key in keys:
                self._values.pop(key, None)
                self._expires.pop(key, None)
            return len(gone)

    def expire(self, key: str, seconds: float) -> bool:
        with self._lock:
            if self._live(key) is None:
                return False
            self._expires[key] = self._clock() + seconds
            return True
