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

from mechlib.config import ModelConfig
from mechlib.hf_tokenizer import HFTokenizer
from mechlib.model import LN_EPS, Transformer

__all__ = ["HFError", "from_transformers", "read_config"]

ACT_FNS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu"}  # GPT-2's names → mechlib's
# config.json fields that change the computation, and the value mechlib computes with
REQUIRED = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False}
FLOATS = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}
IGNORED = (".attn.bias", ".attn.masked_bias")  # older checkpoints' causal-mask buffers: mechlib builds its own
CONFIG_BYTES = 1_000_000


class HFError(ValueError):
    """A Hugging Face model that cannot be read as a mechlib model; the message says why."""


def read_config(directory: str | Path) -> ModelConfig:
    """The mechlib config of the GPT-2 directory's ``config.json``, read alone: a caller states the model's size
    (``ModelConfig.estimate_mb``) before loading anything. Raises ``HFError``."""
    return gpt2_config(_fields(Path(directory)))


def _fields(directory: Path) -> dict:
    """The directory's ``config.json``, bounded in size and parsed."""
    path = directory / "config.json"
    if not path.is_file():
        raise HFError(f"no config.json in {directory}: not a Hugging Face model directory")
    if path.stat().st_size > CONFIG_BYTES:
        raise HFError(f"{path} is {path.stat().st_size:,} bytes; a model's config.json is a few kB")
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise HFError(f"{path} is not JSON ({type(error).__name__})") from None
    return fields


def gpt2_config(fields: dict) -> ModelConfig:
    """The mechlib config of a GPT-2 ``config.json`` (as a dict); a field mechlib cannot compute with is refused
    by name."""
    if not isinstance(fields, dict) or fields.get("model_type") != "gpt2":
        kind = fields.get("model_type") if isinstance(fields, dict) else None
        raise HFError(f"the model's type is {kind!r}; only GPT-2 ('gpt2') models are read")
    activation = fields.get("activation_function", "gelu_new")
    if activation not in ACT_FNS:
        raise HFError(f"activation_function={activation!r} has no counterpart in mechlib; it computes "
                      f"{', '.join(map(repr, ACT_FNS))}")
    for name, value in REQUIRED.items():
        if fields.get(name, value) != value:
            raise HFError(f"{name}={fields[name]!r} has no counterpart in mechlib, which computes {name}={value!r}")
    if fields.get("layer_norm_epsilon", LN_EPS) != LN_EPS:
        raise HFError(f"layer_norm_epsilon={fields['layer_norm_epsilon']!r} has no counterpart in mechlib, "
                      f"whose LayerNorm has ε = {LN_EPS}")
    try:
        return ModelConfig(n_layers=fields.get("n_layer"), d_model=fields.get("n_embd"), n_heads=fields.get("n_head"),
                           d_vocab=fields.get("vocab_size"), n_ctx=fields.get("n_positions"),
                           d_mlp=fields.get("n_inner") or 4 * fields.get("n_embd", 0), normalization="LN",
                           act_fn=ACT_FNS[activation])
    except (ValueError, TypeError) as error:
        raise HFError(f"the model's config does not fit mechlib: {error}") from None


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
    _check_header({name: (tensor.dtype, list(tensor.shape)) for name, tensor in tensors.items()}, cfg, tied)
    return _build(cfg, tensors, tied)


def _from_directory(directory: Path) -> Transformer:
    fields = _fields(directory)
    cfg, tied = gpt2_config(fields), fields.get("tie_word_embeddings", True)
    weights = directory / "model.safetensors"
    if not weights.is_file():
        pickled = [name for name in ("pytorch_model.bin", "tf_model.h5") if (directory / name).is_file()]
        raise HFError(f"no model.safetensors in {directory}" + (
            f" (only {pickled[0]}: a pickle, never opened here; save the model with safe_serialization)"
            if pickled else ""))
    from safetensors import safe_open

    try:
        with safe_open(weights, "pt") as file:
            header = {name: (FLOATS.get(file.get_slice(name).get_dtype(), file.get_slice(name).get_dtype()),
                             file.get_slice(name).get_shape()) for name in file.keys()}
            _check_header(header, cfg, tied)
            tensors = {name: file.get_tensor(name) for name in header}
    except HFError:
        raise
    except Exception as error:  # safetensors' own errors for a damaged file
        raise HFError(f"{weights} cannot be read as safetensors ({type(error).__name__}: {str(error)[:120]})") from None
    model = _build(cfg, tensors, tied)
    if (directory / "tokenizer.json").is_file():
        model.tokenizer = HFTokenizer.from_file(directory / "tokenizer.json", cfg.d_vocab, fields.get("bos_token_id"))
    return model


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


def _build(cfg: ModelConfig, tensors: dict[str, Tensor], tied: bool) -> Transformer:
    """The mechlib model of GPT-2's ``tensors`` (names, shapes and dtypes checked): finite, rearranged, loaded into
    a new model."""
    named = {_gpt2_name(name): tensor for name, tensor in tensors.items()}
    dtype = named["wte.weight"].dtype if named["wte.weight"].dtype in (torch.float32, torch.float64) else torch.float32
    named = {name: tensor.to("cpu", dtype) for name, tensor in named.items()
             if name is not None and not (tied and name == "lm_head.weight")}
    for name, tensor in named.items():
        if not torch.isfinite(tensor).all():
            raise HFError(f"{name} holds NaN or infinite values; the checkpoint is corrupt")
    model = Transformer(cfg).to(dtype)
    model.load_state_dict(_mechlib_weights(named, cfg, tied), strict=False)  # the causal-mask buffers stay mechlib's
    return model.eval()


def _mechlib_weights(gpt2: dict[str, Tensor], cfg: ModelConfig, tied: bool) -> dict[str, Tensor]:
    """GPT-2's tensors under TransformerLens's names and shapes."""
    h, d, dh = cfg.n_heads, cfg.d_model, cfg.d_head
    weights = {"embed.W_E": gpt2["wte.weight"], "pos_embed.W_pos": gpt2["wpe.weight"],
               "ln_final.w": gpt2["ln_f.weight"], "ln_final.b": gpt2["ln_f.bias"],
               "unembed.W_U": (gpt2["wte.weight"] if tied else gpt2["lm_head.weight"]).T,  # [d_model d_vocab]
               "unembed.b_U": torch.zeros(cfg.d_vocab, dtype=gpt2["wte.weight"].dtype)}
    for layer in range(cfg.n_layers):
        theirs, ours = f"h.{layer}.", f"blocks.{layer}."
        W_QKV = gpt2[theirs + "attn.c_attn.weight"].split(d, dim=1)                   # 3 × [d_model n_heads·d_head]
        b_QKV = gpt2[theirs + "attn.c_attn.bias"].split(d)                           # 3 × [n_heads·d_head]
        for name, W, b in zip("QKV", W_QKV, b_QKV):
            weights[f"{ours}attn.W_{name}"] = W.reshape(d, h, dh).permute(1, 0, 2)    # [n_heads d_model d_head]
            weights[f"{ours}attn.b_{name}"] = b.reshape(h, dh)                        # [n_heads d_head]
        weights[ours + "attn.W_O"] = gpt2[theirs + "attn.c_proj.weight"].reshape(h, dh, d)  # [n_heads d_head d_model]
        weights[ours + "attn.b_O"] = gpt2[theirs + "attn.c_proj.bias"]
        for ln, their_ln in (("ln1", "ln_1"), ("ln2", "ln_2")):
            weights[f"{ours}{ln}.w"], weights[f"{ours}{ln}.b"] = (gpt2[f"{theirs}{their_ln}.weight"],
                                                                  gpt2[f"{theirs}{their_ln}.bias"])
        weights[ours + "mlp.W_in"] = gpt2[theirs + "mlp.c_fc.weight"]                 # [d_model d_mlp]
        weights[ours + "mlp.b_in"] = gpt2[theirs + "mlp.c_fc.bias"]
        weights[ours + "mlp.W_out"] = gpt2[theirs + "mlp.c_proj.weight"]              # [d_mlp d_model]
        weights[ours + "mlp.b_out"] = gpt2[theirs + "mlp.c_proj.bias"]
    return {name: tensor.contiguous() for name, tensor in weights.items()}
