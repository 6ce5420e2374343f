"""The transformer, with TransformerLens's weight names, shapes and cache keys.

The residual stream is literal: ``resid = resid + attn_out`` and ``resid = resid + mlp_out``.
``state_dict()`` keys equal those of a TransformerLens ``HookedTransformer`` of the same config
(``embed.W_E``, ``pos_embed.W_pos``, ``blocks.0.attn.W_Q``, …, ``unembed.W_U``), so weights move
between the two without renaming. The forward never mutates the model: there are no hooks. Each
activation passes through a ``Recorder`` under its hook name, ``q = rec("hook_q", …)``; the one that
``run_with_cache``, ``ablate`` or ``patch`` makes writes the cache and replaces the activations asked for
(activation patching; an ablation is a head's z patched with a constant), and the plain forward's null
recorder hands every tensor back untouched.
"""

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mechlib import attention
from mechlib.config import ModelConfig
from mechlib.shared import Shareable

__all__ = ["Transformer", "Recorder", "NO_RECORDING"]

Cache = dict[str, Tensor]
Ablation = dict[tuple[int, int], Tensor]  # (layer, head) -> the z [d_head] that replaces the head's output
Patch = dict[str, tuple[Tensor, Tensor]]  # hook name -> (where, values), both broadcast to the activation x:
# x becomes torch.where(where, values, x)
LN_EPS = 1e-5


class Recorder:
    """What one forward pass records and changes, by TransformerLens hook name.

    ``rec(name, x)`` returns x. On the way it patches x where ``patch`` names it (x becomes
    ``torch.where(where, values, x)``) and, when there is a cache, writes the result into it under its name.
    ``rec.scope("attn")`` is the recorder of a submodule: its names get the prefix ``attn.``. ``patched``
    collects the names it patched (shared by its scopes). The null recorder (no cache, no patch) is not
    ``active``: nothing needs to be seen or changed.
    """

    def __init__(self, cache: Cache | None = None, patch: Patch | None = None):
        self.cache, self.patch, self.prefix, self.patched = cache, patch or {}, "", set()

    @property
    def recording(self) -> bool:
        """True when activations are written into a cache (compute cache-only tensors then)."""
        return self.cache is not None

    @property
    def active(self) -> bool:
        """False for the null recorder: no activation is seen or changed, so a fused kernel may compute a layer."""
        return self.cache is not None or bool(self.patch)

    def scope(self, name: str) -> "Recorder":
        if not self.active:
            return self
        inner = copy.copy(self)
        inner.prefix = f"{self.prefix}{name}."
        return inner

    def __call__(self, name: str, x: Tensor) -> Tensor:
        if not self.active:
            return x
        name = self.prefix + name
        if name in self.patch:  # a new tensor: neither the model nor the activation passed in is touched
            where, values = self.patch[name]
            x = torch.where(where, values, x)
            self.patched.add(name)
        if self.cache is not None:
            self.cache[name] = x
        return x


NO_RECORDING = Recorder()


class Embed(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_model))


class PosEmbed(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_pos = nn.Parameter(torch.empty(cfg.n_ctx, cfg.d_model))


class LayerNorm(nn.Module):
    """Centre, divide by the scale √(mean(x²) + ε), then x·w + b; the scale is cached (hook_scale)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model))

    def forward(self, x: Tensor, rec: Recorder = NO_RECORDING) -> Tensor:  # x: [batch pos d_model]
        if not rec.active:  # PyTorch's fused kernel: the same formula
            return F.layer_norm(x, self.w.shape, self.w, self.b, LN_EPS)
        x = x - x.mean(-1, keepdim=True)
        scale = rec("hook_scale", (x.pow(2).mean(-1, keepdim=True) + LN_EPS).sqrt())  # [batch pos 1]
        return rec("hook_normalized", x / scale * self.w + self.b)                     # [batch pos d_model]


class Attention(nn.Module):
    """Multi-head attention; weights [head d_model d_head] and [head d_head d_model]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, d, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        self.W_Q, self.W_K, self.W_V = (nn.Parameter(torch.empty(h, d, dh)) for _ in range(3))
        self.W_O = nn.Parameter(torch.empty(h, dh, d))
        self.b_Q, self.b_K, self.b_V = (nn.Parameter(torch.zeros(h, dh)) for _ in range(3))
        self.b_O = nn.Parameter(torch.zeros(d))
        # Buffers kept only so the state dict matches TransformerLens; the forward builds its own mask
        # and io.load checks that these hold the causal mask and -inf.
        self.register_buffer("mask", torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool).tril())
        self.register_buffer("IGNORE", torch.tensor(float("-inf")))

    def forward(self, qk_input: Tensor, v_input: Tensor, rec: Recorder = NO_RECORDING) -> Tensor:
        if not rec.active:
            return self.fused(qk_input, v_input)
        q = rec("hook_q", attention.qkv(qk_input, self.W_Q, self.b_Q))          # [batch pos head d_head]
        k = rec("hook_k", attention.qkv(qk_input, self.W_K, self.b_K))          # [batch pos head d_head]
        v = rec("hook_v", attention.qkv(v_input, self.W_V, self.b_V))           # [batch pos head d_head]
        scores = rec("hook_attn_scores", attention.attention_scores(q, k))      # [batch head query_pos key_pos]
        pattern = rec("hook_pattern", attention.attention_pattern(scores))      # [batch head query_pos key_pos]
        z = rec("hook_z", attention.mix_values(pattern, v))                     # [batch pos head d_head]
        if rec.recording:  # n_heads times the output's size, so computed for the cache only
            rec("hook_result", attention.per_head_results(z, self.W_O))         # [batch pos head d_model]
        return attention.concat_then_project(z, self.W_O) + self.b_O            # [batch pos d_model]

    def fused(self, qk_input: Tensor, v_input: Tensor) -> Tensor:
        """The same layer when nothing is recorded: one matmul for Q, K and V (Q and K only when, as in
        shortformer, the values read another input) and PyTorch's fused causal attention, whose default
        scale is 1/√d_head as in ``attention.attention_scores``."""
        if qk_input is v_input:
            q, k, v = attention.fused_qkv(qk_input, (self.W_Q, self.W_K, self.W_V), (self.b_Q, self.b_K, self.b_V))
        else:
            (q, k), (v,) = (attention.fused_qkv(qk_input, (self.W_Q, self.W_K), (self.b_Q, self.b_K)),
                            attention.fused_qkv(v_input, (self.W_V,), (self.b_V,)))
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)            # [batch head pos d_head]
        return F.linear(z.transpose(-3, -2).flatten(-2), self.W_O.flatten(0, 1).T, self.b_O)  # [batch pos d_model]


class MLP(nn.Module):
    """mlp_out = GELU(x W_in + b_in) W_out + b_out: exact GELU (TransformerLens's act_fn="gelu"), or GPT-2's
    0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (act_fn="gelu_new")."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.approximate = "tanh" if cfg.act_fn == "gelu_new" else "none"
        self.W_in = nn.Parameter(torch.empty(cfg.d_model, cfg.d_mlp))
        self.b_in = nn.Parameter(torch.zeros(cfg.d_mlp))
        self.W_out = nn.Parameter(torch.empty(cfg.d_mlp, cfg.d_model))
        self.b_out = nn.Parameter(torch.zeros(cfg.d_model))

    def forward(self, x: Tensor, rec: Recorder = NO_RECORDING) -> Tensor:
        pre = rec("hook_pre", x @ self.W_in + self.b_in)                        # [batch pos d_mlp]
        post = rec("hook_post", F.gelu(pre, approximate=self.approximate))     # [batch pos d_mlp]
        return post @ self.W_out + self.b_out                                   # [batch pos d_model]


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.normalization == "LN":
            self.ln1 = LayerNorm(cfg)
        self.attn = Attention(cfg)
        if not cfg.attn_only:
            if cfg.normalization == "LN":
                self.ln2 = LayerNorm(cfg)
            self.mlp = MLP(cfg)

    def _norm(self, ln: str, x: Tensor, rec: Recorder) -> Tensor:
        return getattr(self, ln)(x, rec.scope(ln)) if self.cfg.normalization == "LN" else x

    def attention_inputs(self, resid: Tensor, pos_embed: Tensor, rec: Recorder = NO_RECORDING) -> tuple[Tensor, Tensor]:
        """What attention reads from the residual stream [... pos d_model]: (queries' and keys' input, values'
        input). Shortformer: positions enter the queries and keys only (after ln1, as in TransformerLens), never
        the residual stream."""
        v_input = self._norm("ln1", resid, rec)
        return (v_input + pos_embed if self.cfg.positional == "shortformer" else v_input), v_input

    def forward(self, resid: Tensor, pos_embed: Tensor, rec: Recorder = NO_RECORDING) -> Tensor:
        resid = rec("hook_resid_pre", resid)                                    # [batch pos d_model]
        qk_input, v_input = self.attention_inputs(resid, pos_embed, rec)
        attn_out = rec("hook_attn_out", self.attn(qk_input, v_input, rec.scope("attn")))
        resid = resid + attn_out                                 # the residual stream: read, then add
        if not self.cfg.attn_only:
            resid = rec("hook_resid_mid", resid)
            mlp_out = rec("hook_mlp_out", self.mlp(self._norm("ln2", resid, rec), rec.scope("mlp")))
            resid = resid + mlp_out
        return rec("hook_resid_post", resid)


class Unembed(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_U = nn.Parameter(torch.empty(cfg.d_model, cfg.d_vocab))
        self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab))


class Transformer(Shareable):
    """A decoder-only transformer: embed + pos → n_layers × (attention [+ MLP]) → [LN] → unembed.

    Weights are drawn from ``cfg.seed`` on the CPU (the same numbers on every device) with
    fan-in scaling: W_E ~ N(0, 1); W_pos ~ N(0, 0.1²); W_Q, W_K, W_V, W_in, W_U ~ N(0, 1/d_model);
    W_O ~ N(0, 1/(n_heads·d_head)); W_out ~ N(0, 1/d_mlp); biases 0; LayerNorm w = 1, b = 0.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg)
        self.pos_embed = PosEmbed(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        if cfg.normalization == "LN":
            self.ln_final = LayerNorm(cfg)
        self.unembed = Unembed(cfg)
        self.tokenizer = None  # a mechlib.data.Tokenizer for models trained on text; saved with the model
        self._init_weights()

    def _init_weights(self) -> None:
        generator = torch.Generator().manual_seed(self.cfg.seed)
        d, heads = self.cfg.d_model**-0.5, (self.cfg.n_heads * self.cfg.d_head) ** -0.5
        std = {"W_E": 1.0, "W_pos": 0.1, "W_Q": d, "W_K": d, "W_V": d, "W_in": d, "W_U": d, "W_O": heads,
               "W_out": (self.cfg.d_mlp or 1) ** -0.5}
        with torch.no_grad():
            for name, param in self.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                if leaf in std:
                    param.normal_(0.0, std[leaf], generator=generator)

    def _check_tokens(self, tokens: Tensor) -> Tensor:
        if tokens.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        if tokens.dim() == 1:
            tokens = tokens[None]
        if tokens.dim() != 2 or tokens.shape[1] == 0:
            raise ValueError(f"tokens must have shape [batch, pos] with pos ≥ 1, got {list(tokens.shape)}")
        if tokens.shape[1] > self.cfg.n_ctx:
            raise ValueError(f"{tokens.shape[1]} tokens is longer than the context of {self.cfg.n_ctx}; truncate the input")
        low, high = tokens.aminmax() if tokens.numel() else (0, 0)
        if low < 0 or high >= self.cfg.d_vocab:
            raise ValueError(f"token ids must lie in [0, {self.cfg.d_vocab}), got {int(low)}…{int(high)}")
        return tokens

    def _ablation_patch(self, ablate: Ablation | None) -> Patch:
        """Each ablated head's z patched with its constant at every position: per layer, where [head 1] and
        values [head d_head] (zero at the heads not ablated)."""
        cfg, W_E, patch = self.cfg, self.embed.W_E, {}
        for (layer, head), z in (ablate or {}).items():
            if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
                raise ValueError(f"ablate names head ({layer}, {head}), but the model has heads "
                                 f"(0…{cfg.n_layers - 1}, 0…{cfg.n_heads - 1})")
            where, values = patch.setdefault(f"blocks.{layer}.attn.hook_z", (
                torch.zeros(cfg.n_heads, 1, dtype=torch.bool, device=W_E.device),
                W_E.new_zeros(cfg.n_heads, cfg.d_head)))
            where[head], values[head] = True, z
        return patch

    def forward(self, tokens: Tensor, cache: Cache | None = None, ablate: Ablation | None = None,
                patch: Patch | None = None, stop_at_layer: int | None = None) -> Tensor:
        """tokens [batch pos] (or [pos]) -> logits [batch pos d_vocab]; fills ``cache`` when given one.
        ``stop_at_layer`` (TransformerLens's word) runs only the blocks before it and returns the residual stream
        there [batch pos d_model], with no unembedding: what a computation that reads only activations needs.

        ``ablate`` maps (layer, head) to the z [d_head] that replaces the head's output at every position
        (zeros for zero-ablation, the head's mean z for mean-ablation). ``patch`` maps hook names to (where,
        values): the activation becomes ``torch.where(where, values, x)`` (activation patching: values from
        another input's cache). A name no activation of this model has is refused after the pass, as is a hook
        named by both. The model itself is never changed.
        """
        tokens = self._check_tokens(tokens).to(self.embed.W_E.device)
        ablation = self._ablation_patch(ablate)
        if both := ablation.keys() & (patch or {}).keys():
            raise ValueError(f"ablate and patch both name {', '.join(sorted(both))}; patch that activation alone")
        rec = Recorder(cache, ablation | (patch or {}))
        embed = rec("hook_embed", F.embedding(tokens, self.embed.W_E))                      # [batch pos d_model]
        pos_embed = rec("hook_pos_embed", self.pos_embed.W_pos[: tokens.shape[1]].expand_as(embed))  # [batch pos d_model]
        resid = embed if self.cfg.positional == "shortformer" else embed + pos_embed
        for layer, block in enumerate(self.blocks[:stop_at_layer]):
            resid = block(resid, pos_embed, rec.scope(f"blocks.{layer}"))
        if self.cfg.normalization == "LN" and stop_at_layer is None:
            resid = self.ln_final(resid, rec.scope("ln_final"))
        if not rec.active and stop_at_layer is None:  # one fused matmul-and-add
            return F.linear(resid, self.unembed.W_U.T, self.unembed.b_U)                    # [batch pos d_vocab]
        if unknown := rec.patch.keys() - rec.patched:
            raise ValueError(f"patch names {', '.join(sorted(unknown)[:5])}, which this model has no activation for"
                             + (f" before layer {stop_at_layer}, where it stops" if stop_at_layer is not None else ""))
        if stop_at_layer is not None:
            return resid                                                                    # [batch pos d_model]
        return resid @ self.unembed.W_U + self.unembed.b_U      # [batch pos d_vocab]

    @torch.inference_mode()
    def run_with_cache(self, tokens: Tensor, ablate: Ablation | None = None, patch: Patch | None = None,
                       stop_at_layer: int | None = None) -> tuple[Tensor, Cache]:
        """(logits, or the residual stream at ``stop_at_layer``; cache): cache maps TransformerLens hook names to
        activations."""
        cache: Cache = {}
        out = self(tokens, cache, ablate, patch, stop_at_layer)
        return out, cache
