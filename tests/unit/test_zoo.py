"""The shared model cache: built once under concurrency, read-only, bounded for uploads."""

import threading
import time
import typing
from mechlib.bounded import Bounded

import pytest
import torch

from mechlib import io, zoo
from mechlib.config import ModelConfig
from mechlib.model import Transformer


def counting_builds(monkeypatch) -> list:
    builds = []

    def slow_transformer(cfg):
        builds.append(cfg)
        time.sleep(0.2)  # long enough that every thread arrives while the first build runs
        return Transformer(cfg)

    monkeypatch.setattr(zoo, "Transformer", slow_transformer)
    return builds


def test_concurrent_first_requests_build_once(monkeypatch):
    builds = counting_builds(monkeypatch)
    cfg = ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=10, n_ctx=4, seed=1234)
    results, barrier = [None] * 8, threading.Barrier(8)

    def request(i):
        barrier.wait()
        results[i] = zoo.random_model(cfg)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1
    assert all(r is results[0] for r in results)


def test_cached_models_are_read_only():
    model = zoo.random_model(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=10, n_ctx=4, seed=77))
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())
    with pytest.raises(RuntimeError, match="read-only"):
        model.train()


def test_uploads_are_keyed_by_content_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setitem(zoo.LIMITS, "upload", 2)
    blobs = []
    for seed in range(3):
        path = tmp_path / f"{seed}.safetensors"
        io.save(Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=10, n_ctx=4, seed=seed)), path)
        blobs.append(path.read_bytes())
    digest, first = zoo.from_checkpoint(blobs[0])
    key = ("upload", digest, str(zoo.DEVICE))
    assert zoo.from_checkpoint(blobs[0])[1] is first and zoo._models.get(key) is first
    assert torch.equal(first.embed.W_E.cpu(), Transformer(first.cfg).embed.W_E)
    zoo.from_checkpoint(blobs[1])
    zoo.from_checkpoint(blobs[2])
    assert sum(1 for key in zoo._models.keys() if key[0] == "upload") == 2
    assert key not in zoo._models.keys()
    assert zoo.from_checkpoint(blobs[0])[1] is not first  # evicted, then loaded again


def test_random_models_are_bounded(monkeypatch):
    monkeypatch.setitem(zoo.LIMITS, "random", 3)
    configs = [ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=10, n_ctx=4, seed=500 + i) for i in range(5)]
    models = [zoo.random_model(cfg) for cfg in configs]
    assert sum(1 for key in zoo._models.keys() if key[0] == "random") == 3
    assert zoo.random_model(configs[-1]) is models[-1]


def test_bad_upload_raises_and_caches_nothing():
    before = len(zoo._models.keys())
    for _ in range(3):
        with pytest.raises(io.CheckpointError, match="empty"):
            zoo.from_checkpoint(b"")
    assert len(zoo._models.keys()) == before
    assert zoo._models._building == {}  # no lock left behind by a failed build


def test_the_declared_model_type_covers_every_zoo_model_and_nothing_else():
    """``load`` and the cache are typed ``Model``; every zoo model is one, and both architectures occur."""
    declared = typing.get_type_hints(zoo.load)["return"]
    assert declared == zoo.Model == typing.get_type_hints(zoo.load_snapshot)["return"]
    assert typing.get_type_hints(zoo._cached)["return"] == zoo.Model
    assert {type(zoo.load(name)) for name in zoo.names()} == set(typing.get_args(zoo.Model))


def test_the_cache_is_bounded_by_bytes_and_keeps_the_newest(monkeypatch):
    """Three models of about 0.8 MB each under a 2 MB bound: the least recently used goes, whatever its kind."""
    configs = [ModelConfig(n_layers=1, d_model=64, n_heads=2, d_vocab=1500, n_ctx=8, seed=900 + i) for i in range(3)]
    size = zoo.model_mb(Transformer(configs[0]))
    assert 0.7 < size < 0.9  # 2 · 1500 · 64 + … numbers of 4 bytes
    monkeypatch.setattr(zoo, "_models", Bounded(max_size=lambda: zoo.cache_mb(), size=zoo.model_mb, per_group=zoo.LIMITS.get))  # an empty cache for this test, the shared one untouched
    monkeypatch.setattr(zoo, "cache_mb", lambda: 2.0)
    first, second = zoo.random_model(configs[0]), zoo.random_model(configs[1])
    zoo.random_model(configs[0])                          # used again: now the second is the least recent
    zoo.random_model(configs[2])
    keys = [key for key in zoo._models.keys() if key[0] == "random" and key[1] in configs]
    assert [key[1] for key in keys] == [configs[0], configs[2]]  # the second went
    assert zoo.random_model(configs[0]) is first
