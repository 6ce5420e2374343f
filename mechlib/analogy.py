"""The LSTM analogy (seed 002): an LSTM's cell state beside a transformer's residual stream.

Both carry memory forward by addition: c_t = f_t ⊙ c_{t−1} + i_t ⊙ g_t step by step, x_{ℓ+1} = x_ℓ + Σ_h h_ℓ(x_ℓ)
layer by layer. The input gate i_t plays the attention patterns' part (what to take in), the output gate o_t
the heads' messages' (what to emit). The experiments run two zoo models trained on the same data, ``lstm``
and ``attn-only-2l``, and the test that separates them: a repeated random sequence, which an induction head
predicts from the earlier copy and a fixed-size state cannot hold.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib import data, induction, loss, lstm, residual, zoo
from mechlib.checks import LOSS_TIE, Check, compare, model_tolerance
from mechlib.device import costs, to_numpy
from mechlib.lstm import LSTM
from mechlib.model import Transformer

__all__ = ["RNN", "TRANSFORMER", "NAMES", "FORGET_OPEN", "Pair", "pair", "prompt", "repeated_ids", "SideBySide",
           "side_by_side", "cell_check", "Ranking", "rank", "SeparatingTest", "separating_test",
           "Heldout", "heldout", "SHED_BANDS", "CANCEL_BANDS", "STEPS_BACK", "band", "largest_step"]

RNN, TRANSFORMER = "lstm", "attn-only-2l"
NAMES = {TRANSFORMER: "transformer (attn-only-2l)", RNN: "LSTM"}  # how tables and sentences name the two
FORGET_OPEN = 0.9  # a forget gate above this keeps (almost) all of that cell: nearly a pure addition
TEST_BATCH = 32    # repeated random sequences the separating test averages over

# The options of the page's questions: (upper edge, exclusive; name) of each band, and how far back a step lies.
SHED_BANDS = ((0.5, "under half"), (0.9, "half to 90 %"), (math.inf, "90 % or more"))  # share of a loss gone
CANCEL_BANDS = ((1, "none"), (3, "one or two"), (5, "three or four"), (math.inf, "five or more"))  # components
STEPS_BACK = ("the last step", "the step before it", "an earlier step")


def _models() -> tuple[LSTM, Transformer]:
    return zoo.load(RNN), zoo.load(TRANSFORMER)


def _tokens(model: LSTM | Transformer, ids: tuple[int, ...]) -> Tensor:
    return torch.tensor([ids], device=next(model.parameters()).device)  # [batch=1 pos]


@dataclass(frozen=True)
class Pair:
    """The two models' sizes, from their configs."""

    rnn_params: int
    transformer_params: int
    n_ctx: int         # the shorter context of the two: every input is cut to it
    max_segment: int   # the longest random segment that fits twice after <bos>
    test_segment: int  # the segment length the induction scores use


@costs(lambda: 0.0, "the two models' sizes")  # their configs only: the models are the zoo's, loaded once
def pair() -> Pair:
    """The two zoo models' parameter counts and shared context."""
    rnn, transformer = _models()
    n_ctx = min(rnn.cfg.n_ctx, transformer.cfg.n_ctx)
    return Pair(rnn.cfg.n_params(), transformer.cfg.n_params(), n_ctx, (n_ctx - 1) // 2, data.eval_length(n_ctx))


def prompt(text: str) -> data.Prompt:
    """<bos> and the text's characters, cut to the shared context."""
    return data.prompt_ids(zoo.load(TRANSFORMER).tokenizer, text, pair().n_ctx)


def repeated_ids(length: int, seed: int) -> tuple[int, ...]:
    """<bos>, a random segment of ``length`` characters, the segment again."""
    return tuple(data.repeated_sequences(zoo.load(TRANSFORMER).cfg.d_vocab, length, 1, seed)[0].tolist())


@dataclass(frozen=True)
class SideBySide:
    labels: list[str]            # one per position
    cell: np.ndarray             # [d_hidden pos] c_t
    input_gate: np.ndarray       # [d_hidden pos] i_t
    output_gate: np.ndarray      # [d_hidden pos] o_t
    forget: np.ndarray           # [pos·d_hidden] every forget-gate value f_t
    forget_median: float
    forget_open_share: float     # share of forget gates above FORGET_OPEN
    step_shares: np.ndarray      # [pos] length each step left in c_T along ĉ_T
    cell_norm: float             # ‖c_T‖
    cell_check: Check            # Σ_t (Π f) ⊙ i_t ⊙ g_t against c_T from the forward pass
    depth: np.ndarray            # [n_layers+1 pos] ‖residual‖ at each layer boundary
    patterns: np.ndarray         # [layer head query_pos key_pos]
    messages: np.ndarray         # [head pos] ‖result‖ of each last-layer head
    component_labels: list[str]
    component_shares: np.ndarray  # [component] length each left in x_final (last position) along x̂_final
    resid_norm: float            # ‖x_final‖ at the last position
    resid_check: Check           # Σ components against hook_resid_post of a separate forward pass
    cancelling: list[str]        # components with a negative length along x̂_final: they cancel part of it
    cancelled: float             # their summed length along x̂_final (≤ 0)


def cell_check(states: dict[str, Tensor], tolerance: float) -> Check:
    """What each step wrote, (Π_{s>t} f_s) ⊙ i_t ⊙ g_t, summed over steps, against the final cell c_T."""
    return compare(lstm.cell_contributions(states).sum(1), states["L0.cell"][:, -1], tolerance)


def _forward_mb(batch: int) -> float:
    """Both models' weights and the activations of ``batch`` full-length sequences, in MB."""
    return sum(model.cfg.estimate_mb(batch) for model in _models())


@costs(lambda ids: _forward_mb(1), "both models on these tokens")
@torch.inference_mode()
def side_by_side(ids: tuple[int, ...]) -> SideBySide:
    """Both models on the same tokens: the LSTM's cell and gates, the transformer's stream, patterns and messages."""
    rnn, transformer = _models()
    _, states = rnn.run_with_states(_tokens(rnn, ids))
    cell, forget = states["L0.cell"][0].cpu(), states["L0.forget"][0].cpu()  # [pos d_hidden]
    contributions = lstm.cell_contributions(states)[0].cpu()                 # [pos d_hidden]
    tokens = _tokens(transformer, ids)
    _, cache = transformer.run_with_cache(tokens)
    n = transformer.cfg.n_layers
    book = residual.ledger(transformer, cache)
    final = cache[f"blocks.{n - 1}.hook_resid_post"][0, -1].cpu()            # [d_model]
    shares = book.terms[:, 0, -1].cpu() @ (final / final.norm())              # [component]
    return SideBySide(
        labels=data.token_labels(transformer.tokenizer, ids),
        cell=to_numpy(cell.T), input_gate=to_numpy(states["L0.input"][0].T),
        output_gate=to_numpy(states["L0.output"][0].T),
        forget=to_numpy(forget.flatten()), forget_median=float(forget.quantile(0.5)),
        forget_open_share=float((forget > FORGET_OPEN).double().mean()),
        step_shares=to_numpy(contributions @ (cell[-1] / cell[-1].norm())), cell_norm=float(cell[-1].norm()),
        cell_check=cell_check(states, model_tolerance(rnn)),
        depth=to_numpy(residual.boundaries(transformer, cache)[:, 0].norm(dim=-1)),
        patterns=to_numpy(induction.stacked_patterns(cache, n)[:, 0]),
        messages=to_numpy(cache[f"blocks.{n - 1}.attn.hook_result"][0].norm(dim=-1).T),
        component_labels=book.labels, component_shares=to_numpy(shares), resid_norm=float(final.norm()),
        resid_check=residual.ledger_check(transformer, tokens, book).residual,
        cancelling=[label for label, share in zip(book.labels, shares.tolist()) if share < 0],
        cancelled=float(shares.clamp(max=0).sum()),
    )


@dataclass(frozen=True)
class Ranking:
    """Which of two models has the lower loss, and by how much."""

    better: str    # the lower loss
    worse: str
    margin: float  # worse − better, nats (≥ 0)
    tie: bool      # margin below LOSS_TIE: neither is better


def rank(losses: dict[str, float]) -> Ranking:
    """Rank two models' losses (nats)."""
    (better, low), (worse, high) = sorted(losses.items(), key=lambda item: item[1])
    return Ranking(better, worse, high - low, high - low < LOSS_TIE)


@dataclass(frozen=True)
class SeparatingTest:
    labels: list[str]                # one per position of the test sequence
    losses: dict[str, np.ndarray]    # model -> [pos − 1] mean loss predicting each position
    first_repeat: dict[str, float]   # model -> mean loss predicting tokens 2 … L of the first occurrence
    second_repeat: dict[str, float]  # model -> the same for the second occurrence
    reduction: dict[str, float]      # model -> share of the first occurrence's loss gone on the second
    repeat: Ranking                  # on the second occurrence
    transformer_wins: bool           # the transformer predicts the second occurrence better (not a tie)


@costs(lambda length, seed: _forward_mb(TEST_BATCH), "the separating test")
@torch.inference_mode()
def separating_test(length: int, seed: int) -> SeparatingTest:
    """Loss at each position of TEST_BATCH repeated random sequences (segment ``length``), for both models."""
    rnn, transformer = _models()
    tokens = data.repeated_sequences(transformer.cfg.d_vocab, length, TEST_BATCH, seed)  # [batch 1+2L]
    losses = {NAMES[TRANSFORMER]: to_numpy(induction.loss_by_position(transformer, tokens)),
              NAMES[RNN]: to_numpy(induction.loss_by_position(rnn, tokens))}
    first = {name: float(values[1:length].mean()) for name, values in losses.items()}
    second = {name: float(values[length + 1 : 2 * length].mean()) for name, values in losses.items()}
    repeat = rank(second)
    return SeparatingTest(data.token_labels(transformer.tokenizer, tokens[0].tolist()), losses, first, second,
                          {name: 1 - second[name] / first[name] for name in losses}, repeat,
                          repeat.better == NAMES[TRANSFORMER] and not repeat.tie)


@dataclass(frozen=True)
class Heldout:
    losses: dict[str, float]  # model -> mean loss (nats per character) on held-out built-in text
    text: Ranking


@costs(lambda: _forward_mb(loss.HELDOUT_BATCH), "both models on the held-out text")
@torch.inference_mode()
def heldout() -> Heldout:
    """Both models' next-token loss on the held-out built-in text."""
    rnn, transformer = _models()
    losses = {NAMES[TRANSFORMER]: loss.heldout_loss(transformer), NAMES[RNN]: loss.heldout_loss(rnn)}
    return Heldout(losses, rank(losses))


def band(value: float, bands: tuple[tuple[float, str], ...]) -> str:
    """The name of the first band whose upper edge (exclusive) lies above ``value``."""
    return next(name for edge, name in bands if value < edge)


def largest_step(step_shares: np.ndarray) -> str:
    """Which step left the most in the final cell along ĉ_T (step_shares [pos]), counted back from the last."""
    back = len(step_shares) - 1 - int(np.argmax(step_shares))
    return STEPS_BACK[min(back, len(STEPS_BACK) - 1)]
