"""The server's store of trained and uploaded checkpoints: ids from content, validation, bounds, expiry; each test
against both backends, this process's memory and Redis (the shared state of a class served by replicas)."""

import uuid

import pytest
import redis
import torch

from classroom.state import store
from classroom.state.store import (
    ID_CHARS,
    MAX_PINNED,
    PRESET_PINS,
    TEACHER,
    LocalStore,
    RedisStore,
    StoreError,
    short_id,
)
from mechlib import io
from mechlib.config import ModelConfig
from mechlib.io import CheckpointError
from mechlib.model import Transformer
from mechlib.sae import SAEConfig, train_sae


def checkpoint(seed: int) -> bytes:
    return io.to_bytes(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=20, n_ctx=8, seed=seed)))


@pytest.fixture(params=["local", "redis"])
def Store(request):
    """A fresh store's constructor, of either backend (a Redis store under a key prefix of its own)."""
    if request.param == "local":
        return LocalStore
    client = redis.Redis.from_url(request.getfixturevalue("redis_server").url)
    return lambda **bounds: RedisStore(client, prefix=f"test:{uuid.uuid4().hex}:", **bounds)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_id_is_the_contents_and_the_label_names_it(Store):
    store, data = Store(), checkpoint(0)
    stored = store.put("trained", "2L×4H", data, "teacher")
    key = short_id(data)
    assert len(key) == ID_CHARS and key.isalnum() and key == key.lower()
    assert stored.label == f"trained {key}: 2L×4H" and store.get(key).data == data
    assert store.put("uploaded", "again.safetensors", data, "teacher").label == stored.label  # the same bytes, the same entry
    assert short_id(checkpoint(1)) != key and len(store) == 1


def test_a_bad_checkpoint_is_refused_and_nothing_is_kept(Store):
    store = Store()
    with pytest.raises(CheckpointError):
        store.put("uploaded", "junk", b"not a safetensors file", "teacher")
    assert len(store) == 0


def test_an_unknown_id_says_so(Store):
    with pytest.raises(StoreError, match=r"^no model with id abcdefgh is kept on this server: it was never made here, "
                                         r"or it expired \(12 h after its last use"):
        Store().get("abcdefgh")


def test_entries_expire_after_their_last_use_and_use_renews_them(Store):
    clock = Clock()
    store = Store(ttl_s=100, clock=clock)
    a, b = short_id(checkpoint(0)), short_id(checkpoint(1))
    store.put("trained", "a", checkpoint(0), "teacher")
    store.put("trained", "b", checkpoint(1), "teacher")
    clock.now = 90
    store.get(a)           # used at 90: lives to 190
    clock.now = 150        # b, last used at 0, has expired
    assert store.get(a).label.startswith(f"trained {a}")
    with pytest.raises(StoreError):
        store.get(b)


def test_the_count_and_the_bytes_are_bounded_least_recently_used_first_out(Store):
    data = [checkpoint(seed) for seed in range(4)]
    store = Store(max_count=2)
    store.put("trained", "0", data[0], "teacher")
    store.put("trained", "1", data[1], "teacher")
    store.get(short_id(data[0]))   # 1 is now the least recently used
    store.put("trained", "2", data[2], "teacher")
    assert len(store) == 2 and store.get(short_id(data[0])) and store.get(short_id(data[2]))
    with pytest.raises(StoreError):
        store.get(short_id(data[1]))
    small = Store(max_mb=1.5 * len(data[0]) / 2**20)  # room for one
    small.put("trained", "0", data[0], "teacher")
    small.put("trained", "1", data[1], "teacher")
    assert len(small) == 1 and small.get(short_id(data[1]))


def test_one_session_filling_the_store_pushes_out_only_its_own_checkpoints(Store):
    data = [checkpoint(seed) for seed in range(5)]
    store = Store(max_count=4, per_owner=2)
    shared = store.put("trained", "the class's model", data[0], "teacher").label
    for seed in range(1, 5):  # a student uploads four checkpoints, one after another
        store.put("uploaded", str(seed), data[seed], "student")
    assert store.get(short_id(data[0])).label == shared
    assert len(store) == 3  # the teacher's, and the student's last two
    for seed in (1, 2):
        with pytest.raises(StoreError):
            store.get(short_id(data[seed]))


def test_ids_are_80_bits_and_a_colliding_id_keeps_the_first_model_and_refuses_the_second(monkeypatch, Store):
    assert ID_CHARS * 5 >= 80  # base32: 5 bits a letter
    store, first, second = Store(), checkpoint(0), checkpoint(1)
    monkeypatch.setattr("classroom.state.store.short_id", lambda data: "same" * 4)  # as a birthday search would find
    store.put("uploaded", "first", first, "student a")
    with pytest.raises(CheckpointError, match="^another checkpoint is kept under this one's id samesamesamesame"):
        store.put("uploaded", "second", second, "student b")
    assert store.get("same" * 4).data == first


def test_a_pinned_checkpoint_outlives_every_bound(Store):
    clock, data = Clock(), [checkpoint(seed) for seed in range(6)]
    store = Store(max_count=2, per_owner=1, ttl_s=100, clock=clock)
    store.put("trained", "the lesson's model", data[0], "teacher")
    store.pin(short_id(data[0]), TEACHER)
    store.put("trained", "the teacher's next", data[1], "teacher")  # the teacher's share is 1: the pinned one stays
    for seed in range(2, 6):  # other browsers fill the store past its count
        store.put("uploaded", str(seed), data[seed], f"student {seed}")
    clock.now = 1000  # and every unpinned one expires
    assert store.get(short_id(data[0])).data == data[0] and len(store) == 1
    store.unpin(short_id(data[0]))
    clock.now = 2000
    with pytest.raises(StoreError):
        store.get(short_id(data[0]))
    with pytest.raises(StoreError, match="to pin"):
        store.pin("nothing", TEACHER)


def test_pins_are_bounded_the_oldest_released_first(Store):
    store = Store()
    keys = [short_id(store.put("trained", str(seed), checkpoint(seed), f"teacher {seed}").data)
            for seed in range(MAX_PINNED + 1)]
    for key in keys:
        store.pin(key, TEACHER)
    assert not store.pinned(keys[0]) and all(store.pinned(key) for key in keys[1:])
    store.unpin(keys[1])
    assert not store.pinned(keys[1]) and store.pinned(keys[2])


def test_a_students_preset_results_never_unpin_the_teachers_model(Store):
    """Issue 38, M5: eight preset trainings of one student unpinned the teacher's pinned model (the store's pins were
    one list, the oldest out first, whoever pinned it); pins are bounded per holder now."""
    store = Store(max_count=2)
    lesson = short_id(store.put("trained", "the lesson's model", checkpoint(0), "the teacher's browser").data)
    store.pin(lesson, TEACHER)
    presets = []
    for seed in range(1, 10):  # each preset's result is pinned as it is kept (session.add_session_model)
        presets.append(short_id(store.put("trained", f"preset {seed}", checkpoint(seed), "a student").data))
        store.pin(presets[-1], "a student")
    assert store.pinned(lesson) and store.get(lesson).label == f"trained {lesson}: the lesson's model"
    assert [store.pinned(key) for key in presets] == [False] * (9 - PRESET_PINS) + [True] * PRESET_PINS


def test_a_label_is_read_without_the_checkpoints_bytes_and_the_model_is_built_once(Store, monkeypatch):
    store, data = Store(), checkpoint(3)
    key = short_id(store.put("uploaded", "mine.safetensors", data, "a student").data)
    read = []
    monkeypatch.setattr(store, "_find", lambda key: read.append(key))  # a read of the bytes would be recorded here
    assert store.label(key) == f"uploaded {key}: mine.safetensors" and read == []
    assert store.model(key) is store.model(key) and read == []  # built when it was put: its bytes are not read again


def test_a_checkpoint_above_the_memory_budget_is_refused_from_its_header_before_it_is_built(monkeypatch, Store):
    data = checkpoint(0)
    monkeypatch.setenv("MECHLIB_MEMORY_BUDGET_MB", "0.001")
    built = []
    monkeypatch.setattr(store.zoo, "stored", lambda key, read: built.append(key))
    with pytest.raises(CheckpointError, match=r"the checkpoint is too large for this server: its model of [\d,]+ "
                                              r"parameters would need about 0 MB, above this server's budget of 0 MB"):
        Store().put("uploaded", "mine.safetensors", data, "browser a")
    assert built == []


def test_a_sparse_autoencoder_is_kept_like_a_model_and_never_opens_as_one(Store):
    sae = train_sae(torch.randn(200, 16), SAEConfig(16, 32, k=2, model_name="attn-only-2l"), 3, batch_size=32)
    store, data = Store(), io.to_bytes(sae)
    key = short_id(data)
    store.put("sae", "attn-only-2l", data, "teacher")
    assert store.sae(key).cfg == sae.cfg and store.sae(key).read_only
    with pytest.raises(StoreError, match="names a sparse autoencoder, not a model"):
        store.model(key)
    store.put("trained", "2L×4H", model := checkpoint(0), "teacher")
    with pytest.raises(StoreError, match="names a model, not a sparse autoencoder"):
        store.sae(short_id(model))
