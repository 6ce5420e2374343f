"""The residual stream (Elhage et al. 2021): every component reads from it and adds to it.

The final residual is exactly the sum of what was written: the token embedding, the positional
embedding (standard positions), each head's result, each attention output bias, each MLP's
output and bias. The logit lens reads the stream at every layer boundary through the model's
read-out (the final LayerNorm, if the model has one, then W_U); direct logit attribution splits
one logit into the components' shares.

Every check here compares with a separate forward pass of the model (its logits, or its residual
after the last block), never with a tensor built from the same parts: a missing or wrong term fails.
The page experiments (``ledger_at``, ``depth``, ``lens``, ``attribution``, ``subspaces``) take the
model and plain values and return frozen dataclasses of numbers, arrays and verdicts; ``term_kind`` names what
kind of component a term is, for the page's questions.
"""

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from mechlib.checks import OVERLAP_SIGMAS, SEPARATE_MAX, Check, compare, model_tolerance
from mechlib.device import costs, to_numpy
from mechlib.model import LN_EPS, Cache, Transformer

__all__ = ["cache_of", "Ledger", "components", "ledger_mb", "ledger", "final_residual", "boundaries", "unembed", "logit_lens", "direct_logit_attribution",
           "subspace_overlap", "random_overlap", "random_overlap_sd", "least_overlap", "LedgerCheck", "ledger_check", "LedgerAt",
           "ledger_at", "Depth", "depth", "Lens", "lens", "Attribution", "attribution", "Subspaces", "subspaces",
           "LENS_TOP", "CANDIDATES", "TERM_KINDS", "term_kind", "kinds_of"]

LENS_TOP = 3     # tokens shown per layer boundary in the logit lens
CANDIDATES = 10  # the model's likeliest next tokens offered for direct logit attribution
OVERLAP_ROWS = 64  # rows of every head's projector formed at once by ``subspace_overlap``
TERM_KINDS = ("the token embedding", "the positional embedding", "a head", "an MLP", "a bias")
_HEAD = re.compile(r"L\d+H\d+")


def term_kind(label: str) -> str:
    """Which of ``TERM_KINDS`` a ledger or attribution term is, from its label: "embed", "pos_embed", "L0H1",
    "L1 MLP", or a bias ("L0 attn bias", "L1 MLP bias", and attribution's read-out "bias")."""
    if label in ("embed", "pos_embed"):
        return TERM_KINDS[label == "pos_embed"]
    if _HEAD.fullmatch(label):
        return "a head"
    if label == "bias" or label.endswith(" bias"):
        return "a bias"
    if re.fullmatch(r"L\d+ MLP", label):
        return "an MLP"
    raise ValueError(f"{label!r} is not a term of the residual stream's ledger")


def kinds_of(labels: list[str]) -> list[str]:
    """The kinds of term among ``labels``, in ``TERM_KINDS`` order."""
    present = {term_kind(label) for label in labels}
    return [kind for kind in TERM_KINDS if kind in present]


def cache_of(model: Transformer, ids: tuple[int, ...]) -> Cache:
    """The model's cache on one sequence of token ids: what every page experiment reads."""
    return model.run_with_cache(torch.tensor([ids]))[1]


@dataclass(frozen=True)
class Ledger:
    labels: list[str]   # one per component: "embed", "pos_embed", "L0H1", "L0 attn bias", "L1 MLP", "L1 MLP bias"
    terms: Tensor       # [component batch pos d_model]; their sum is the final residual


@torch.inference_mode()
def components(model: Transformer) -> int:
    """How many terms the ledger has: the embeddings, each head, each layer's attention bias, MLP and MLP bias."""
    cfg = model.cfg
    return 1 + (cfg.positional == "standard") + cfg.n_layers * (cfg.n_heads + 1 + 2 * (not cfg.attn_only))


def ledger_mb(model: Transformer, ids: tuple[int, ...], *_) -> float:
    """What an experiment on the ledger of ``ids`` holds beside the weights, in MB: one forward's cache, and every
    component's write [component pos d_model] in float32."""
    return model.cfg.activations_mb(1, len(ids)) + 4 * components(model) * len(ids) * model.cfg.d_model / 1e6


def ledger(model: Transformer, cache: Cache) -> Ledger:
    """The final residual (before the final LayerNorm) as a sum of every component's write."""
    labels, terms = ["embed"], [cache["hook_embed"]]
    if model.cfg.positional == "standard":
        labels.append("pos_embed")
        terms.append(cache["hook_pos_embed"])
    for layer, block in enumerate(model.blocks):
        result = cache[f"blocks.{layer}.attn.hook_result"]                    # [batch pos head d_model]
        for head in range(model.cfg.n_heads):
            labels.append(f"L{layer}H{head}")
            terms.append(result[:, :, head])
        labels.append(f"L{layer} attn bias")
        terms.append(block.attn.b_O.expand_as(terms[0]))
        if not model.cfg.attn_only:
            labels += [f"L{layer} MLP", f"L{layer} MLP bias"]
            terms += [cache[f"blocks.{layer}.mlp.hook_post"] @ block.mlp.W_out, block.mlp.b_out.expand_as(terms[0])]
    return Ledger(labels, torch.stack(terms))


def final_residual(model: Transformer, cache: Cache) -> Tensor:
    """The residual after the last block (before the final LayerNorm): [batch pos d_model]. With no blocks it is
    the embedded input itself, so it is no independent reference for the ledger: ``ledger_check`` uses the logits."""
    return boundaries(model, cache)[-1]


def boundaries(model: Transformer, cache: Cache) -> Tensor:
    """The residual at every layer boundary: the embedded input, then after each block: [n_layers+1 batch pos d_model]."""
    embedded = cache["hook_embed"] + (cache["hook_pos_embed"] if model.cfg.positional == "standard" else 0)
    return torch.stack([embedded] + [cache[f"blocks.{layer}.hook_resid_post"] for layer in range(model.cfg.n_layers)])


def unembed(model: Transformer, resid: Tensor) -> Tensor:
    """The read-out of a residual [… d_model] written from the weights: the final LayerNorm (if any: centre, divide
    by √(mean(x²) + ε), then · w + b), then W_U and b_U: [… d_vocab]."""
    if model.cfg.normalization == "LN":
        centred = resid - resid.mean(-1, keepdim=True)
        resid = centred / (centred.pow(2).mean(-1, keepdim=True) + LN_EPS).sqrt() * model.ln_final.w + model.ln_final.b
    return resid @ model.unembed.W_U + model.unembed.b_U


@torch.inference_mode()
def logit_lens(model: Transformer, cache: Cache) -> Tensor:
    """Logits read at every layer boundary through the model's read-out: [n_layers+1 batch pos d_vocab]."""
    return unembed(model, boundaries(model, cache))


@torch.inference_mode()
def direct_logit_attribution(model: Transformer, cache: Cache, tokens: Tensor) -> tuple[list[str], Tensor]:
    """Each component's direct share of the logit of ``tokens`` [batch pos]: (labels, [component batch pos]).

    Through LayerNorm each term is centred and divided by the cached final scale (the scale itself depends
    on every term, which is why this is a first-order reading); the LayerNorm bias and b_U form the last
    term, "bias". With the cached scale the shares add up exactly to the logit.
    """
    book = ledger(model, cache)
    directions = model.unembed.W_U[:, tokens].movedim(0, -1)                  # [batch pos d_model]
    terms = book.terms
    constant = model.unembed.b_U[tokens]                                       # [batch pos]
    if model.cfg.normalization == "LN":
        terms = (terms - terms.mean(-1, keepdim=True)) / cache["ln_final.hook_scale"] * model.ln_final.w
        constant = constant + (directions * model.ln_final.b).sum(-1)
    shares = (terms * directions).sum(-1)                                      # [component batch pos]
    return book.labels + ["bias"], torch.cat([shares, constant[None]])


@torch.inference_mode()
def subspace_overlap(model: Transformer) -> tuple[list[str], Tensor]:
    """How much every pair of heads' output subspaces overlap: (labels, [head head]).

    A head writes into the row space of its W_O, of dimension k = min(d_head, d_model). The overlap of two such
    subspaces is the mean squared cosine of their principal angles, ‖Q₁ᵀQ₂‖²_F / k: 1 when equal, 0 when orthogonal.
    """
    bases, labels = [], []
    for layer, block in enumerate(model.blocks):
        for head in range(model.cfg.n_heads):
            basis, _ = torch.linalg.qr(block.attn.W_O[head].T.double())       # [d_model k], orthonormal
            bases.append(basis)
            labels.append(f"L{layer}H{head}")
    stacked = torch.stack(bases)                                               # [head d_model k]
    overlap = stacked.new_zeros(len(bases), len(bases))                        # [head head]
    for start in range(0, stacked.shape[1], OVERLAP_ROWS):  # ‖Q₁ᵀQ₂‖²_F = tr(P₁P₂), P = QQᵀ: a block of rows at once
        rows = (stacked[:, start:start + OVERLAP_ROWS] @ stacked.transpose(1, 2)).flatten(1)  # [head rows·d_model]
        overlap += rows @ rows.T
    return labels, overlap / stacked.shape[-1]


def subspaces_mb(model: Transformer) -> float:
    """What ``subspaces`` holds, in MB: every head's basis [head d_model k] and a block of their projectors' rows
    [head OVERLAP_ROWS d_model], in float64."""
    cfg, heads = model.cfg, model.cfg.n_layers * model.cfg.n_heads
    return 8 * (heads * cfg.d_model * min(cfg.d_head, cfg.d_model) + 2 * heads * OVERLAP_ROWS * cfg.d_model
                + heads**2) / 1e6


def random_overlap(d_model: int, k: int) -> float:
    """The expected overlap of two random k-dimensional subspaces of a d_model-dimensional space (k ≤ d_model)."""
    return k / d_model


def random_overlap_sd(d_model: int, k: int) -> float:
    """The standard deviation of that overlap: Var tr(P₁P₂) = 2k²(n−k)² / (n²(n−1)(n+2)) for two random rank-k
    projections in n dimensions, divided by k. Overlaps of different pairs are uncorrelated."""
    n = d_model
    return (2 * (n - k) ** 2 / (n**2 * (n - 1) * (n + 2))) ** 0.5 if n > 1 else 0.0


def least_overlap(d_model: int, k: int, heads: int) -> float:
    """The smallest mean overlap ``heads`` k-dimensional subspaces of a d_model-dimensional space can have, whatever
    they are: max(0, (heads·k/d_model − 1) / (heads − 1)). From ‖Σ P_h‖²_F ≥ (tr Σ P_h)² / d_model: subspaces
    writing more than d_model dimensions in all must share some (1 when k = d_model). Needs heads ≥ 2."""
    return max(0.0, (heads * k / d_model - 1) / (heads - 1))


# The page's experiments ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerCheck:
    """The ledger's sum against a separate forward pass of the model."""

    logits: Check           # the sum through the read-out against that pass's logits
    residual: Check | None  # the sum against that pass's residual after its last block; None with no blocks

    @property
    def passed(self) -> bool:
        return self.logits.passed and (self.residual is None or self.residual.passed)


@torch.inference_mode()
def ledger_check(model: Transformer, tokens: Tensor, book: Ledger) -> LedgerCheck:
    """The sum of ``book``'s terms (from a cache of ``tokens`` [batch pos]) against a fresh run of the model on
    ``tokens``: through the read-out against its logits, and against blocks.{n−1}.hook_resid_post where there
    are blocks. Neither reference is built from the terms, so a missing term fails, with no layers too."""
    logits, cache = model.run_with_cache(tokens)
    total = book.terms.sum(0).to(logits.device)                                # [batch pos d_model]
    tolerance, n = model_tolerance(model), model.cfg.n_layers
    residual = compare(total, cache[f"blocks.{n - 1}.hook_resid_post"], tolerance) if n else None
    return LedgerCheck(compare(unembed(model, total), logits, tolerance), residual)


@dataclass(frozen=True)
class LedgerAt:
    labels: list[str]         # one per component
    projections: np.ndarray   # [component] each term's length along x̂_final at the position; they sum to ‖x_final‖
    norms: np.ndarray         # [component] ‖term‖ at the position
    final_norm: float         # ‖x_final‖ at the position
    check: LedgerCheck        # the sum of the terms at every position, against a separate forward pass

    @property
    def largest(self) -> str:
        """The term that adds the most to ‖x_final‖: the longest along x̂_final."""
        return self.labels[int(np.argmax(self.projections))]


@torch.inference_mode()
@costs(ledger_mb)
def ledger_at(model: Transformer, ids: tuple[int, ...], position: int) -> LedgerAt:
    """The ledger at one position: every component's write, and its length along the final residual."""
    cache = cache_of(model, ids)
    book = ledger(model, cache)
    terms = book.terms[:, 0, position]                                         # [component d_model]
    final = final_residual(model, cache)[0, position]                          # [d_model]
    return LedgerAt(book.labels, to_numpy((terms @ (final / final.norm())).double()),
                    to_numpy(terms.norm(dim=-1).double()), float(final.norm()),
                    ledger_check(model, torch.tensor([ids]), book))


@dataclass(frozen=True)
class Depth:
    norms: np.ndarray         # [boundary pos] ‖residual‖ at every layer boundary and position
    components: list[str]     # "L0 attention", "L0 MLP", …
    added: np.ndarray         # [component] mean ‖output‖ over positions of what each component adds

    @property
    def largest(self) -> str:
        """The attention layer or MLP that writes the most, on average over positions ("" with no blocks)."""
        return self.components[int(np.argmax(self.added))] if self.components else ""


@torch.inference_mode()
@costs(ledger_mb)
def depth(model: Transformer, ids: tuple[int, ...]) -> Depth:
    """The stream's size through depth, and how much each attention layer and MLP adds on average."""
    cache = cache_of(model, ids)
    outputs = {}
    for layer in range(model.cfg.n_layers):
        outputs[f"L{layer} attention"] = cache[f"blocks.{layer}.hook_attn_out"][0]    # [pos d_model]
        if not model.cfg.attn_only:
            outputs[f"L{layer} MLP"] = cache[f"blocks.{layer}.hook_mlp_out"][0]
    added = np.array([float(out.norm(dim=-1).mean()) for out in outputs.values()])
    return Depth(to_numpy(boundaries(model, cache)[:, 0].norm(dim=-1).double()), list(outputs), added)


@dataclass(frozen=True)
class Lens:
    top: list[list[int]]      # [boundary LENS_TOP] the likeliest tokens read at each boundary
    top_probs: np.ndarray     # [boundary LENS_TOP] their probabilities
    next_token: int | None    # the token that actually follows the position (None at the last)
    next_probs: np.ndarray    # [boundary] its probability at each boundary (empty at the last position)
    candidates: list[int]     # the model's CANDIDATES likeliest next tokens at the position
    final_ranks: np.ndarray   # [boundary] rank (1: the top) of the last boundary's top token at each boundary
    check: Check              # the lens after the last block against a separate model(tokens), every position

    @property
    def first_top(self) -> int:
        """The first boundary whose read-out already ranks the model's final top token first."""
        return int(np.argmax(self.final_ranks == 1))


@torch.inference_mode()
@costs(lambda model, ids, *_: ledger_mb(model, ids)  # and the read-out at every boundary [n_layers+1 pos d_vocab]
       + 4 * (model.cfg.n_layers + 1) * len(ids) * model.cfg.d_vocab / 1e6)
def lens(model: Transformer, ids: tuple[int, ...], position: int) -> Lens:
    """The logit lens at one position: the stream read through the model's read-out after every block."""
    cache = cache_of(model, ids)
    read = logit_lens(model, cache)[:, 0]                                      # [boundary pos d_vocab]
    logits = model(torch.tensor([ids]))[0]                                     # [pos d_vocab], a separate call
    here = read[:, position]                                                   # [boundary d_vocab]
    probs = here.double().softmax(-1)
    ranks = (here > here[:, here[-1].argmax(), None]).sum(-1) + 1              # [boundary], from logits: no underflow
    top = probs.topk(min(LENS_TOP, model.cfg.d_vocab), dim=-1)
    following = ids[position + 1] if position + 1 < len(ids) else None
    return Lens(top.indices.tolist(), to_numpy(top.values), following,
                to_numpy(probs[:, following]) if following is not None else np.zeros(0),
                logits[position].topk(min(CANDIDATES, model.cfg.d_vocab)).indices.tolist(), to_numpy(ranks),
                compare(read[-1], logits, model_tolerance(model)))


@dataclass(frozen=True)
class Attribution:
    labels: list[str]         # one per component, then "bias"
    shares: np.ndarray        # [component] direct share of logit(token), minus that of logit(other) if given
    logit: float              # logit(token) − logit(other) (or logit(token)) from a separate model(tokens)
    check: Check              # the shares' sum against that logit

    @property
    def largest(self) -> str:
        """The term that pushes the logit (or the difference) up the most."""
        return self.labels[int(np.argmax(self.shares))]

    @property
    def top_heads(self) -> list[str]:
        """The head (or heads, tied) with the largest direct share; none in a model with no layers."""
        heads = {label: share for label, share in zip(self.labels, self.shares) if _HEAD.fullmatch(label)}
        return [label for label, share in heads.items() if share == max(heads.values())]


@torch.inference_mode()
@costs(ledger_mb)
def attribution(model: Transformer, ids: tuple[int, ...], position: int, token: int,
                other: int | None = None) -> Attribution:
    """Direct logit attribution at one position: each component's share of the logit of ``token``, or of the
    logit difference against ``other``."""
    cache = cache_of(model, ids)
    logits = model(torch.tensor([ids]))[0, position]                           # [d_vocab], a separate call

    def shares_of(target: int) -> tuple[list[str], Tensor]:
        labels, shares = direct_logit_attribution(model, cache, torch.full((1, len(ids)), target))
        return labels, shares[:, 0, position]                                  # [component]

    labels, shares = shares_of(token)
    logit = logits[token]
    if other is not None:
        shares, logit = shares - shares_of(other)[1], logit - logits[other]
    return Attribution(labels, to_numpy(shares.double()), float(logit),
                       compare(shares.sum(), logit, model_tolerance(model)))


@dataclass(frozen=True)
class Subspaces:
    labels: list[str]         # one per head, "L0H1"
    overlap: np.ndarray       # [head head] mean squared cosine of the principal angles
    pairs: int                # pairs of different heads
    mean: float               # mean overlap over those pairs (nan with fewer than two heads)
    largest: float            # largest overlap of a pair (nan with fewer than two heads)
    k: int                    # the dimension of each head's subspace: min(d_head, d_model)
    baseline: float           # expected overlap of two random k-dimensional subspaces: k / d_model
    margin: float             # OVERLAP_SIGMAS standard deviations of the mean of that many random pairs
    written: int              # dimensions all heads together could write: n_layers · n_heads · k
    room: bool                # written ≤ d_model: the heads' subspaces could all be orthogonal
    least: float              # the smallest mean overlap these dimensions allow (least_overlap; nan with one head)
    # every pair overlaps at most SEPARATE_MAX: "yes", "no", or "impossible" when least > SEPARATE_MAX (a count of
    # dimensions, not a finding); "" with one head
    separate: Literal["yes", "no", "impossible", ""]
    # mean against baseline ± margin; "vacuous" when k = d_model (every subspace is the whole stream, random ones
    # too: the overlap is 1 by dimension count); "" with one head
    versus_random: Literal["below", "about", "above", "vacuous", ""]


@costs(subspaces_mb)
@torch.inference_mode()
def subspaces(model: Transformer) -> Subspaces:
    """Do the heads write into separate subspaces of the stream? Their overlaps against random subspaces."""
    cfg = model.cfg
    if not cfg.n_layers:
        raise ValueError("a model with no layers has no heads, so no subspaces to compare")
    labels, overlap = subspace_overlap(model)
    off = overlap[~torch.eye(len(labels), dtype=torch.bool, device=overlap.device)]    # [head·(head−1)]
    pairs, k = len(off) // 2, min(cfg.d_head, cfg.d_model)
    written = len(labels) * k
    baseline = random_overlap(cfg.d_model, k)
    margin = OVERLAP_SIGMAS * random_overlap_sd(cfg.d_model, k) / max(pairs, 1) ** 0.5
    nan = float("nan")
    mean, largest = (float(off.mean()), float(off.max())) if pairs else (nan, nan)
    least = least_overlap(cfg.d_model, k, len(labels)) if pairs else nan
    versus = ("" if not pairs else "vacuous" if k == cfg.d_model else "below" if mean < baseline - margin
              else "above" if mean > baseline + margin else "about")
    separate = "" if not pairs else "impossible" if least > SEPARATE_MAX else "yes" if largest <= SEPARATE_MAX else "no"
    return Subspaces(labels, to_numpy(overlap), pairs, mean, largest, k, baseline, margin, written,
                     written <= cfg.d_model, least, separate, versus)
