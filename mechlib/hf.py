"""Hugging Face GPT-2 models → mechlib ``Transformer`` (TransformerLens's names), read from a ``transformers``
model object or from a directory in its format (``config.json``, ``model.safetensors``, ``tokenizer.json``).

GPT-2 keeps a layer's queries, keys and values in one fused ``c_attn`` (a ``Conv1D``: ``x @ weight + bias``,
weight [d_model, 3·d_model], the columns Q | K | V, each head's d_head columns side by side), its output projection
in ``c_proj`` [n_heads·d_head, d_model], LayerNorm before attention and MLP, GPT-2's tanh GELU ("gelu_new") and an
unembedding tied to the embedding. Split and reshaped, these are mechlib's W_Q, W_K, W_V [n_heads, d_model, d_head]
and W_O [n_heads, d_head, d_model] (the same rearrangement as TransformerLens's ``convert_gpt2_weights``).

A directory is checked before anything is built: its config's fields (sizes bounded by ``ModelConfig``; a setting
that changes the computation and that mechlib lacks is refused by name), then the safetensors header's names,
shapes and dtypes, then the tensors' finiteness. Nothing is unpickled: a directory holding only
``pytorch_model.bin`` is refused. ``transformers`` is not needed for a directory; ``tokenizers`` is, for its
``tokenizer.json``, and is imported only then.
"""

import json
from pathlib import Path

import torch
from torch import Tensor

from mechlib.config import ModelConfig, read_json
from mechlib.hf_tokenizer import HFTokenizer
from mechlib.model import LN_EPS, Transformer
from mechlib.safetensors_read import File, HeaderError

__all__ = ["HFError", "from_transformers", "read_config"]

ACT_FNS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu"}  # GPT-2's names → mechlib's
# config.json fields that change the computation, and the value mechlib computes with
REQUIRED = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False}
FLOATS = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}
IGNORED = (".attn.bias", ".attn.masked_bias")  # older checkpoints' causal-mask buffers: mechlib builds its own
RENAMED = {"attn.c_proj.bias": "attn.b_O", "ln_1.weight": "ln1.w", "ln_1.bias": "ln1.b", "ln_2.weight": "ln2.w",
           "ln_2.bias": "ln2.b", "mlp.c_fc.weight": "mlp.W_in", "mlp.c_fc.bias": "mlp.b_in",
           "mlp.c_proj.weight": "mlp.W_out", "mlp.c_proj.bias": "mlp.b_out", "wpe.weight": "pos_embed.W_pos",
           "ln_f.weight": "ln_final.w", "ln_f.bias": "ln_final.b"}  # GPT-2's tensors that keep their shape
CONFIG_BYTES = 1_000_000


class HFError(ValueError):
    """A Hugging Face model that cannot be read as a mechlib model; the message says why."""


def read_config(directory: str | Path) -> ModelConfig:
    """The mechlib config of the GPT-2 directory's ``config.json``, read alone: a caller states the model's size
    (``ModelConfig.estimate_mb``) before loading anything. Raises ``HFError``."""
    return gpt2_config(_fields(Path(directory)))


def _fields(directory: Path) -> dict:
    """The directory's ``config.json``, bounded in size (and its numbers in digits) and parsed."""
    path = directory / "config.json"
    if not path.is_file():
        raise HFError("the directory has no config.json: it is not a Hugging Face model directory")
    if path.stat().st_size > CONFIG_BYTES:
        raise HFError(f"config.json is {path.stat().st_size:,} bytes; a model's config.json is a few kB")
    try:
        fields = read_json(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise HFError(f"config.json is not JSON a model's config can be ({_reason(error)})") from None
    if not isinstance(fields, dict):
        raise HFError("config.json is not a JSON object")
    return fields


def _reason(error: Exception) -> str:
    """An exception as a short reason: its own sentence (``read_json``'s), or its kind (a parser's position)."""
    return str(error)[:120] if type(error) is ValueError else type(error).__name__


def gpt2_config(fields: dict) -> ModelConfig:
    """The mechlib config of a GPT-2 ``config.json`` (as a dict); a field mechlib cannot compute with, or of the
    wrong type, is refused by name."""
    if not isinstance(fields, dict) or fields.get("model_type") != "gpt2":
        kind = fields.get("model_type") if isinstance(fields, dict) else None
        raise HFError(f"the model's type is {_shown(kind)}; only GPT-2 ('gpt2') models are read")
    activation = fields.get("activation_function", "gelu_new")
    if not isinstance(activation, str) or activation not in ACT_FNS:
        raise HFError(f"activation_function={_shown(activation)} has no counterpart in mechlib; it computes "
                      f"{', '.join(map(repr, ACT_FNS))}")
    for name, value in REQUIRED.items():
        if fields.get(name, value) != value:
            raise HFError(f"{name}={_shown(fields[name])} has no counterpart in mechlib, which computes "
                          f"{name}={value!r}")
    if fields.get("layer_norm_epsilon", LN_EPS) != LN_EPS:
        raise HFError(f"layer_norm_epsilon={_shown(fields['layer_norm_epsilon'])} has no counterpart in mechlib, "
                      f"whose LayerNorm has ε = {LN_EPS}")
    for name in ("tie_word_embeddings", "bos_token_id"):
        if name in fields and not isinstance(fields[name], bool | int | None):
            raise HFError(f"{name}={_shown(fields[name])} must be {'true or false' if name[0] == 't' else 'a token id'}")
    n_embd, n_inner = fields.get("n_embd"), fields.get("n_inner")
    try:
        return ModelConfig(n_layers=fields.get("n_layer"), d_model=n_embd, n_heads=fields.get("n_head"),
                           d_vocab=fields.get("vocab_size"), n_ctx=fields.get("n_positions"),
                           d_mlp=n_inner or (4 * n_embd if isinstance(n_embd, int) else n_embd), normalization="LN",
                           act_fn=ACT_FNS[activation])
    except (ValueError, TypeError) as error:
        raise HFError(f"the model's config does not fit mechlib: {error}") from None


def _shown(value: object, most: int = 40) -> str:
    """``repr(value)``, cut to ``most`` characters, for a message."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 1] + "…"


def from_transformers(source) -> Transformer:
    """A new mechlib ``Transformer`` of a GPT-2 model: a ``transformers`` ``GPT2LMHeadModel`` or ``GPT2Model``
    (no tokenizer), or a directory in Hugging Face's format (its ``tokenizer.json``, when there is one, becomes
    the model's ``tokenizer``). The model is on the CPU; float32 and float64 weights keep their dtype, float16 and
    bfloat16 become float32. Raises ``HFError`` for a model mechlib cannot compute exactly."""
    if isinstance(source, str | Path):
        return _from_directory(Path(source))
    if not hasattr(source, "config") or not hasattr(source, "state_dict"):
        raise TypeError("from_transformers takes a transformers GPT-2 model or a directory, got "
                        f"{type(source).__name__}")
    fields = source.config.to_dict()
    cfg, tied = gpt2_config(fields), fields.get("tie_word_embeddings", True)
    tensors = {name: tensor.detach() for name, tensor in source.state_dict().items()}
    header = {name: (tensor.dtype, list(tensor.shape)) for name, tensor in tensors.items()}
    _check_header(header, cfg, tied)
    return _build(cfg, header, tensors.__getitem__, tied)


def _from_directory(directory: Path) -> Transformer:
    fields = _fields(directory)
    cfg, tied = gpt2_config(fields), fields.get("tie_word_embeddings", True)
    weights = directory / "model.safetensors"
    if not weights.is_file():
        pickled = [name for name in ("pytorch_model.bin", "tf_model.h5") if (directory / name).is_file()]
        raise HFError("the directory has no model.safetensors" + (
            f" (only {pickled[0]}: a pickle, never opened here; save the model with safe_serialization)"
            if pickled else ""))
    tokenizer = _tokenizer(directory / "tokenizer.json", cfg, fields.get("bos_token_id"))
    try:
        with File(weights) as file:
            header = {name: (FLOATS.get(entry.dtype, entry.dtype), entry.shape) for name, entry in file.entries.items()}
            _check_header(header, cfg, tied)
            file.check_spans()
            model = _build(cfg, header, file.tensor, tied)
            file.unchanged()
    except (HeaderError, OSError) as error:
        reason = str(error) if isinstance(error, HeaderError) else error.strerror or type(error).__name__
    else:
        model.tokenizer = tokenizer
        return model
    raise HFError(f"model.safetensors cannot be read: {reason}")  # outside the handler: nothing read is kept


def _tokenizer(path: Path, cfg: ModelConfig, bos_id: int | None) -> HFTokenizer | None:
    """The directory's tokenizer, read before any weight: a broken ``tokenizer.json`` refuses the model at once.
    None when the directory has none (the model reads token ids)."""
    if not path.is_file():
        return None
    try:
        return HFTokenizer.from_file(path, cfg.d_vocab, bos_id)
    except ValueError as error:
        raise HFError(f"tokenizer.json {error}") from None


def _expected(cfg: ModelConfig, tied: bool) -> dict[str, list[int]]:
    """GPT-2's tensor names (without the ``transformer.`` prefix) and shapes for ``cfg``."""
    d, d_mlp, shapes = cfg.d_model, cfg.d_mlp, {}
    shapes["wte.weight"], shapes["wpe.weight"] = [cfg.d_vocab, d], [cfg.n_ctx, d]
    for layer in range(cfg.n_layers):
        for name, shape in {"ln_1.weight": [d], "ln_1.bias": [d], "attn.c_attn.weight": [d, 3 * d],
                            "attn.c_attn.bias": [3 * d], "attn.c_proj.weight": [d, d], "attn.c_proj.bias": [d],
                            "ln_2.weight": [d], "ln_2.bias": [d], "mlp.c_fc.weight": [d, d_mlp],
                            "mlp.c_fc.bias": [d_mlp], "mlp.c_proj.weight": [d_mlp, d], "mlp.c_proj.bias": [d]}.items():
            shapes[f"h.{layer}.{name}"] = shape
    shapes["ln_f.weight"], shapes["ln_f.bias"] = [d], [d]
    if not tied:
        shapes["lm_head.weight"] = [cfg.d_vocab, d]
    return shapes


def _gpt2_name(name: str) -> str | None:
    """A tensor's name without ``transformer.``; None for a causal-mask buffer (mechlib builds its own)."""
    name = name.removeprefix("transformer.")
    return None if name.endswith(IGNORED) else name


def _check_header(header: dict[str, tuple[torch.dtype | str, list[int]]], cfg: ModelConfig, tied: bool) -> None:
    """Names, shapes and dtypes (a torch dtype, or the file's name of one torch lacks) against the config's,
    before any tensor is read."""
    expected = _expected(cfg, tied)
    present = {_gpt2_name(name): (dtype, shape) for name, (dtype, shape) in header.items()}
    present.pop(None, None)
    if tied:
        present.pop("lm_head.weight", None)  # saved beside the embedding it is tied to, by some versions
    missing, unexpected = sorted(expected.keys() - present.keys()), sorted(present.keys() - expected.keys())
    if missing:
        raise HFError(f"the weights lack {len(missing)} tensor(s) the config needs: {', '.join(missing[:5])}")
    if unexpected:
        raise HFError(f"the weights have {len(unexpected)} tensor(s) a GPT-2 of this config does not: "
                      f"{', '.join(name[:60] for name in unexpected[:5])}")
    for name, want in expected.items():
        dtype, shape = present[name]
        if list(shape) != want:
            raise HFError(f"{name} has shape {list(shape)}, but the config needs {want}")
        if dtype not in FLOATS.values():
            raise HFError(f"{name} is {dtype}; weights must be float32, float64, float16 or bfloat16")


def _build(cfg: ModelConfig, header: dict[str, tuple[torch.dtype, list[int]]], read, tied: bool) -> Transformer:
    """The mechlib model of GPT-2's tensors (names, shapes and dtypes in ``header``, checked), each tensor read by
    ``read(name)`` in turn, checked finite and copied into the model's weights: beside the model, one tensor at a
    time is held."""
    names = {_gpt2_name(name): name for name in header}
    names.pop(None, None)
    if tied:
        names.pop("lm_head.weight", None)
    first = header[names["wte.weight"]][0]
    dtype = first if first in (torch.float32, torch.float64) else torch.float32
    model = Transformer(cfg).to(dtype)
    weights = dict(model.named_parameters())
    with torch.no_grad():
        for name, stored in names.items():
            tensor = read(stored).to("cpu", dtype)
            if not torch.isfinite(tensor).all():
                raise HFError(f"{name} holds NaN or infinite values; the checkpoint is corrupt")
            for ours, value in _mechlib_parts(name, tensor, cfg, tied).items():
                weights[ours].copy_(value)
    return model.eval()


def _mechlib_parts(name: str, tensor: Tensor, cfg: ModelConfig, tied: bool) -> dict[str, Tensor]:
    """GPT-2's tensor ``name`` (without ``transformer.``) under TransformerLens's names and shapes: the fused
    queries, keys and values split into W_Q, W_K, W_V [n_heads d_model d_head], c_proj as W_O
    [n_heads d_head d_model], the unembedding the (tied) embedding's transpose [d_model d_vocab]."""
    h, d, dh = cfg.n_heads, cfg.d_model, cfg.d_head
    if name == "wte.weight":
        return {"embed.W_E": tensor} | ({"unembed.W_U": tensor.T} if tied else {})
    if name == "lm_head.weight":
        return {"unembed.W_U": tensor.T}
    if name in RENAMED:
        return {RENAMED[name]: tensor}
    layer, rest = name.removeprefix("h.").split(".", 1)
    ours = f"blocks.{layer}."
    if rest == "attn.c_attn.weight":  # [d_model 3·n_heads·d_head]: Q | K | V, each head's d_head columns side by side
        return {f"{ours}attn.W_{qkv}": W.reshape(d, h, dh).permute(1, 0, 2) for qkv, W in zip("QKV", tensor.split(d, 1))}
    if rest == "attn.c_attn.bias":
        return {f"{ours}attn.b_{qkv}": b.reshape(h, dh) for qkv, b in zip("QKV", tensor.split(d))}
    if rest == "attn.c_proj.weight":
        return {f"{ours}attn.W_O": tensor.reshape(h, dh, d)}
    return {ours + RENAMED[rest]: tensor}
