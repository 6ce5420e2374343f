"""Checkpoints (of a transformer, an LSTM or a sparse autoencoder): safetensors with the config in the metadata,
validated before anything is used.

Never unpickles. Every failure raises ``CheckpointError`` with a sentence a student can act on;
a file that fails validation changes nothing (no model is built from it).
"""

import json
import math
import os
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save as st_save

from mechlib import safetensors_read
from mechlib.config import ModelConfig
from mechlib.data import Tokenizer, tokenizer_from_json
from mechlib.lstm import LSTM, LSTMConfig
from mechlib.model import Transformer
from mechlib.sae import SAE, SAEConfig

ARCHITECTURES = {"transformer": (Transformer, ModelConfig, "embed.W_E"), "lstm": (LSTM, LSTMConfig, "W_E"),
                 "sae": (SAE, SAEConfig, "W_enc")}  # a sparse autoencoder: its config names the model and hook it reads

__all__ = ["CheckpointError", "save", "to_bytes", "write_atomic", "load", "config", "MAX_BYTES", "FORMAT"]

FORMAT = "addition-machines/1"
MAX_BYTES = 64 * 10**6  # the one upload cap: the app's uploader is given MAX_BYTES // 10**6 MB, which Chromium and
                         # Firefox count in 10⁶ bytes (Streamlit's server in 2²⁰): a file under the cap is never refused
MAX_ABS = 1e4  # larger weights overflow float32 logits: a corrupt or diverged checkpoint
FLOAT_DTYPES = (torch.float32, torch.float64)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says why and what to do."""


def to_bytes(model: Transformer | LSTM | SAE) -> bytes:
    """The model as safetensors bytes: weights, architecture, config and (when it has one) tokenizer."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    architecture = next(name for name, (kind, _, _) in ARCHITECTURES.items() if isinstance(model, kind))
    metadata = {"format": FORMAT, "architecture": architecture, "config": model.cfg.to_json()}
    if getattr(model, "tokenizer", None) is not None:
        metadata["tokenizer"] = model.tokenizer.to_json()
    return _sorted_header(st_save(tensors, metadata=metadata))


def _sorted_header(data: bytes) -> bytes:
    """The same file with its JSON header's keys in sorted order: safetensors writes them in a random order, so
    the same weights gave different bytes. The data offsets do not depend on that order, and the header keeps its
    length (compact JSON, padded with spaces as before)."""
    length = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8 : 8 + length]), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert len(header) <= length, "a sorted header came out longer than safetensors' own"
    return data[:8] + header.ljust(length) + data[8 + length :]


def save(model: Transformer | LSTM | SAE, path: str | Path) -> None:
    """Write ``model`` to ``path`` atomically (a temporary file, then a rename)."""
    write_atomic(Path(path), to_bytes(model))


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a checkpoint is meant to be read by others
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(source: str | Path | bytes) -> Transformer | LSTM | SAE:
    """A model from a checkpoint's path or bytes, after checking, in this order and before anything is built:
    header, config (bounded), the weights its config needs against the file's size, the header's names and
    shapes, then dtypes and finiteness. Raises ``CheckpointError``, whatever the file holds."""
    if isinstance(source, bytes):
        data = source
    else:
        path = Path(source)
        if not path.is_file():
            raise CheckpointError(f"no checkpoint at {path}")
        if path.stat().st_size > MAX_BYTES:
            raise CheckpointError(_too_large(path.stat().st_size))
        data = path.read_bytes()
    try:
        return _build(data)
    except CheckpointError:
        raise
    except Exception as error:  # a crafted file may reach torch's or safetensors' own errors: still a refusal
        raise CheckpointError(f"the file cannot be read as a checkpoint ({type(error).__name__}: "
                              f"{str(error)[:120]}); it is damaged or was not saved by mechlib.io.save") from None


def config(data: bytes) -> ModelConfig | LSTMConfig | SAEConfig:
    """The config of the checkpoint ``data``, read from its header alone (checked as ``load`` checks it): what a
    caller needs to know the model's size before anything is built. Raises ``CheckpointError``."""
    return _architecture_and_config(_read_header(data)[0])[1]


def _architecture_and_config(metadata: dict[str, str]) -> tuple[str, ModelConfig | LSTMConfig | SAEConfig]:
    architecture = metadata.get("architecture", "transformer")
    if architecture not in ARCHITECTURES:
        raise CheckpointError(f"the checkpoint's architecture {architecture[:40]!r} is not one this app knows")
    return architecture, _read_config(metadata, ARCHITECTURES[architecture][1])


def _build(data: bytes) -> Transformer | LSTM | SAE:
    """The model of ``data``: built on the meta device and given the checkpoint's tensors, so no weight is drawn at
    random only to be overwritten."""
    metadata, entries, start = _read_header(data)
    architecture, cfg = _architecture_and_config(metadata)
    build, _, reference = ARCHITECTURES[architecture]
    tokenizer = _read_tokenizer(metadata, cfg)
    _check_size(cfg, len(data))
    with torch.device("meta"):
        model = build(cfg)
    expected = model.state_dict()
    _check_entries(entries, expected)
    try:
        safetensors_read.check_spans(entries, start, len(data))
    except safetensors_read.HeaderError as error:
        raise CheckpointError(f"the file is damaged and cannot be read as safetensors ({error})") from None
    tensors = safetensors_read.tensors(data, entries)
    _check_tensors(tensors, expected, reference)
    model.load_state_dict(tensors, assign=True)
    model.tokenizer = tokenizer
    return model


def _check_size(cfg: ModelConfig | LSTMConfig | SAEConfig, n_bytes: int) -> None:
    """Each weight a config needs takes at least 2 bytes (float16, itself refused later by its dtype): more than
    the file holds, and the config is refused before any model, even on the meta device, is built from it."""
    weights = cfg.n_params()
    if weights * 4 > MAX_BYTES:
        raise CheckpointError(f"the checkpoint's model is too large for this server: its config needs {weights:,} "
                              f"weights ({weights * 4 / 10**6:,.0f} MB in float32), and a checkpoint may be at most "
                              f"{MAX_BYTES // 10**6} MB")
    if weights * 2 > n_bytes:
        raise CheckpointError(f"the checkpoint's config needs {weights:,} weights but the file has only {n_bytes:,} "
                              "bytes: it is truncated or its config is not the one its weights were saved with")


def _check_entries(entries: dict[str, safetensors_read.Entry], expected: dict[str, torch.Tensor]) -> None:
    """The header's tensor names and shapes against the config's, before safetensors reads any tensor."""
    missing, unexpected = sorted(set(expected) - set(entries)), sorted(set(entries) - set(expected))
    if missing:
        raise CheckpointError(f"the checkpoint lacks {len(missing)} weight(s) its config needs: {', '.join(missing[:5])}")
    if unexpected:
        names = ", ".join(name[:60] for name in unexpected[:5])
        raise CheckpointError(f"the checkpoint has {len(unexpected)} weight(s) its config does not use: {names}")
    for name, want in expected.items():
        shape = entries[name].shape
        if shape != list(want.shape):
            shown = str(shape) if len(str(shape)) <= 60 else str(shape)[:59] + "…"
            raise CheckpointError(f"{name} has shape {shown}, but the config needs {list(want.shape)}")


def _too_large(n_bytes: int) -> str:
    """The size refusal, in the uploader's unit (MB of 10⁶ bytes), so both state the same cap."""
    return f"the file is {n_bytes / 10**6:,.1f} MB; checkpoints may be at most {MAX_BYTES // 10**6} MB"


def _looks_like_pickle(data: bytes) -> bool:
    """torch.save's zip archive, or a pickle of protocol 2–5. Asked only once the bytes are not safetensors:
    a safetensors header length can begin with the same bytes (0x80 is its low byte for 1 file in 256)."""
    return data[:4] == b"PK\x03\x04" or (len(data) > 1 and data[0] == 0x80 and 2 <= data[1] <= 5)


def _not_safetensors(data: bytes, why: str) -> CheckpointError:
    if _looks_like_pickle(data):
        return CheckpointError("this looks like a pickle/torch.save file, not safetensors; pickles can run code, "
                               "so they are never opened here. Save the weights with mechlib.io.save")
    return CheckpointError(f"this is not a safetensors file ({why}); it may be truncated or another format")


def _read_header(data: bytes) -> tuple[dict[str, str], dict[str, safetensors_read.Entry], int]:
    """The header's metadata (strings), its tensor entries (name -> dtype, shape, offsets) and where the data
    starts."""
    if not data:
        raise CheckpointError("the file is empty; choose a .safetensors checkpoint saved by this app or mechlib.io.save")
    if len(data) > MAX_BYTES:
        raise CheckpointError(_too_large(len(data)))
    try:
        return safetensors_read.read_header(data, len(data))
    except safetensors_read.HeaderError as error:
        raise _not_safetensors(data, str(error)) from None


def _read_config(metadata: dict[str, str], config_class: type) -> ModelConfig | LSTMConfig | SAEConfig:
    if metadata.get("format") != FORMAT or "config" not in metadata:
        raise CheckpointError("the file is safetensors but was not saved by Addition Machines (no model config in its "
                              "metadata); save it with mechlib.io.save")
    try:
        return config_class.from_json(metadata["config"])
    except RecursionError:
        raise CheckpointError("the checkpoint's model config is not a flat JSON object") from None
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"the checkpoint's model config is invalid: {error}") from None


def _read_tokenizer(metadata: dict[str, str], cfg: ModelConfig | LSTMConfig | SAEConfig) -> Tokenizer | None:
    if "tokenizer" not in metadata:
        return None
    try:
        tokenizer = tokenizer_from_json(metadata["tokenizer"])
    except (ValueError, RecursionError) as error:
        raise CheckpointError(f"the checkpoint's tokenizer is invalid: {error}") from None
    if tokenizer.d_vocab != cfg.d_vocab:
        raise CheckpointError(f"the tokenizer has {tokenizer.d_vocab} entries but the model's d_vocab is {cfg.d_vocab}")
    return tokenizer


def _check_tensors(tensors: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], reference: str) -> None:
    """Dtypes, the causal masks, finiteness and magnitude: names and shapes were checked in the header."""
    float_dtype = tensors[reference].dtype
    if float_dtype not in FLOAT_DTYPES:
        raise CheckpointError(f"weights must be float32 or float64, {reference} is {float_dtype}")
    for name, want in expected.items():
        got = tensors[name]
        want_dtype = torch.bool if want.dtype == torch.bool else float_dtype
        if got.dtype != want_dtype:
            raise CheckpointError(f"{name} is {got.dtype}, expected {want_dtype} like the other weights")
        if name.endswith(".mask"):
            if not torch.equal(got, torch.ones_like(got).tril()):
                raise CheckpointError(f"{name} does not hold the causal mask")
        elif name.endswith(".IGNORE"):
            if not (math.isinf(got.item()) and got.item() < 0):
                raise CheckpointError(f"{name} must be -inf")
        elif not torch.isfinite(got).all():
            raise CheckpointError(f"{name} holds NaN or infinite values; the checkpoint is corrupt")
        elif got.numel() and got.abs().max() > MAX_ABS:
            raise CheckpointError(f"{name} holds values up to {float(got.abs().max()):.3g}, above {MAX_ABS:,.0f}; "
                                  "the checkpoint is corrupt or its training diverged")
