"""The transformer, with TransformerLens's weight names, shapes and cache keys.

The residual stream is literal: ``resid = resid + attn_out`` and ``resid = resid + mlp_out``.
``state_dict()`` keys equal those of a TransformerLens ``HookedTransformer`` of the same config
(``embed.W_E``, ``pos_embed.W_pos``, ``blocks.0.attn.W_Q``, …, ``unembed.W_U``), so weights move
between the two without renaming. The forward never mutates the model: there are no hooks;
``run_with_cache`` passes a dict down and each step writes its activation under its hook name.
"""

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mechlib import attention
from mechlib.config import ModelConfig
from mechlib.device import require_budget

__all__ = ["Transformer"]

Cache = dict[str, Tensor]
Ablation = dict[tuple[int, int], Tensor]  # (layer, head) -> the z [d_head] that replaces the head's output
LN_EPS = 1e-5


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

    def forward(self, x: Tensor, cache: Cache | None, name: str) -> Tensor:  # x: [batch pos d_model]
        x = x - x.mean(-1, keepdim=True)
        scale = (x.pow(2).mean(-1, keepdim=True) + LN_EPS).sqrt()  # [batch pos 1]
        normalized = x / scale * self.w + self.b
        if cache is not None:
            cache[f"{name}.hook_scale"], cache[f"{name}.hook_normalized"] = scale, normalized
        return normalized


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

    def forward(self, qk_input: Tensor, v_input: Tensor, cache: Cache | None, name: str,
                ablate: dict[int, Tensor] | None = None) -> Tensor:
        q = attention.qkv(qk_input, self.W_Q, self.b_Q)          # [batch pos head d_head]
        k = attention.qkv(qk_input, self.W_K, self.b_K)          # [batch pos head d_head]
        v = attention.qkv(v_input, self.W_V, self.b_V)           # [batch pos head d_head]
        scores = attention.attention_scores(q, k)                # [batch head query_pos key_pos]
        pattern = attention.attention_pattern(scores)            # [batch head query_pos key_pos]
        z = attention.mix_values(pattern, v)                     # [batch pos head d_head]
        if ablate:  # a head's output replaced by a given z (zeros, or its mean): the model is not touched
            z = z.clone()
            for head, replacement in ablate.items():
                z[..., head, :] = replacement
        out = attention.concat_then_project(z, self.W_O) + self.b_O  # [batch pos d_model]
        if cache is not None:
            cache.update({f"{name}.hook_q": q, f"{name}.hook_k": k, f"{name}.hook_v": v,
                          f"{name}.hook_attn_scores": scores, f"{name}.hook_pattern": pattern,
                          f"{name}.hook_z": z, f"{name}.hook_result": attention.per_head_results(z, self.W_O)})
        return out


class MLP(nn.Module):
    """mlp_out = GELU(x W_in + b_in) W_out + b_out (exact GELU, TransformerLens's act_fn="gelu")."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(cfg.d_model, cfg.d_mlp))
        self.b_in = nn.Parameter(torch.zeros(cfg.d_mlp))
        self.W_out = nn.Parameter(torch.empty(cfg.d_mlp, cfg.d_model))
        self.b_out = nn.Parameter(torch.zeros(cfg.d_model))

    def forward(self, x: Tensor, cache: Cache | None, name: str) -> Tensor:
        pre = x @ self.W_in + self.b_in                          # [batch pos d_mlp]
        post = F.gelu(pre)                                       # [batch pos d_mlp]
        if cache is not None:
            cache[f"{name}.hook_pre"], cache[f"{name}.hook_post"] = pre, post
        return post @ self.W_out + self.b_out                    # [batch pos d_model]


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

    def _norm(self, ln: str, x: Tensor, cache: Cache | None, name: str) -> Tensor:
        return getattr(self, ln)(x, cache, f"{name}.{ln}") if self.cfg.normalization == "LN" else x

    def forward(self, resid: Tensor, pos_embed: Tensor, cache: Cache | None, name: str,
                ablate: dict[int, Tensor] | None = None) -> Tensor:
        if cache is not None:
            cache[f"{name}.hook_resid_pre"] = resid
        v_input = self._norm("ln1", resid, cache, name)
        # Shortformer: positions enter the queries and keys only (after ln1, as in TransformerLens),
        # never the residual stream.
        qk_input = v_input + pos_embed if self.cfg.positional == "shortformer" else v_input
        attn_out = self.attn(qk_input, v_input, cache, f"{name}.attn", ablate)
        resid = resid + attn_out                                 # the residual stream: read, then add
        if cache is not None:
            cache[f"{name}.hook_attn_out"] = attn_out
        if not self.cfg.attn_only:
            if cache is not None:
                cache[f"{name}.hook_resid_mid"] = resid
            mlp_out = self.mlp(self._norm("ln2", resid, cache, name), cache, f"{name}.mlp")
            resid = resid + mlp_out
            if cache is not None:
                cache[f"{name}.hook_mlp_out"] = mlp_out
        if cache is not None:
            cache[f"{name}.hook_resid_post"] = resid
        return resid


class Unembed(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_U = nn.Parameter(torch.empty(cfg.d_model, cfg.d_vocab))
        self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab))


class Transformer(nn.Module):
    """A decoder-only transformer: embed + pos → n_layers × (attention [+ MLP]) → [LN] → unembed.

    Weights are drawn from ``cfg.seed`` on the CPU (the same numbers on every device) with
    fan-in scaling: W_E, W_pos ~ N(0, 1); W_Q, W_K, W_V, W_in, W_U ~ N(0, 1/d_model);
    W_O ~ N(0, 1/(n_heads·d_head)); W_out ~ N(0, 1/d_mlp); biases 0; LayerNorm w = 1, b = 0.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        require_budget(cfg.estimate_mb(batch=1), f"a model of {cfg.n_params():,} parameters")
        self.cfg = cfg
        self.embed = Embed(cfg)
        self.pos_embed = PosEmbed(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        if cfg.normalization == "LN":
            self.ln_final = LayerNorm(cfg)
        self.unembed = Unembed(cfg)
        self.read_only = False
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

    def _refuse_if_shared(self, what: str) -> None:
        if self.read_only:
            raise RuntimeError(f"this model is shared read-only between sessions, so {what} is refused; "
                               "work on a copy: copy.deepcopy(model) is an independent, trainable model")

    def train(self, mode: bool = True) -> "Transformer":
        if mode:
            self._refuse_if_shared(".train()")
        return super().train(mode)

    def requires_grad_(self, requires_grad: bool = True) -> "Transformer":
        if requires_grad:
            self._refuse_if_shared("requires_grad_(True)")
        return super().requires_grad_(requires_grad)

    def load_state_dict(self, *args, **kwargs):
        self._refuse_if_shared("load_state_dict")
        return super().load_state_dict(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> "Transformer":
        """A copy is the student's own: writable and trainable, whatever the original was."""
        copy_ = Transformer.__new__(Transformer)
        memo[id(self)] = copy_
        copy_.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items()})
        copy_.read_only = False
        return copy_.requires_grad_(True)

    def _check_tokens(self, tokens: Tensor) -> Tensor:
        if tokens.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        if tokens.dim() == 1:
            tokens = tokens[None]
        if tokens.dim() != 2 or tokens.shape[1] == 0:
            raise ValueError(f"tokens must have shape [batch, pos] with pos ≥ 1, got {list(tokens.shape)}")
        if tokens.shape[1] > self.cfg.n_ctx:
            raise ValueError(f"{tokens.shape[1]} tokens is longer than the context of {self.cfg.n_ctx}; truncate the input")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.cfg.d_vocab):
            raise ValueError(f"token ids must lie in [0, {self.cfg.d_vocab}), got {int(tokens.min())}…{int(tokens.max())}")
        require_budget(self.cfg.estimate_mb(batch=tokens.shape[0]), f"a batch of {tokens.shape[0]} sequences")
        return tokens

    def forward(self, tokens: Tensor, cache: Cache | None = None, ablate: Ablation | None = None) -> Tensor:
        """tokens [batch pos] (or [pos]) -> logits [batch pos d_vocab]; fills ``cache`` when given one.

        ``ablate`` maps (layer, head) to the z [d_head] that replaces the head's output at every position
        (zeros for zero-ablation, the head's mean z for mean-ablation); the model itself is never changed.
        """
        tokens = self._check_tokens(tokens).to(self.embed.W_E.device)
        embed = self.embed.W_E[tokens]                           # [batch pos d_model]
        pos_embed = self.pos_embed.W_pos[: tokens.shape[1]].expand_as(embed)  # [batch pos d_model]
        if cache is not None:
            cache["hook_embed"], cache["hook_pos_embed"] = embed, pos_embed
        resid = embed if self.cfg.positional == "shortformer" else embed + pos_embed
        by_layer: dict[int, dict[int, Tensor]] = {}
        for (layer, head), replacement in (ablate or {}).items():
            by_layer.setdefault(layer, {})[head] = replacement
        for layer, block in enumerate(self.blocks):
            resid = block(resid, pos_embed, cache, f"blocks.{layer}", by_layer.get(layer))
        if self.cfg.normalization == "LN":
            resid = self.ln_final(resid, cache, "ln_final")
        return resid @ self.unembed.W_U + self.unembed.b_U      # [batch pos d_vocab]

    @torch.inference_mode()
    def run_with_cache(self, tokens: Tensor, ablate: Ablation | None = None) -> tuple[Tensor, Cache]:
        """(logits, cache): cache maps TransformerLens hook names to activations."""
        cache: Cache = {}
        logits = self(tokens, cache, ablate)
        return logits, cache
