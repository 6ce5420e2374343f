"""Interop: a mechlib ``Transformer`` to TransformerLens's ``HookedTransformer`` and back, weights unchanged; and
Hugging Face GPT-2 models to mechlib (``from_transformers``, written in ``mechlib.hf``).

The state-dict keys are the same in both (``embed.W_E``, ``blocks.0.attn.W_Q``, …), so a conversion is
a config translated field by field and the weights copied under their own names. The logits agree within
``checks.INTEROP_TOLERANCE``: to 1e-10 · max(1, |logit|) in float64, and in float32 to 5e-4, not mechlib's 1e-5,
since the two libraries sum attention in different orders (copying-2l's float32 logits differ by up to 5.1e-5).
TransformerLens is not a mechlib dependency: it is imported inside these two functions only. The tests install
TransformerLens 3.9 (requirements-test.txt; 4.0 removed ``HookedTransformer``); elsewhere install it yourself, e.g.
    python3.11 -m venv .bench-venv && .bench-venv/bin/pip install torch==2.13.0 "transformer-lens<4"
The tokenizer is not carried over either way: mechlib's word and character tokenizers are not Hugging
Face tokenizers, so a converted model takes token ids (``hooked(tokens)``), not strings.
"""

import dataclasses

from mechlib.config import ModelConfig
from mechlib.hf import from_transformers
from mechlib.model import LN_EPS, Transformer

__all__ = ["to_transformer_lens", "from_transformer_lens", "from_transformers"]

# The TransformerLens choices mechlib's model has (act_fn only matters with an MLP).
CHOICES = {"act_fn": ("gelu", "gelu_new"), "normalization_type": ("LN", None),
           "positional_embedding_type": ("standard", "shortformer")}
# HookedTransformerConfig fields that do not change the logits; every other field must equal the value it
# has in the config to_transformer_lens would write, else from_transformer_lens refuses the model.
NOT_COMPARED = {
    "model_name", "original_architecture", "tokenizer_name", "from_checkpoint", "checkpoint_index",
    "checkpoint_label_type", "checkpoint_value", "trust_remote_code",              # where the model came from
    "default_prepend_bos", "tokenizer_prepends_bos",                               # tokenizing strings
    "use_attn_result", "use_split_qkv_input", "use_hook_mlp_in", "use_attn_in", "use_hook_tokens",  # hooks
    "device", "n_devices", "dtype", "seed", "init_mode", "initializer_range", "init_weights", "n_params",
}


def _transformer_lens():
    try:
        import transformer_lens
    except ImportError as error:
        raise ImportError(
            "mechlib.interop needs TransformerLens, which mechlib does not install: "
            'pip install "transformer-lens<4" (version 3 still has HookedTransformer)') from error
    return transformer_lens


def _tl_config(tl, cfg: ModelConfig, dtype, device: str):
    """The HookedTransformerConfig of a mechlib config: the same sizes and GELU, LayerNorm ε, no <bos>."""
    return tl.HookedTransformerConfig(
        n_layers=cfg.n_layers, d_model=cfg.d_model, n_heads=cfg.n_heads, d_head=cfg.d_head, d_vocab=cfg.d_vocab,
        n_ctx=cfg.n_ctx, d_mlp=cfg.d_mlp, attn_only=cfg.attn_only, act_fn=cfg.act_fn, eps=LN_EPS,
        normalization_type=cfg.normalization, positional_embedding_type=cfg.positional,
        default_prepend_bos=False, init_weights=False, dtype=dtype, device=device)


def to_transformer_lens(model: Transformer):
    """A new ``HookedTransformer`` with the model's config and a copy of its weights, dtype and device.

    Its tokenizer is None (mechlib's is not a Hugging Face tokenizer); the mechlib model is not touched.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"to_transformer_lens takes a mechlib Transformer, got {type(model).__name__}")
    tl = _transformer_lens()
    W_E = model.embed.W_E
    hooked = tl.HookedTransformer(_tl_config(tl, model.cfg, W_E.dtype, str(W_E.device)))
    hooked.load_state_dict(model.state_dict())  # the same keys: strict
    return hooked.eval()


def from_transformer_lens(hooked) -> Transformer:
    """A new mechlib ``Transformer`` with the ``HookedTransformer``'s config and a copy of its weights.

    Refuses, with a ValueError naming the field, a model mechlib cannot represent: another activation
    than GELU (exact, or GPT-2's "gelu_new"), normalization other than LN or none (LNPre, as
    ``fold_ln=True`` leaves it, or RMS), rotary or other positions, and any other setting that changes
    the logits (MoE, grouped-query attention, soft caps, …). The tokenizer is not carried over; the
    weights keep their dtype and device.
    """
    tl = _transformer_lens()
    theirs = hooked.cfg
    for name, allowed in CHOICES.items():
        value = getattr(theirs, name)
        if value not in allowed and not (name == "act_fn" and theirs.attn_only):
            raise ValueError(f"{name}={value!r} has no counterpart in mechlib; mechlib models have "
                             f"{' or '.join(map(repr, allowed))}")
    cfg = ModelConfig(n_layers=theirs.n_layers, d_model=theirs.d_model, n_heads=theirs.n_heads, d_head=theirs.d_head,
                      d_vocab=theirs.d_vocab, n_ctx=theirs.n_ctx, d_mlp=None if theirs.attn_only else theirs.d_mlp,
                      normalization=theirs.normalization_type, positional=theirs.positional_embedding_type,
                      act_fn="gelu" if theirs.attn_only else theirs.act_fn)
    ours = _tl_config(tl, cfg, theirs.dtype, theirs.device)
    unused = {"act_fn", "d_mlp"} if theirs.attn_only else set()
    for field in dataclasses.fields(theirs):
        name = field.name
        if name not in NOT_COMPARED | unused and getattr(theirs, name) != getattr(ours, name):
            raise ValueError(f"{name}={getattr(theirs, name)!r} has no counterpart in mechlib; mechlib models "
                             f"have {name}={getattr(ours, name)!r}")
    W_E = hooked.embed.W_E
    model = Transformer(cfg).to(device=W_E.device, dtype=W_E.dtype)
    weights = dict(hooked.named_parameters())  # not the buffers: TransformerLens 3's causal mask is a placeholder
    different = weights.keys() ^ dict(model.named_parameters()).keys()
    if different:
        raise ValueError(f"the weights are not a mechlib model's: {sorted(different)}")
    model.load_state_dict(weights, strict=False)  # every parameter; the buffers stay mechlib's own
    return model.eval()
