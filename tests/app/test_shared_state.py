"""The class's shared state in Redis: what one replica stores another reads; a restart of Redis keeps it and the
replicas reconnect; a Redis the setting names but nobody runs is a clear error naming the setting."""

import uuid

import pytest
import redis

from classroom.state import backend
from classroom.state.store import TEACHER, RedisStore
from tests.app.conftest import free_port
from tests.app.test_store import checkpoint


def replicas(url: str, count: int) -> list[RedisStore]:
    """``count`` replicas' stores: each its own client, one shared prefix."""
    prefix = f"test:{uuid.uuid4().hex}:"
    return [RedisStore(redis.Redis.from_url(url), prefix=prefix) for _ in range(count)]


def test_a_model_stored_through_one_replica_opens_through_another_with_its_pin(redis_server):
    one, two = replicas(redis_server.url, 2)
    stored = one.put("trained", "the teacher's", checkpoint(0), "browser t")
    key = stored.label.split()[1].rstrip(":")
    one.pin(key, TEACHER)
    assert two.get(key) == stored and two.pinned(key) and len(two) == 1


def test_stored_models_survive_a_restart_of_redis_and_the_replicas_reconnect(redis_server):
    (store,) = replicas(redis_server.url, 1)
    stored = store.put("trained", "before the restart", checkpoint(1), "browser t")
    key = stored.label.split()[1].rstrip(":")
    redis_server.stop()
    with pytest.raises(redis.ConnectionError):
        store.get(key)
    redis_server.start()  # the append-only file brings it back
    assert store.get(key) == stored


def test_an_unreachable_redis_is_an_error_naming_the_setting_never_its_value(monkeypatch):
    """Issue 38, H4: the URL, password included (the README's form across machines), was on every student's page
    while Redis was unreachable."""
    url = f"redis://:class-secret-42@127.0.0.1:{free_port()}/0"  # nobody listens there
    monkeypatch.setenv(backend.SETTING, url)
    backend.client.cache_clear()
    try:
        with pytest.raises(backend.SharedStateError, match=r"^the shared state is set to a Redis \(by "
                                                          r"CLASSROOM_REDIS_URL or the secret redis_url\), and this "
                                                          r"server cannot reach it \(ConnectionError\).*unset the "
                                                          r"setting") as refused:
            backend.require()
        assert "class-secret-42" not in str(refused.value) and "127.0.0.1" not in str(refused.value)
    finally:
        backend.client.cache_clear()


def test_without_the_setting_the_state_stays_in_this_process(monkeypatch):
    monkeypatch.delenv(backend.SETTING, raising=False)
    backend.client.cache_clear()
    try:
        assert backend.client() is None
        backend.require()  # nothing to reach
    finally:
        backend.client.cache_clear()


def test_the_app_started_against_an_unreachable_redis_says_which_setting_and_draws_nothing_else(monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.app.helpers import APP

    url = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setenv(backend.SETTING, url)
    backend.client.cache_clear()
    try:
        at = AppTest.from_file(APP, default_timeout=60).run()
        assert not at.exception and [e.value.split(" (")[0] for e in at.error] == [
            "the shared state is set to a Redis"]
        assert "CLASSROOM_REDIS_URL" in at.error[0].value and not at.main.title
    finally:
        backend.client.cache_clear()
