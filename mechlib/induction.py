"""Induction heads (Olsson et al. 2022): the scores that find them on repeated random sequences.

A sequence (``data.repeated_sequences``) is <bos>, a random segment of length L, the same segment again:
positions 1…L, then L+1…2L. An induction head at a second-repeat token attends to the token after that token's
earlier copy (position q − L + 1) and copies it; a previous-token head attends to q − 1.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib import circuits, zoo
from mechlib.checks import ABLATION_DROP_MIN, INDUCTION_MIN, PREV_TOKEN_MIN
from mechlib.config import ModelConfig
from mechlib.data import EVAL_LENGTH, eval_length, repeated_sequences
from mechlib.device import costs, to_numpy
from mechlib.loss import next_token_loss
from mechlib.lstm import LSTM
from mechlib.model import Transformer

__all__ = ["MIN_LENGTH", "SIZES_NEEDED", "scorable", "stacked_patterns", "patterns_on", "previous_token_scores",
           "induction_scores", "duplicate_token_scores",
           "loss_by_position", "mean_ablation", "head_scores", "ablated_induction_scores", "in_context_learning_score", "InductionCircuit", "induction_circuit", "TwoLayers",
           "two_layers", "Snapshot", "snapshot", "snapshot_at", "PhaseChange", "phase_change"]

SCORE_BATCH = 32  # repeated random sequences a head's scores are measured on
SCORE_CHUNK_MB = 256  # activations one forward of ``head_scores`` holds at most; a larger batch runs in chunks
ICL_BATCH, ICL_SEED = 16, 7  # repeated sequences the in-context-learning score of a checkpoint is measured on

MIN_LENGTH = 3  # below it the token after the earlier copy, q − L + 1, is the query itself (L = 1) or q − 1 (L = 2)
SIZES_NEEDED = (f"induction scores need a context of {2 * MIN_LENGTH + 1} tokens or more, and at least as many "
                f"ordinary tokens (ids 2, 3, …) as the scored segment is long (min({EVAL_LENGTH}, (n_ctx − 1) // 2))")


def scorable(cfg: ModelConfig) -> bool:
    """Whether induction scores can be read at these sizes (``SIZES_NEEDED``): a segment of MIN_LENGTH or more, so
    induction differs from attending to the previous token, and drawn from at least as many ordinary tokens as it
    is long, so most of its tokens occur once and their earlier copy is unambiguous."""
    length = eval_length(cfg.n_ctx)
    return length >= MIN_LENGTH and cfg.d_vocab - 2 >= length


def _require_scorable(cfg: ModelConfig) -> None:
    if not scorable(cfg):
        raise ValueError(f"{SIZES_NEEDED}; this model has n_ctx = {cfg.n_ctx} (a segment of {eval_length(cfg.n_ctx)}) "
                         f"and d_vocab = {cfg.d_vocab}")


def previous_token_scores(patterns: Tensor) -> Tensor:
    """Mean attention to the previous position: [layer batch head q k] -> [layer head]."""
    return patterns.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(1, 3))


def stacked_patterns(cache: dict[str, Tensor], n_layers: int) -> Tensor:
    """Every layer's cached attention patterns, on the CPU: [layer batch head query_pos key_pos]."""
    return torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"].cpu() for layer in range(n_layers)])


def _attention_from_second_repeat(patterns: Tensor, tokens: Tensor, length: int, shift: int) -> Tensor:
    """Mean attention from each second-repeat token q to position q − L + shift, over valid pairs only:
    queries whose token occurs exactly once before them, so the earlier copy is unambiguous. [layer head]"""
    queries = torch.arange(length + 1, 2 * length + 1)                            # [q]
    earlier = (tokens[:, None, :] == tokens[:, queries, None]) & (
        torch.arange(tokens.shape[1])[None, None, :] < queries[None, :, None])    # [batch q k]
    valid = earlier.sum(-1) == 1                                                  # [batch q]
    if not valid.any():
        raise ValueError("no second-repeat token has a unique earlier copy; use a larger vocabulary or batch")
    weights = patterns[..., queries, queries - length + shift] * valid[None, :, None, :]  # [layer batch head q]
    return weights.sum(dim=(1, 3)) / valid.sum()


def induction_scores(patterns: Tensor, tokens: Tensor, length: int) -> Tensor:
    """Mean attention from each second-repeat token to the token after its earlier copy: [layer head].

    Only valid pairs count: a query whose token occurs exactly once before it, so its earlier copy is
    unambiguous and a perfect induction head scores 1.0.
    """
    return _attention_from_second_repeat(patterns, tokens, length, shift=1)


def duplicate_token_scores(patterns: Tensor, tokens: Tensor, length: int) -> Tensor:
    """Mean attention from each second-repeat token to its own earlier copy (position q − L): [layer head].
    Valid pairs only, as for the induction score."""
    return _attention_from_second_repeat(patterns, tokens, length, shift=0)


@torch.inference_mode()
def mean_ablation(model: Transformer, tokens: Tensor, heads: list[tuple[int, int]]) -> dict[tuple[int, int], Tensor]:
    """For ``model(tokens, ablate=…)``: each head's output z replaced by its mean over this batch and positions."""
    _, cache = model.run_with_cache(tokens)
    return {(layer, head): cache[f"blocks.{layer}.attn.hook_z"][:, :, head].mean((0, 1)) for layer, head in heads}


def score_chunk(cfg: ModelConfig) -> int:
    """Repeated sequences ``head_scores`` runs at once: all of a small model's batch, or as many as SCORE_CHUNK_MB
    of activations hold (one at least; GPT-2 small's 32 would hold 1.7 GB)."""
    return max(1, int(SCORE_CHUNK_MB // cfg.activations_mb(1, 1 + 2 * eval_length(cfg.n_ctx))))


@torch.inference_mode()
def head_scores(model: Transformer, batch: int = SCORE_BATCH, seed: int = 1234,
                ablate: dict[tuple[int, int], Tensor] | None = None) -> dict[str, Tensor]:
    """Previous-token, duplicate-token and induction scores of every head, [layer head] each, on repeated
    random sequences; ``ablate`` (see ``Transformer.forward``) measures them with some heads knocked out."""
    length = eval_length(model.cfg.n_ctx)
    tokens = repeated_sequences(model.cfg.d_vocab, length, batch, seed)
    patterns = torch.cat([stacked_patterns(model.run_with_cache(chunk, ablate, stop_at_layer=model.cfg.n_layers)[1],
                                           model.cfg.n_layers)
                          for chunk in tokens.split(score_chunk(model.cfg))], dim=1)  # [layer batch head q k]
    return {"prev_token": previous_token_scores(patterns), "duplicate_token": duplicate_token_scores(patterns, tokens, length),
            "induction": induction_scores(patterns, tokens, length)}


@torch.inference_mode()
def ablated_induction_scores(model: Transformer, head: tuple[int, int]) -> Tensor:
    """Every head's induction score [layer head] with ``head``'s output z set to zero: a functional ablation
    (``ablate`` of the forward pass), the shared model untouched."""
    return head_scores(model, ablate={head: model.embed.W_E.new_zeros(model.cfg.d_head)})["induction"]


@torch.inference_mode()
def in_context_learning_score(model: Transformer, tokens: Tensor) -> float:
    """Loss late in the context minus loss early (nats), as in Olsson et al. (500th − 50th token), scaled to
    this context: the last predicted position against the one a tenth of the way in. Negative: later
    tokens are predicted better, thanks to the context."""
    losses = loss_by_position(model, tokens)                                   # [pos − 1]
    early = max(1, round(0.1 * (tokens.shape[1] - 1)))
    return float(losses[-1] - losses[early - 1])


@torch.inference_mode()
def loss_by_position(model: Transformer | LSTM, tokens: Tensor) -> Tensor:
    """Mean next-token loss (nats) at each position, [pos − 1]: position p predicts token p + 1."""
    return next_token_loss(model(tokens.to(next(model.parameters()).device)).cpu(), tokens, "none").mean(0)


@dataclass(frozen=True)
class InductionCircuit:
    """The induction circuit (Olsson et al. 2022) as found in a model: a previous-token head, a later induction
    head whose keys read it (K-composition) and whose OV circuit copies, and the ablation showing that the second
    needs the first. Each part is claimed only past its threshold in ``mechlib.checks``; ``missing`` says which
    parts are not there."""

    previous: str            # the best previous-token head in a layer before the induction head's
    previous_score: float
    induction: str           # the best induction head in layers 1 …
    induction_score: float
    k_composition: float     # previous → induction (``circuits.composition_score_reference``)
    k_ceiling: float         # the most their singular values allow (``circuits.composition_ceiling``)
    baseline: float          # the mean composition score of random factors of these sizes (empirical)
    threshold: float         # random_composition(…).bar(1): one pair tested, composing "above random" means above this
    copying: float           # the induction head's OV copying score (``circuits.copying_score``)
    copying_bar: float       # random_copying(…).bar(1): what a random head of these sizes reaches
    ablated_score: float     # the induction head's score with the previous-token head's output set to zero
    drop: float              # 1 − ablated_score / induction_score
    ablation: dict[str, tuple[float, float]]  # each head in a layer after the previous-token head's -> (its induction
                                              # score, the score with the previous-token head's output set to zero)
    has_previous: bool       # previous_score ≥ PREV_TOKEN_MIN
    has_induction: bool      # induction_score ≥ INDUCTION_MIN
    composes: bool           # k_composition > threshold
    copies: bool             # copying > copying_bar
    depends: bool            # has_induction and drop ≥ ABLATION_DROP_MIN: not tested without an induction head
    missing: list[str]       # one line per part that fails; empty when the whole circuit is found

    @property
    def found(self) -> bool:
        return not self.missing

    @property
    def broken(self) -> tuple[str, ...]:
        """Every head the ablation breaks, in the order of ``ablation``: an induction head (score ≥ INDUCTION_MIN)
        whose score falls by ABLATION_DROP_MIN or more when the previous-token head's output is set to zero. The
        rule the Circuits page states, and the set its question accepts; empty when nothing breaks."""
        return tuple(head for head, (before, after) in self.ablation.items()
                     if before >= INDUCTION_MIN and 1 - after / before >= ABLATION_DROP_MIN)


def _circuit(model: Transformer, scores: dict[str, Tensor]) -> InductionCircuit:
    """The circuit from ``head_scores(model)``: the best induction head in any layer after the first, the best
    previous-token head in any layer before it."""
    cfg = model.cfg
    if cfg.n_layers < 2:
        raise ValueError("an induction circuit needs two layers or more: a previous-token head before an induction head")
    layer, head = divmod(int(scores["induction"][1:].argmax()), cfg.n_heads)
    induction = (layer + 1, head)
    previous = divmod(int(scores["prev_token"][: induction[0]].argmax()), cfg.n_heads)
    P, I = circuits.head_label(*previous), circuits.head_label(*induction)
    previous_score, induction_score = float(scores["prev_token"][previous]), float(scores["induction"][induction])
    k = circuits.composition_score_reference(model, "K", previous, induction)
    ceiling = float(circuits.composition_ceiling(model, "K")[(*previous, *induction)])
    chance = circuits.random_composition(cfg.d_model, cfg.d_head)
    threshold = chance.bar(1)                                # one pair tested: the plain one-sided 95 % bar
    copying = float(circuits.copying_score(circuits.ov_eigenvalues(model, *induction)))
    copying_bar = circuits.random_copying(cfg.d_vocab, cfg.d_model, cfg.d_head).bar(1)
    ablated_all = ablated_induction_scores(model, previous)                                 # [layer head]
    ablation = {circuits.head_label(later, h): (float(scores["induction"][later, h]), float(ablated_all[later, h]))
                for later in range(previous[0] + 1, cfg.n_layers) for h in range(cfg.n_heads)}
    ablated = float(ablated_all[induction])
    drop = 1 - ablated / induction_score if induction_score > 0 else 0.0
    has_previous, has_induction = previous_score >= PREV_TOKEN_MIN, induction_score >= INDUCTION_MIN
    composes, copies, depends = k > threshold, copying > copying_bar, has_induction and drop >= ABLATION_DROP_MIN
    missing = [line for passed, line in (
        (has_previous, f"no previous-token head before layer {induction[0]}: the best, {P}, scores "
                       f"{previous_score:.2f} < {PREV_TOKEN_MIN}"),
        (has_induction, f"no induction head: the best, {I}, scores {induction_score:.2f} < {INDUCTION_MIN}"),
        (composes, f"no K-composition: {P} → {I} scores {k:.3f}, not above random (random heads score "
                   f"{chance.mean:.3f} ± {chance.sd:.3f}; one pair tested, the bar is {threshold:.3f})"),
        (copies, f"{I}'s OV circuit does not copy: its copying score {copying:.2f} is not above what a random head "
                 f"reaches, {copying_bar:.2f}"),
        (depends, f"{I} does not depend on {P}: ablating {P} moves its induction score from {induction_score:.2f} "
                  f"to {ablated:.2f}, a drop of {drop:.0%} < {ABLATION_DROP_MIN:.0%}" if has_induction else
                  "the ablation is not tested: no induction head found")) if not passed]
    return InductionCircuit(P, previous_score, I, induction_score, k, ceiling, chance.mean, threshold, copying,
                            copying_bar, ablated, drop, ablation, has_previous, has_induction, composes, copies, depends, missing)


@torch.inference_mode()
@costs(lambda model: scoring_mb(model.cfg))
def induction_circuit(model: Transformer) -> InductionCircuit:
    """Find the induction circuit in ``model`` and test each of its parts."""
    _require_scorable(model.cfg)
    return _circuit(model, head_scores(model))


def patterns_on(model: Transformer, tokens: Tensor) -> np.ndarray:
    """Every head's attention pattern on one sequence [1 pos]: [layer head query_pos key_pos]."""
    _, cache = model.run_with_cache(tokens)
    return to_numpy(stacked_patterns(cache, model.cfg.n_layers)[:, 0])


def example_sequence(cfg: ModelConfig, seed: int) -> Tensor:
    """The repeated random sequence from ``seed`` every head's pattern is shown on: [1 pos]."""
    return repeated_sequences(cfg.d_vocab, eval_length(cfg.n_ctx), 1, seed)


def _on_example(model: Transformer, seed: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """Every head's pattern on ``example_sequence`` [layer head query_pos key_pos], and that sequence's ids."""
    tokens = example_sequence(model.cfg, seed)  # [1 pos]
    return patterns_on(model, tokens), tuple(tokens[0].tolist())


@dataclass(frozen=True)
class TwoLayers:
    """Two layers or more: how heads compose, and the induction circuit they may form."""

    patterns: np.ndarray            # [layer head query_pos key_pos] every head on one repeated random sequence
    example: tuple[int, ...]        # that sequence's ids (``example_sequence``)
    heads: list[str]                # every head, layer by layer: "L0H0", "L0H1", …
    scores: dict[str, np.ndarray]   # prev_token, duplicate_token, induction: [layer head] over a batch
    composition: circuits.Composition
    circuit: InductionCircuit

    @property
    def previous_token_heads(self) -> list[str]:
        """The heads whose previous-token score reaches PREV_TOKEN_MIN: the ones this model has."""
        return [head for head, score in zip(self.heads, self.scores["prev_token"].flatten()) if score >= PREV_TOKEN_MIN]


def scoring_mb(cfg: ModelConfig, batch: int = SCORE_BATCH) -> float:
    """What scoring ``batch`` repeated sequences holds beside the weights, in MB: one chunk's forward
    (``score_chunk``) and every sequence's patterns [layer batch head q k]."""
    positions = 1 + 2 * eval_length(cfg.n_ctx)
    return (cfg.activations_mb(min(batch, score_chunk(cfg)), positions)
            + 4 * cfg.n_layers * batch * cfg.n_heads * positions**2 / 1e6)


@costs(lambda model, seed: max(scoring_mb(model.cfg), circuits.composition_mb(model)))
@torch.inference_mode()
def two_layers(model: Transformer, seed: int) -> TwoLayers:
    """Every head's pattern on a repeated sequence from ``seed``, its scores, composition, and the induction circuit."""
    _require_scorable(model.cfg)
    scores = head_scores(model)
    heads = [circuits.head_label(layer, head) for layer in range(model.cfg.n_layers) for head in range(model.cfg.n_heads)]
    return TwoLayers(*_on_example(model, seed), heads,
                     {name: to_numpy(value) for name, value in scores.items()}, circuits.composition(model),
                     _circuit(model, scores))


@dataclass(frozen=True)
class Snapshot:
    """A model during training: its heads' patterns and best scores."""

    patterns: np.ndarray               # [layer head query_pos key_pos] on a repeated sequence
    example: tuple[int, ...]           # that sequence's ids (``example_sequence``)
    best_previous: tuple[str, float]   # the head with the highest previous-token score, and the score
    best_induction: tuple[str, float]  # the head with the highest induction score, and the score


@torch.inference_mode()
def snapshot(model: Transformer, seed: int) -> Snapshot:
    """Every head's pattern on a repeated sequence from ``seed``, and the best previous-token and induction heads."""
    scores = head_scores(model)
    best = {name: (circuits.head_label(*divmod(int(scores[name].argmax()), model.cfg.n_heads)), float(scores[name].max()))
            for name in ("prev_token", "induction")}
    return Snapshot(*_on_example(model, seed), best["prev_token"], best["induction"])


@costs(lambda name, step, seed: zoo.load(name).cfg.estimate_mb(SCORE_BATCH), "this checkpoint's heads")
def snapshot_at(name: str, step: int, seed: int) -> Snapshot:
    """``snapshot`` of the zoo model ``name`` as it was at training step ``step`` (one of its shipped checkpoints)."""
    return snapshot(zoo.load_snapshot(name, step), seed)


@dataclass(frozen=True)
class PhaseChange:
    """A zoo model's shipped checkpoints, scored: when an induction head forms and the context starts to help."""

    steps: list[int]
    induction: list[float]     # the best induction score per checkpoint
    icl: list[float]           # the in-context-learning score per checkpoint, nats (negative: the context helps)
    formed_at: int | None      # the first step whose best induction score reaches INDUCTION_MIN

    @property
    def jump(self) -> tuple[int, int]:
        """The consecutive checkpoints (step before, step after) between which the best induction score rises most."""
        i = int(np.diff(self.induction).argmax())
        return self.steps[i], self.steps[i + 1]

    def bins(self, n: int) -> list[tuple[int, int]]:
        """The checkpoints' steps cut into at most ``n`` runs of consecutive checkpoints that share none:
        (first step, last step) of each, so every checkpoint lies in exactly one bin."""
        return [(self.steps[chunk[0]], self.steps[chunk[-1]]) for chunk in np.array_split(np.arange(len(self.steps)), n)
                if len(chunk)]

    def jump_bin(self, n: int) -> int:
        """The index, in ``bins(n)``, of the bin holding the checkpoint where the jump has happened (the later of
        ``jump``): the question's answer, by the rule its reveal states."""
        after = self.jump[1]
        return next(i for i, (first, last) in enumerate(self.bins(n)) if first <= after <= last)


@costs(lambda name: zoo.load(name).cfg.estimate_mb(max(SCORE_BATCH, ICL_BATCH)), "scoring every checkpoint")
@torch.inference_mode()
def phase_change(name: str) -> PhaseChange:
    """Score every shipped checkpoint of the zoo model ``name``."""
    steps, best, icl = zoo.snapshot_steps(name), [], []
    for step in steps:
        model = zoo.load_snapshot(name, step)
        best.append(float(head_scores(model)["induction"].max()))
        tokens = repeated_sequences(model.cfg.d_vocab, eval_length(model.cfg.n_ctx), ICL_BATCH, ICL_SEED)
        icl.append(in_context_learning_score(model, tokens))
    return PhaseChange(steps, best, icl, next((s for s, b in zip(steps, best) if b >= INDUCTION_MIN), None))
