"""Where the class's shared state lives: in this process (the default: one server, nothing to start), or in Redis when
one setting names it, so that every replica behind a proxy sees the same stored models, trainings and rooms.

The setting: the environment variable ``CLASSROOM_REDIS_URL``, else the Streamlit secret ``redis_url``
(``.streamlit/secrets.toml``), for instance ``redis://127.0.0.1:6379/0``."""

import functools

import redis

from classroom.setting import setting
from classroom.state.local_kv import LocalKV

__all__ = ["SETTING", "SharedStateError", "redis_url", "client", "kv", "require", "unreachable"]

SETTING = "CLASSROOM_REDIS_URL"
CONNECT_TIMEOUT_S = 2.0  # a replica that cannot reach Redis says so within this, rather than hanging a page


class SharedStateError(RuntimeError):
    """Redis is named by the setting but cannot be reached."""


def redis_url() -> str | None:
    """The Redis URL the setting names, or None."""
    return setting(SETTING, "redis_url")


@functools.cache
def client() -> redis.Redis | None:
    """The process's Redis client (bytes in, bytes out), or None when no Redis is named. It connects on first use
    and again after Redis restarts; nothing is asked of Redis here."""
    if (url := redis_url()) is None:
        return None
    return redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=10.0,
                                retry_on_timeout=True, health_check_interval=30)


_LOCAL = LocalKV()


def kv() -> redis.Redis | LocalKV:
    """The class's key-value state (the live class's rooms): Redis when the setting names one, else this process's."""
    return client() or _LOCAL


def require() -> None:
    """Raise ``SharedStateError`` naming the setting, never its value (a Redis URL across machines holds its
    password, and every student reads the page), when it names a Redis this process cannot reach."""
    if (shared := client()) is None:
        return
    try:
        shared.ping()
    except redis.RedisError as error:
        raise SharedStateError(unreachable(error)) from None


def unreachable(error: redis.RedisError) -> str:
    """Why the class's Redis cannot be used, in a sentence that names the setting and the kind of error only."""
    return (f"the shared state is set to a Redis (by {SETTING} or the secret redis_url), and this server cannot reach "
            f"it ({type(error).__name__}). Start Redis where the setting says, or unset the setting to keep "
            "everything in this process")
