"""Checkpoints: exact round trips, and one clear error type for every bad file."""

import json
import pickle
import re
import struct

import pytest
import torch
from safetensors.torch import save as st_save

from mechlib import io, zoo
from mechlib.config import ModelConfig
from mechlib.model import Transformer
from mechlib.sae import SAEConfig, train_sae

CFG = ModelConfig(n_layers=2, d_model=16, n_heads=4, d_vocab=23, n_ctx=8, d_mlp=32, normalization="LN", seed=5)


def saved_bytes(tmp_path, model=None) -> bytes:
    path = tmp_path / "model.safetensors"
    io.save(model or Transformer(CFG), path)
    return path.read_bytes()


def rewrite(tensors: dict, config: ModelConfig = CFG) -> bytes:
    return st_save(tensors, metadata={"format": io.FORMAT, "config": config.to_json()})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_round_trip_is_exact(tmp_path, dtype):
    model = Transformer(CFG).to(dtype)
    io.save(model, tmp_path / "m.safetensors")
    loaded = io.load(tmp_path / "m.safetensors")
    assert loaded.cfg == CFG
    assert loaded.embed.W_E.dtype == dtype
    original = model.state_dict()
    assert all(torch.equal(original[k], v) for k, v in loaded.state_dict().items())
    tokens = torch.randint(0, CFG.d_vocab, (2, CFG.n_ctx))
    assert torch.equal(model.run_with_cache(tokens)[0], loaded.run_with_cache(tokens)[0])


def test_save_leaves_no_temporary_file(tmp_path):
    io.save(Transformer(CFG), tmp_path / "m.safetensors")
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def bad_files(tmp_path) -> dict[str, tuple[bytes, str]]:
    good = saved_bytes(tmp_path)
    tensors = dict(Transformer(CFG).state_dict())
    nan = dict(tensors, **{"blocks.0.attn.W_Q": tensors["blocks.0.attn.W_Q"].clone().fill_(float("nan"))})
    wrong_shape = dict(tensors, **{"blocks.1.attn.W_O": torch.zeros(4, 4, 17)})
    missing = {k: v for k, v in tensors.items() if k != "unembed.W_U"}
    extra = dict(tensors, **{"blocks.9.attn.W_Q": torch.zeros(1)})
    half = {k: (v.half() if v.is_floating_point() and k != "embed.W_E" else v) for k, v in tensors.items()}
    broken_mask = dict(tensors, **{"blocks.0.attn.mask": torch.ones(8, 8, dtype=torch.bool)})
    no_config = st_save(tensors)
    bad_config = st_save(tensors, metadata={"format": io.FORMAT, "config": json.dumps({"n_layers": 2, "d_model": 10, "n_heads": 3, "d_vocab": 5, "n_ctx": 4})})
    huge_values = dict(tensors, **{"embed.W_E": tensors["embed.W_E"].clone().fill_(3e38)})
    nested_header = struct.pack("<Q", 200_000) + b"[" * 100_000 + b"]" * 100_000
    nested_config = st_save(tensors, metadata={"format": io.FORMAT, "config": "[" * 100_000 + "]" * 100_000})
    huge_seed = st_save(tensors, metadata={"format": io.FORMAT, "config": CFG.to_json().replace('"seed": 5', f'"seed": {2**64}')})
    huge_config = st_save(tensors, metadata={"format": io.FORMAT, "config": ModelConfig(n_layers=48, d_model=8192, n_heads=8, d_vocab=200_000, n_ctx=8192).to_json()})
    lstm = {"format": io.FORMAT, "architecture": "lstm"}
    deep_lstm = st_save(tensors, metadata={**lstm, "config": json.dumps({"d_vocab": 5, "d_model": 2, "d_hidden": 2, "n_layers": 10**6})})
    wide_lstm = st_save(tensors, metadata={**lstm, "config": json.dumps({"d_vocab": 5, "d_model": 2, "d_hidden": 8192, "n_layers": 48})})
    many_digits = st_save(tensors, metadata={"format": io.FORMAT, "config": CFG.to_json().replace('"seed": 5', '"seed": ' + "7" * 5000)})
    header = json.loads(good[8 : 8 + int.from_bytes(good[:8], "little")])
    header["embed.W_E"]["shape"] = [2**62, 2**62]  # sizes whose product overflows: never handed to torch
    text = json.dumps(header).encode()
    overflowing_shape = struct.pack("<Q", len(text)) + text + good[8 + int.from_bytes(good[:8], "little"):]
    return {
        "empty": (b"", "the file is empty"),
        "random bytes": (bytes(range(256)) * 40, "not a safetensors file"),
        "tiny": (b"abc", "too short"),
        "truncated": (good[: len(good) // 2], "damaged"),
        "too small for its config": (good[: len(good) // 4], "needs 5,367 weights but the file has only 6,287 bytes"),
        "pickle": (pickle.dumps({"a": 1}), "looks like a pickle/torch.save file"),
        "torch.save zip": (b"PK\x03\x04" + bytes(100), "looks like a pickle/torch.save file"),
        "header not json": (struct.pack("<Q", 4) + b"\xff\xfe{[" + bytes(8), "header is not JSON"),
        "no config": (no_config, "not saved by Addition Machines"),
        "bad config": (bad_config, "config is invalid: d_model=10 is not divisible by n_heads=3"),
        "too large": (huge_config, "too large for this server"),
        "nan": (rewrite(nan), "blocks.0.attn.W_Q holds NaN or infinite values"),
        "huge values": (rewrite(huge_values), "embed.W_E holds values up to 3e+38, above 10,000"),
        "nested header": (nested_header, "header is not JSON"),
        "nested config": (nested_config, "config is not a flat JSON object"),
        "huge seed": (huge_seed, "seed=18446744073709551616 is out of range"),
        "wrong shape": (rewrite(wrong_shape), "blocks.1.attn.W_O has shape [4, 4, 17], but the config needs [4, 4, 16]"),
        "missing key": (rewrite(missing), "lacks 1 weight(s) its config needs: unembed.W_U"),
        "extra key": (rewrite(extra), "has 1 weight(s) its config does not use: blocks.9.attn.W_Q"),
        "mixed dtype": (rewrite(half), "is torch.float16, expected torch.float32"),
        "broken mask": (rewrite(broken_mask), "blocks.0.attn.mask does not hold the causal mask"),
        "a million LSTM layers": (deep_lstm, "n_layers=1000000 is out of range; choose n_layers between 1 and 48"),
        "a huge LSTM": (wide_lstm, "too large for this server: its config needs 25,504,620,559 weights (102,018 MB in float32)"),
        "5,000 digits": (many_digits, "the config holds a number of 5,000 digits; sizes have at most 30"),
        "overflowing shape": (overflowing_shape, "embed.W_E has shape [4611686018427387904, 4611686018427387904], but"),
    }


@pytest.mark.parametrize("case", ["empty", "random bytes", "tiny", "truncated", "too small for its config", "pickle",
                                  "torch.save zip", "header not json", "no config", "bad config", "too large", "nan",
                                  "huge values", "nested header", "nested config", "huge seed", "wrong shape",
                                  "missing key", "extra key", "mixed dtype", "broken mask", "a million LSTM layers",
                                  "a huge LSTM", "5,000 digits", "overflowing shape"])
def test_each_bad_file_raises_one_error_type_with_a_clear_message(tmp_path, case):
    data, message = bad_files(tmp_path)[case]
    with pytest.raises(io.CheckpointError, match=re.escape(message)):
        io.load(data)
    path = tmp_path / f"{case}.safetensors"
    path.write_bytes(data)
    with pytest.raises(io.CheckpointError):
        io.load(path)


def test_pickle_renamed_safetensors_is_never_unpickled(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(a))
    path = tmp_path / "model.safetensors"
    torch.save(Transformer(CFG).state_dict(), path)  # a real torch.save file with the right name
    with pytest.raises(io.CheckpointError, match="never opened"):
        io.load(path)
    assert calls == []


def test_oversized_file_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "MAX_BYTES", 1000)
    path = tmp_path / "big.safetensors"
    path.write_bytes(bytes(2000))
    with pytest.raises(io.CheckpointError, match="the file is 0.0 MB; checkpoints may be at most 0 MB"):
        io.load(path)


def test_the_size_cap_is_stated_as_the_uploader_states_it(tmp_path):
    # app.py's uploader says MAX_BYTES // 10**6 MB (the browser's MB is 10**6 bytes); the refusal names the same number
    assert io.MAX_BYTES == 64 * 10**6
    with pytest.raises(io.CheckpointError, match=r"^the file is 64\.0 MB; checkpoints may be at most 64 MB$"):
        io.load(bytes(io.MAX_BYTES + 1))
    path = tmp_path / "big.safetensors"
    path.write_bytes(bytes(io.MAX_BYTES + 10**6))
    with pytest.raises(io.CheckpointError, match=r"^the file is 65\.0 MB; checkpoints may be at most 64 MB$"):
        io.load(path)


def test_missing_path(tmp_path):
    with pytest.raises(io.CheckpointError, match="no checkpoint at"):
        io.load(tmp_path / "nope.safetensors")


def test_a_checkpoint_whose_header_length_reads_like_pickle_magic_still_loads():
    """A safetensors file starts with its header length, little-endian: 896 = 0x0380 reads as b"\\x80\\x03", the
    opening of a protocol-3 pickle. Such a file (1 in 256 start with 0x80) was refused as a pickle."""
    from mechlib.data import CharTokenizer

    model = Transformer(ModelConfig(n_layers=0, d_model=8, n_heads=1, d_vocab=3, n_ctx=4))
    for length in range(1, 1000):  # the tokenizer's JSON sets the header's length, a character at a time
        model.tokenizer = CharTokenizer(["<bos>", "<unk>", "a" * length])
        data = io.to_bytes(model)
        if data[:2] == b"\x80\x03":
            break
    else:
        pytest.fail("no header length of 0x0380 found")
    loaded = io.load(data)
    assert torch.equal(loaded.embed.W_E, model.embed.W_E) and loaded.tokenizer.vocab == model.tokenizer.vocab


def test_the_same_model_gives_the_same_bytes_every_time():
    """safetensors writes its header's keys in a random order; to_bytes sorts them, so a rebuild that gives the
    same weights gives the same file (the zoo's `python -m mechlib.train NAME` is checked that way)."""
    model = zoo.load("attn-only-0l")  # with a word tokenizer in the metadata
    first = io.to_bytes(model)
    assert all(io.to_bytes(model) == first for _ in range(5))
    assert io.load(first).tokenizer.to_json() == model.tokenizer.to_json()


def sparse_autoencoder(d_in: int = 16, d_sae: int = 48):
    acts = torch.randn(400, d_in, generator=torch.Generator().manual_seed(0))
    return train_sae(acts, SAEConfig(d_in, d_sae, k=4, hook_name="blocks.0.hook_resid_post",
                                     model_name="attn-only-2l"), 5, batch_size=64), acts


def test_a_sparse_autoencoder_round_trips_with_its_config_and_reconstructs_exactly():
    sae, acts = sparse_autoencoder()
    loaded = io.load(io.to_bytes(sae))
    assert loaded.cfg == sae.cfg and loaded.read_only is False
    assert torch.equal(loaded(acts), sae(acts))  # the same weights, the same latents, bit for bit
    assert io.config(io.to_bytes(sae)) == sae.cfg


@pytest.mark.parametrize("field, value, message", [
    ("d_sae", 10**12, "d_sae=1000000000000 is out of range"),
    ("k", 0, "k=0 is out of range"),
    ("activation", "gated", "activation must be one of"),
    ("l1_coefficient", -1, "the L1 coefficient must be a number ≥ 0"),
    ("hook_name", "x" * 300, "hook_name must be a string of at most 200 characters"),
])
def test_a_sparse_autoencoders_config_is_checked_before_anything_is_built(field, value, message):
    sae, _ = sparse_autoencoder()
    data = io.to_bytes(sae)
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    config = json.loads(header["__metadata__"]["config"])
    config[field] = value
    header["__metadata__"]["config"] = json.dumps(config)
    text = json.dumps(header).encode()
    with pytest.raises(io.CheckpointError, match=re.escape(message)):
        io.load(struct.pack("<Q", len(text)) + text + data[8 + length:])
