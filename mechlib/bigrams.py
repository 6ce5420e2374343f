"""A zero-layer model's ceiling: bigram tables, the best rank-d_model fit to one, and the figures beside it.

A zero-layer shortformer model predicts the next token from the current one alone, by the logits
W_E[a] W_U + b_U ("zero-layer transformers model bigram statistics", Elhage et al. 2021). Next-token training
on a corpus therefore has the objective Σ_ab table[a, b] · −log softmax(W_E[a] W_U + b_U)[b], where table[a, b]
is how often b follows a: a full-batch fit to the bigram table is that training, exactly, and the best a model
of width d_model can do, because the logits' matrix has rank ≤ d_model (+1 for b_U).

A table here is [current next] non-negative weights, counts or probabilities: the rows' totals weigh the
current tokens, and each row, normalised, is P(next | current).
"""

import functools
import math
import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from mechlib.data import bigram_distribution, builtin_text, tokenizer_from_json
from mechlib.model import Transformer

__all__ = ["FIT_STEPS", "FIT_LR", "zero_layer_logits", "corpus_table", "training_table", "fit", "kl", "unigram_kl", "entropy", "best_fit_kl",
           "Ceiling", "ceiling", "estimate_mb", "fit_steps"]

FIT_STEPS, FIT_LR = 1000, 3e-2  # full-batch Adam steps (cosine decay to lr / 20) and the peak learning rate
INIT_STD = 0.02                 # W_E and W_U start as N(0, INIT_STD²), b_U at 0
CELL_BYTES = 100     # bytes per cell of the vocab × vocab tables at the zero-layer section's peak: the float64
                     # tables and logits, the fit's float32 logits, their gradient and log-softmax
FIT_SECONDS = 20.0   # the most the best fit may take: past it, fewer steps (the page says so)
FIT_FLOPS = 5e10     # floating-point operations a second the fit is costed at (2 CPU cores reach 75e9)
_fit_locks: dict[tuple[str, int], threading.Lock] = {}  # one per fit: a fit waits only for the same fit
_locks_lock = threading.Lock()


def estimate_mb(d_vocab: int) -> float:
    """The zero-layer section's memory at its peak, in MB: a few dense vocab × vocab tables. A 6,000-token
    vocabulary needs 3,600 MB and is refused under a 1,024 MB budget; the zoo's 1,000 tokens, 100 MB."""
    return CELL_BYTES * d_vocab**2 / 1e6


def fit_steps(d_vocab: int, d_model: int) -> int:
    """The best fit's steps: ``FIT_STEPS``, or as many as ``FIT_SECONDS`` allow at ``FIT_FLOPS`` (a step is the
    logits' product, 2·V²·d, and its backward pass, twice that, plus the softmax's ~15·V²)."""
    per_step = 6 * d_vocab**2 * d_model + 15 * d_vocab**2
    return max(1, min(FIT_STEPS, int(FIT_SECONDS * FIT_FLOPS / per_step)))


def zero_layer_logits(model: Transformer) -> Tensor:
    """W_E W_U + b_U [current next], float64 on the CPU: a zero-layer shortformer model's logits, exactly (positions
    reach only Q and K, and there are none)."""
    cfg = model.cfg
    if cfg.n_layers or cfg.positional != "shortformer" or cfg.normalization is not None:
        raise ValueError("a zero-layer model's logits are W_E W_U + b_U only for a zero-layer shortformer model "
                         "without LayerNorm")
    return (model.embed.W_E @ model.unembed.W_U + model.unembed.b_U).double().cpu()


def corpus_table(tokens: Tensor, d_vocab: int) -> Tensor:
    """The joint bigram distribution p(current) P(next | current) [d_vocab d_vocab] of a token stream [n_tokens]."""
    p_current, conditional = bigram_distribution(tokens, d_vocab)             # [V], [V V]
    return p_current[:, None] * conditional


def training_table(tokens: Tensor, d_vocab: int, n_ctx: int) -> Tensor:
    """What next-token training on windows of a token stream sees [d_vocab d_vocab] (``data.TextData``): each window
    is <bos> then n_ctx − 1 tokens of the stream from a random start, so of its n_ctx − 1 predictions one is
    "<bos> → a token of the stream" and n_ctx − 2 are the stream's bigrams. Exact up to the stream's first and
    last n_ctx tokens, which fewer windows cover."""
    table = corpus_table(tokens, d_vocab) * (n_ctx - 2) / (n_ctx - 1)          # [V V]
    table[0] += torch.bincount(tokens, minlength=d_vocab).double() / len(tokens) / (n_ctx - 1)  # id 0 is <bos>
    return table


def fit(table: Tensor, d_model: int, seed: int = 0, steps: int = FIT_STEPS,
        lr: float = FIT_LR) -> tuple[Tensor, Tensor, Tensor]:
    """W_E [d_vocab d_model], W_U [d_model d_vocab], b_U [d_vocab] (float32) minimising the cross-entropy
    Σ_ab table[a, b] · −log softmax(W_E W_U + b_U)[a, b], by full-batch Adam from a start drawn from ``seed``.
    Deterministic on the CPU for a given thread count."""
    generator = torch.Generator().manual_seed(seed)
    d_vocab = table.shape[0]
    with torch.inference_mode(False), torch.enable_grad():
        weights = (table / table.sum()).float()                                # [V V], sums to 1
        W_E = (torch.randn(d_vocab, d_model, generator=generator) * INIT_STD).requires_grad_()
        W_U = (torch.randn(d_model, d_vocab, generator=generator) * INIT_STD).requires_grad_()
        b_U = torch.zeros(d_vocab, requires_grad=True)
        optimizer = torch.optim.Adam([W_E, W_U, b_U], lr=lr, betas=(0.9, 0.99))
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / steps)))
            loss = -(weights * (W_E @ W_U + b_U).log_softmax(-1)).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return W_E.detach(), W_U.detach(), b_U.detach()


def _conditional_logs(table: Tensor) -> tuple[Tensor, Tensor]:
    """(the table as a joint distribution [V V], log P(next | current) [V V], 0 where P is 0), in float64."""
    joint = table.double() / table.sum()
    conditional = joint / joint.sum(-1, keepdim=True).clamp(min=torch.finfo(torch.float64).tiny)
    return joint, torch.where(joint > 0, conditional.log(), 0.0)


def kl(table: Tensor, logits: Tensor) -> float:
    """KL(table ‖ model) in nats: Σ_a p(a) KL(P(· | a) ‖ softmax(logits[a])), logits [current next]."""
    joint, log_P = _conditional_logs(table)
    log_Q = logits.double().log_softmax(-1)
    return float((joint * torch.where(joint > 0, log_P - log_Q, 0.0)).sum())


def unigram_kl(table: Tensor) -> float:
    """The unigram baseline's KL in nats: predict p(next) whatever the current token. It equals the mutual
    information between the current and the next token, the most any model that reads the current token can gain."""
    joint = table.double() / table.sum()
    return kl(table, joint.sum(0).log().expand_as(joint))


def entropy(table: Tensor) -> float:
    """The conditional bigram entropy H(next | current) in nats: the loss of the table itself, KL 0."""
    joint, log_P = _conditional_logs(table)
    return float(-(joint * log_P).sum())


def best_fit_kl(tokenizer_json: str, d_model: int) -> float:
    """KL(corpus bigrams ‖ the best rank-``d_model`` fit, in ``fit_steps`` steps) in nats, on the built-in text in
    this tokenizer (``Tokenizer.to_json``): a pure function of plain values, seconds to compute, so kept for the
    process. A class opening the zero-layer section at once computes it once: the others wait for it, then read
    it; a fit for another model does not wait."""
    with _locks_lock:
        lock = _fit_locks.setdefault((tokenizer_json, d_model), threading.Lock())
    with lock:
        return _best_fit_kl(tokenizer_json, d_model)


@functools.lru_cache(maxsize=8)
def _best_fit_kl(tokenizer_json: str, d_model: int) -> float:
    tokenizer = tokenizer_from_json(tokenizer_json)
    table = corpus_table(torch.tensor(tokenizer.encode(builtin_text())), tokenizer.d_vocab)
    W_E, W_U, b_U = fit(table, d_model, steps=fit_steps(tokenizer.d_vocab, d_model))
    return kl(table, W_E @ W_U + b_U)


@dataclass(frozen=True)
class Ceiling:
    """A zero-layer model against the corpus bigrams, beside what its width allows; nats each."""

    model_kl: float     # KL(corpus bigrams ‖ the model's W_E W_U + b_U)
    best_fit_kl: float  # KL(corpus bigrams ‖ the best rank-d_model fit): the floor for this width
    unigram_kl: float   # KL(corpus bigrams ‖ p(next)): a model that ignores the current token
    entropy: float      # H(next | current): the corpus's own loss, the floor for the loss at any width
    fit_steps: int      # the steps the best fit ran: below FIT_STEPS, its KL is above the floor it estimates


@torch.inference_mode()
def ceiling(model: Transformer) -> Ceiling:
    """The four figures for a zero-layer shortformer model with a tokenizer, on the built-in text
    : its KL, the best fit's at its d_model, the unigram baseline's, the entropy."""
    if model.tokenizer is None:
        raise ValueError("the corpus bigrams need the model's tokenizer; this model has none")
    logits = zero_layer_logits(model)                                             # [V V], raises if not zero-layer
    table = corpus_table(torch.tensor(model.tokenizer.encode(builtin_text())), model.cfg.d_vocab)
    return Ceiling(kl(table, logits), best_fit_kl(model.tokenizer.to_json(), model.cfg.d_model), unigram_kl(table),
                   entropy(table), fit_steps(model.cfg.d_vocab, model.cfg.d_model))
