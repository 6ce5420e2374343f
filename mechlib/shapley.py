"""Shapley values over a transformer's components (Shapley 1953): which mechanism gets the credit for one prediction.

The players are every attention head, each MLP layer (in models with MLPs), and the direct path W_E W_U: the embedded
input's own contribution to the logits (the token embedding, and the positional one where positions enter the residual
stream). A coalition's value v(S) is a metric of one prediction at the prompt's last position (``Metric``: a logit
difference right − wrong, or a log-probability) with every player outside S removed: its output replaced by its output
on a stated baseline, "zero", "mean" (its mean over windows of the built-in text) or "resample" (its output on a
corrupted input of the same length).

Two games differ in where an absent player is removed:

- **direct**: from the final residual stream only. Every component still reads the full model's stream, and the final
  LayerNorm divides by the full run's scale, as direct logit attribution does. A logit difference is then linear in the
  players' writes: the game is additive, and each player's Shapley value is its direct logit attribution
  (``residual.direct_logit_attribution``) in the metric's direction, W_U[:, right] − W_U[:, wrong].
- **total**: everywhere downstream. A head's z (an MLP's output) takes its baseline value inside the forward pass, so
  later heads read the changed stream, and the final LayerNorm's scale is the changed stream's own. Heads compose, so
  credit flows through composition: a previous-token head whose output an induction head's keys read shares in the
  induction head's prediction.

The direct path is a path, not a component: in both games it is removed from the final residual only (the heads still
read the embeddings). The biases (b_O, and b_out inside an MLP's output aside) are no players: they are always there.

φ_i = Σ_{S ⊆ N∖{i}} |S|!(n−|S|−1)!/n! · (v(S ∪ {i}) − v(S)), exact over all 2^n coalitions (one batched forward pass
per chunk of coalitions) for up to ``EXACT_MAX`` players; above that, the mean over random orderings of what each
player adds to the players before it (permutation sampling), with a standard error per value. Both satisfy efficiency,
Σφ = v(N) − v(∅) (each ordering telescopes). The Shapley interaction index of two players (Grabisch & Roubens 1999),
I_ij = Σ_{S ⊆ N∖{i,j}} |S|!(n−|S|−2)!/(n−1)! · (v(S∪{i,j}) − v(S∪{i}) − v(S∪{j}) + v(S)), is what they are worth
together beyond what each is worth alone; two heads "work only together" (``together``) when I_ij is a large share
of their own credit and large in nats. Values are combined in float64. Every run is functional
(``Transformer.forward``'s ``patch``): the shared model is not touched.

Cost is counted before anything runs, as forward passes × the prompt's positions × the model's parameters
(``shapley_cost``). ``permutations_within`` chooses how many orderings fit a cap (``COST_MAX`` unless told), and
``prompt_length`` shortens the induction prompt of a model too large for ``PERMUTATIONS`` orderings at the scored
length (GPT-2 small: 157 players, 163 M parameters), so that a game of such a model runs within the cap, its standard
errors printed, rather than being refused.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from math import factorial

import numpy as np
import torch
from torch import Tensor

from mechlib import residual
from mechlib.attention import per_head_results
from mechlib.checks import (
    COMPOSITION_DIRECT_SHARE,
    DIRECT_GAME_TOLERANCE,
    EFFICIENCY_TOLERANCE,
    TOGETHER_MIN,
    TOGETHER_SHARE_MIN,
    Check,
    above_random_bar,
    compare,
)
from mechlib.circuits import head_label
from mechlib.data import bos_id, builtin_text, eval_length, random_ids
from mechlib.device import costs
from mechlib.induction import MIN_LENGTH
from mechlib.model import LN_EPS, Cache, Transformer
from mechlib.patching import corrupted_pair

__all__ = ["EXACT_MAX", "PERMUTATIONS", "COST_MAX", "CHUNK_MB_MIN", "CHUNK_MB_MAX", "MEAN_BATCH", "MEAN_LENGTH", "BASELINES", "GAMES",
           "DIRECT_PATH",
           "Metric", "InductionPrompt", "induction_prompt", "players", "HeadGame", "head_game", "final_norm", "chunk_rows",
           "coalition_values",
           "coalitions", "exact_shapley", "exact_interaction", "sampled_shapley", "sampled_interaction", "GameValues",
           "HeadShapley", "shapley_evaluations", "shapley_mb", "shapley", "Interaction", "interaction_evaluations",
           "interaction_mb", "interaction", "shapley_cost", "permutations_within", "prompt_length",
           "player_attribution", "direct_game_check", "Together", "together"]

EXACT_MAX = 16       # players up to which every coalition is evaluated (2^16 = 65,536); above, orderings are sampled
PERMUTATIONS = 16    # orderings sampled when the caller names no number and there are more than EXACT_MAX players
COST_MAX = 3e12      # forward passes × positions × parameters one game may cost (``permutations_within``): at the
                     # 1.5–2.5e11 parameter-positions per second GPT-2 small's forward passes ran on 2 idle CPU cores
                     # (batches of 8 to 40 positions), 12–20 s. GPT-2 small gets 16 orderings of a 6-token prompt
                     # (2.45e12): 9.7–9.9 s on 2 threads of the shared 2-core machine at a load average of 2
                     # (bench/shapley_speed.py); at 4–5, 28–29 s on one thread and 83–89 s on two
CHUNK_MB_MIN, CHUNK_MB_MAX = 64, 512  # a batch of coalitions' activations: about the model's weights, within these
MEAN_BATCH, MEAN_LENGTH = 16, 32  # the "mean" baseline averages over this many windows of this many tokens
BASELINES = ("zero", "mean", "resample")
GAMES = ("direct", "total")
DIRECT_PATH = "direct path"


@dataclass(frozen=True)
class Metric:
    """One prediction's score, read at the last position: the logit difference logit(right) − logit(wrong) when
    ``wrong`` is given, else the log-probability of ``right`` (None: the model's own top token on the full input)."""

    right: int | None = None
    wrong: int | None = None

    def __post_init__(self) -> None:
        if self.wrong is not None and self.right is None:
            raise ValueError("a logit difference needs both tokens: Metric(right, wrong)")

    @property
    def linear(self) -> bool:
        """A logit difference: linear in the read-out's input, so the direct game is additive."""
        return self.wrong is not None

    @property
    def label(self) -> str:
        if self.linear:
            return f"logit({self.right}) − logit({self.wrong})"
        return f"log p({'the top token' if self.right is None else self.right})"

    def resolved(self, logits: Tensor) -> "Metric":
        """The metric with its token named: the top of ``logits`` [d_vocab] (the full model's) when it had none."""
        return self if self.right is not None else Metric(int(logits.argmax()))

    def score(self, model: Transformer, x: Tensor) -> Tensor:
        """The metric from the read-out's input x [c d_model] (after the final LayerNorm), in x's dtype: [c]."""
        W_U, b_U = model.unembed.W_U, model.unembed.b_U
        if self.linear:
            r, w = self.right, self.wrong
            return x @ (W_U[:, r] - W_U[:, w]).to(x.dtype) + (b_U[r] - b_U[w]).to(x.dtype)
        return (x.to(W_U.dtype) @ W_U + b_U).log_softmax(-1)[:, self.right].to(x.dtype)


@dataclass(frozen=True)
class InductionPrompt:
    """The induction task as one prediction: the last position holds the repeat of r's second-last token."""

    ids: tuple[int, ...]        # <bos> r r[:-1]: the answer, r's last token, follows the earlier copy
    corrupted: tuple[int, ...]  # <bos> c r[:-1]: nothing earlier says what comes next
    metric: Metric              # logit(r's last token) − logit(the corrupted segment's latest token that differs)


def induction_prompt(d_vocab: int, n_ctx: int, seed: int = 0, length: int | None = None) -> InductionPrompt:
    """``patching.corrupted_pair``'s first sequence, less its last token, of segments of ``length`` tokens (the
    scored length, ``eval_length``, unless told; ``prompt_length`` shortens it for a large model)."""
    length = length or eval_length(n_ctx)
    clean, corrupted = (tokens[0].tolist() for tokens in corrupted_pair(d_vocab, length, 1, seed))
    right = clean[-1]
    wrong = next((t for t in reversed(corrupted[1:length + 1]) if t != right), (right + 1) % d_vocab)
    return InductionPrompt(tuple(clean[:-1]), tuple(corrupted[:-1]), Metric(right, wrong))


def players(model: Transformer) -> tuple[str, ...]:
    """The players in their order: the direct path, then layer by layer its heads ("L0H1") and its MLP ("L0 MLP")."""
    cfg, names = model.cfg, [DIRECT_PATH]
    for layer in range(cfg.n_layers):
        names += [head_label(layer, head) for head in range(cfg.n_heads)]
        names += [] if cfg.attn_only else [f"L{layer} MLP"]
    return tuple(names)


@dataclass(frozen=True)
class HeadGame:
    """One prediction as a game over the model's components: what each player writes, and what replaces it."""

    model: Transformer
    tokens: Tensor            # [1 pos]
    metric: Metric            # its token named
    players: tuple[str, ...]
    heads: Tensor             # [layer head] each head's player index
    mlps: tuple[int, ...]     # each layer's MLP's player index (empty: attention-only)
    z_absent: Tensor          # [layer pos head d_head] a head's z when it is absent
    mlp_absent: Tensor        # [layer pos d_model] an MLP's output (b_out included) when it is absent
    writes: Tensor            # [player d_model] float64: each player's write at the last position less its baseline's
    resid: Tensor             # [d_model] float64: the full run's final residual at the last position
    scale: Tensor | None      # [1] float64: the full run's final LayerNorm scale there; None without LayerNorm
    baseline: str             # what "absent" means, in words
    baseline_rows: int        # sequences the baseline's own run took (0 for "zero")


def _embedded(model: Transformer, cache: Cache) -> Tensor:
    """What the embeddings write into the residual stream: [batch pos d_model] (shortformer: the tokens alone)."""
    return cache["hook_embed"] + (cache["hook_pos_embed"] if model.cfg.positional == "standard" else 0)


def _text_windows(model: Transformer) -> tuple[Tensor, str]:
    """MEAN_BATCH windows [batch length] of the held-out built-in text in the model's tokenizer, each after <bos>,
    spread evenly over it; random ids from seed 0 for a model with no tokenizer. With how they were drawn, in words."""
    length = min(model.cfg.n_ctx, MEAN_LENGTH)
    tokenizer = model.tokenizer
    if tokenizer is None:
        ids = [random_ids(model.cfg.d_vocab, length, seed) for seed in range(MEAN_BATCH)]
        return torch.tensor(ids), f"{MEAN_BATCH} sequences of {length} random ids (the model has no tokenizer)"
    stream = tokenizer.encode(builtin_text("heldout"))
    starts = np.linspace(0, len(stream) - length, MEAN_BATCH).astype(int)
    ids = [[bos_id(tokenizer), *stream[s:s + length - 1]] for s in starts]
    return torch.tensor(ids), f"{MEAN_BATCH} windows of {length} tokens of the held-out built-in text"


def _absent_cache(model: Transformer, tokens: Tensor, baseline: str, corrupted: tuple[int, ...] | None
                  ) -> tuple[Cache, str, int]:
    """The run whose activations replace absent players' (mean: averaged over its batch and positions), what the
    baseline is in words, and its rows."""
    if baseline == "resample":
        if corrupted is None or len(corrupted) != tokens.shape[1]:
            raise ValueError(f"the resample baseline needs a corrupted input of the prompt's {tokens.shape[1]} tokens")
        return model.run_with_cache(torch.tensor([corrupted]))[1], "each player's output on the corrupted input", 1
    windows, words = _text_windows(model)
    cache = model.run_with_cache(windows)[1]
    return ({name: value.mean((0, 1), keepdim=True) for name, value in cache.items()},
            f"each player's mean output over {words}", len(windows))


@torch.inference_mode()
def head_game(model: Transformer, ids: tuple[int, ...], metric: Metric, baseline: str = "zero",
              corrupted: tuple[int, ...] | None = None) -> HeadGame:
    """The game of one prediction: the full run, and every player's output on ``baseline`` (see the module)."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline={baseline!r}; choose one of {', '.join(BASELINES)}")
    cfg, tokens = model.cfg, torch.tensor([ids])
    logits, cache = model.run_with_cache(tokens)
    names, pos = players(model), len(ids)
    index = {name: i for i, name in enumerate(names)}
    heads = torch.tensor([[index[head_label(layer, head)] for head in range(cfg.n_heads)] for layer in range(cfg.n_layers)],
                         dtype=torch.long).reshape(cfg.n_layers, cfg.n_heads)
    mlps = () if cfg.attn_only else tuple(index[f"L{layer} MLP"] for layer in range(cfg.n_layers))
    zeros = {"z": logits.new_zeros(cfg.n_layers, pos, cfg.n_heads, cfg.d_head),
             "mlp": logits.new_zeros(cfg.n_layers * (not cfg.attn_only), pos, cfg.d_model),
             "embedded": logits.new_zeros(pos, cfg.d_model)}
    if baseline == "zero":
        absent, words, rows = zeros, "zero output", 0
    else:
        other, words, rows = _absent_cache(model, tokens, baseline, corrupted)
        absent = {"z": torch.stack([other[f"blocks.{layer}.attn.hook_z"][0].expand(pos, -1, -1)
                                    for layer in range(cfg.n_layers)]) if cfg.n_layers else zeros["z"],
                  "mlp": torch.stack([other[f"blocks.{layer}.hook_mlp_out"][0].expand(pos, -1)
                                      for layer in range(cfg.n_layers)]) if mlps else zeros["mlp"],
                  "embedded": _embedded(model, other)[0].expand(pos, -1)}
    writes = logits.new_zeros(len(names), cfg.d_model, dtype=torch.float64)     # [player d_model]
    writes[0] = (_embedded(model, cache)[0, -1] - absent["embedded"][-1]).double()
    for layer, block in enumerate(model.blocks):
        result = cache[f"blocks.{layer}.attn.hook_result"][0, -1]                 # [head d_model]
        replaced = per_head_results(absent["z"][layer, -1:], block.attn.W_O)[0]  # [head d_model]
        writes[heads[layer]] = (result - replaced).double()
        if mlps:
            writes[mlps[layer]] = (cache[f"blocks.{layer}.hook_mlp_out"][0, -1] - absent["mlp"][layer, -1]).double()
    final = cache[f"blocks.{cfg.n_layers - 1}.hook_resid_post"] if cfg.n_layers else _embedded(model, cache)
    scale = cache["ln_final.hook_scale"][0, -1].double() if cfg.normalization == "LN" else None
    return HeadGame(model, tokens, metric.resolved(logits[0, -1]), names, heads, mlps, absent["z"], absent["mlp"],
                    writes, final[0, -1].double(), scale, words, rows)


def final_norm(model: Transformer, resid: Tensor, scale: Tensor | None = None) -> Tensor:
    """The final LayerNorm on resid [c d_model] (nothing without one): centre, divide by ``scale`` (the full run's,
    frozen, in the direct game) or by the stream's own √(mean(x²) + ε), then · w + b."""
    if model.cfg.normalization != "LN":
        return resid
    centred = resid - resid.mean(-1, keepdim=True)
    scale = (centred.pow(2).mean(-1, keepdim=True) + LN_EPS).sqrt() if scale is None else scale
    return centred / scale * model.ln_final.w.to(resid.dtype) + model.ln_final.b.to(resid.dtype)


def _direct_values(game: HeadGame, present: Tensor) -> Tensor:
    """v of each coalition present [c player] in the direct game: the absent players' writes taken out of the full
    run's final residual, read out through its frozen LayerNorm scale, in float64. [c]"""
    absent = (~present).to(game.writes)                                         # [c player]
    resid = game.resid - absent @ game.writes                                    # [c d_model]
    return game.metric.score(game.model, final_norm(game.model, resid, game.scale))


def _total_values(game: HeadGame, present: Tensor) -> Tensor:
    """v of each coalition present [c player] in the total game: one forward pass per coalition, each absent head's
    z and MLP's output patched with its baseline's, the direct path taken out of the final residual. [c] float64"""
    model, absent = game.model, ~present.to(game.writes.device)                 # [c player]
    patch = {}
    for layer in range(model.cfg.n_layers):
        patch[f"blocks.{layer}.attn.hook_z"] = (absent[:, game.heads[layer], None][:, None], game.z_absent[layer])
        if game.mlps:                                               # where: [c 1 head 1]; values: [pos head d_head]
            patch[f"blocks.{layer}.hook_mlp_out"] = (absent[:, game.mlps[layer], None, None], game.mlp_absent[layer])
    resid = model(game.tokens.expand(len(present), -1), patch=patch, stop_at_layer=model.cfg.n_layers)[:, -1]
    resid = resid - absent[:, :1] * game.writes[0].to(resid.dtype)              # [c d_model]
    return game.metric.score(model, final_norm(model, resid)).double()


def chunk_rows(model: Transformer, positions: int) -> int:
    """Coalitions one forward pass runs, one at least: as many as hold about as many MB of activations as the model
    has weights (each batch reads every weight once), from CHUNK_MB_MIN to CHUNK_MB_MAX. A small model's batch is
    faster small (its activations stay in the caches): on 2 cores, the exact game on gelu-2l took 0.48 s in 64 MB
    batches, 0.77 s in 512 MB ones, while GPT-2 small's sampled game took 10.0 s in 512 MB batches and 17.7 s in
    64 MB ones. A server holds a batch's MB under its budget while it runs (``shapley_mb``)."""
    weights_mb = model.cfg.n_params() * 4 / 1e6
    return max(1, int(min(max(weights_mb, CHUNK_MB_MIN), CHUNK_MB_MAX) // model.cfg.activations_mb(1, positions)))


def coalition_values(game: HeadGame, kind: str, present: Tensor) -> Tensor:
    """v of each coalition present [c player] (bool) in game ``kind`` ("direct" or "total"): [c] float64."""
    if kind not in GAMES:
        raise ValueError(f"game={kind!r}; choose one of {', '.join(GAMES)}")
    value = _direct_values if kind == "direct" else _total_values
    return torch.cat([value(game, chunk) for chunk in present.split(chunk_rows(game.model, game.tokens.shape[1]))]).cpu()


def coalitions(n: int) -> Tensor:
    """Every coalition of n players: [2^n n] bool, row k holding player i when bit i of k is set."""
    return (torch.arange(2**n)[:, None] >> torch.arange(n)) & 1 == 1


def _sizes(n: int) -> np.ndarray:
    """|S| of every coalition, in ``coalitions``' order: [2^n]."""
    index = np.arange(2**n)
    return sum((index >> i) & 1 for i in range(n))


def exact_shapley(values: np.ndarray, n: int) -> np.ndarray:
    """φ_i = Σ_{S ∌ i} |S|!(n−|S|−1)!/n! · (v(S ∪ {i}) − v(S)), from v of every coalition [2^n] (``coalitions``'
    order): [n]."""
    index, sizes = np.arange(2**n), _sizes(n)
    weight = np.array([factorial(s) * factorial(n - s - 1) / factorial(n) for s in range(n)])
    phi = np.empty(n)
    for i in range(n):
        without = index[(index >> i) & 1 == 0]                                  # S ∌ i
        phi[i] = weight[sizes[without]] @ (values[without | 1 << i] - values[without])
    return phi


def exact_interaction(values: np.ndarray, n: int, i: int, j: int) -> float:
    """I_ij = Σ_{S ⊆ N∖{i,j}} |S|!(n−|S|−2)!/(n−1)! · (v(S∪{i,j}) − v(S∪{i}) − v(S∪{j}) + v(S)), from v of every
    coalition [2^n]."""
    if i == j:
        raise ValueError("an interaction is between two different players")
    index = np.arange(2**n)
    without = index[((index >> i) & 1 == 0) & ((index >> j) & 1 == 0)]          # S ∌ i, j
    weight = np.array([factorial(s) * factorial(n - s - 2) / factorial(n - 1) for s in range(n - 1)])
    both, one, other = without | 1 << i | 1 << j, without | 1 << i, without | 1 << j
    return float(weight[_sizes(n)[without]] @ (values[both] - values[one] - values[other] + values[without]))


def sampled_shapley(value: Callable[[Tensor], Tensor], n: int, permutations: int, seed: int = 0
                    ) -> tuple[np.ndarray, np.ndarray, float, float, int]:
    """Permutation sampling: in each of ``permutations`` random orderings, what each player adds to the players
    before it; φ is their mean, its standard error their standard deviation / √permutations. ``value`` maps
    coalitions [c n] (bool) to v [c]. (φ [n], standard error [n], v(∅), v(N), coalitions evaluated)."""
    if permutations < 2:
        raise ValueError(f"permutations={permutations}: a standard error needs two orderings at least")
    generator = torch.Generator().manual_seed(seed)
    order = torch.stack([torch.randperm(n, generator=generator) for _ in range(permutations)])   # [perm step]
    joins = order.argsort(1)                                                     # [perm player]: the step it joins at
    prefixes = joins[:, None, :] < torch.arange(1, n)[None, :, None]             # [perm k player]: the first k, k < n
    empty, full = value(torch.stack([torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool)])).double()
    inner = value(prefixes.flatten(0, 1)).double().reshape(permutations, n - 1)  # [perm k]
    chain = torch.cat([empty.expand(permutations, 1), inner, full.expand(permutations, 1)], 1)  # [perm k=0…n]
    added = chain.diff(dim=1).gather(1, joins)                                   # [perm player]
    return (added.mean(0).numpy(), (added.std(0) / permutations**0.5).numpy(), float(empty), float(full),
            permutations * (n - 1) + 2)


def sampled_interaction(value: Callable[[Tensor], Tensor], n: int, i: int, j: int, samples: int, seed: int = 0
                        ) -> tuple[float, float, int]:
    """I_ij by sampling: in a random ordering of the other players and the pair as one, S is what comes before the
    pair, drawn with I_ij's weight |S|!(n−|S|−2)!/(n−1)!; the mean of v(S∪{i,j}) − v(S∪{i}) − v(S∪{j}) + v(S).
    (I_ij, its standard error, coalitions evaluated)."""
    if i == j or samples < 2:
        raise ValueError("an interaction is between two different players, sampled twice at least")
    generator = torch.Generator().manual_seed(seed)
    others = torch.tensor([k for k in range(n) if k not in (i, j)])
    before = torch.zeros(samples, n, dtype=torch.bool)                           # [sample player]: S
    for row in range(samples):
        place = int(torch.randint(n - 1, (1,), generator=generator))             # the pair's place among n − 1
        before[row, others[torch.randperm(n - 2, generator=generator)[:place]]] = True
    one, other = before.clone(), before.clone()
    one[:, i], other[:, j] = True, True
    v = value(torch.cat([one | other, one, other, before])).double().reshape(4, samples)
    terms = v[0] - v[1] - v[2] + v[3]
    return float(terms.mean()), float(terms.std() / samples**0.5), 4 * samples


@dataclass(frozen=True)
class GameValues:
    """One game's Shapley values over the players."""

    game: str                    # "direct" or "total"
    values: np.ndarray           # [player] φ
    standard_errors: np.ndarray  # [player] permutation sampling's standard errors; zeros when exact
    full: float                  # v(N): the model's own metric on the prompt
    empty: float                 # v(∅): every player removed
    evaluations: int             # coalitions evaluated (total: forward passes; direct: read-outs of one residual)
    exact: bool                  # every coalition evaluated (else orderings sampled)
    efficiency: Check            # Σφ against v(N) − v(∅)


def _play(game: HeadGame, kind: str, permutations: int | None, seed: int) -> GameValues:
    """Game ``kind``'s values: every coalition with up to EXACT_MAX players and no ``permutations`` asked, else
    permutation sampling (PERMUTATIONS orderings unless told)."""
    n = len(game.players)
    value = lambda present: coalition_values(game, kind, present)
    tolerance = EFFICIENCY_TOLERANCE[str(game.model.embed.W_E.dtype).removeprefix("torch.")]
    exact = permutations is None and n <= EXACT_MAX
    if exact:
        v = value(coalitions(n)).numpy()
        phi = exact_shapley(v, n)
        errors, empty, full, evaluations = np.zeros(n), float(v[0]), float(v[-1]), 2**n
    else:
        phi, errors, empty, full, evaluations = sampled_shapley(value, n, permutations or PERMUTATIONS, seed)
    efficiency = compare(torch.tensor([phi.sum()], dtype=torch.float64), torch.tensor([full - empty], dtype=torch.float64),
                         tolerance)
    return GameValues(kind, phi, errors, full, empty, evaluations, exact, efficiency)


@dataclass(frozen=True)
class HeadShapley:
    """Shapley values of every component in both games, and the verdicts a page states."""

    players: tuple[str, ...]
    metric: str              # the metric, in words
    baseline: str            # what "absent" means, in words
    direct: GameValues
    total: GameValues
    forward_passes: int      # sequences run through the model: the full run, the baseline's, the total game's
    seconds: float           # wall time of the whole experiment
    share_max: float         # COMPOSITION_DIRECT_SHARE

    @property
    def top_direct(self) -> str:
        """The player with the most credit in the direct game."""
        return self.players[int(np.argmax(self.direct.values))]

    @property
    def top_total(self) -> str:
        """The player with the most credit in the total game."""
        return self.players[int(np.argmax(self.total.values))]

    @property
    def gaps(self) -> np.ndarray:
        """[player] total − direct: the credit a player gets through what later components do with its output."""
        return self.total.values - self.direct.values

    @property
    def largest_gap(self) -> tuple[str, float]:
        """The player whose credit differs most between the games, and total − direct."""
        k = int(np.argmax(np.abs(self.gaps)))
        return self.players[k], float(self.gaps[k])

    @property
    def top_total_head(self) -> str:
        """The head with the most credit in the total game."""
        heads = [k for k, name in enumerate(self.players) if name.startswith("L") and "MLP" not in name]
        return self.players[max(heads, key=lambda k: self.total.values[k])] if heads else ""

    @property
    def works_through_composition(self) -> bool:
        """The head with the most total credit has positive total credit and a direct credit of at most share_max of
        it: what it does counts through the components that read it, not through the logits it writes."""
        if not self.top_total_head:
            return False
        k = self.players.index(self.top_total_head)
        return self.total.values[k] > 0 and self.direct.values[k] <= self.share_max * self.total.values[k]

    @property
    def pair(self) -> tuple[str, str]:
        """The circuit the games point to, (sender, receiver): the receiver is the head after the first layer with
        the most direct-game credit (it writes the prediction), the sender the head in an earlier layer whose
        total-game credit exceeds its direct credit the most (what it is worth reaches the logits through later
        heads). On attn-only-2l: L0H1 → L1H3 on seeds 0–3, the strongest K path patching finds. ("", "") without
        two layers of heads."""
        layer = {k: int(name[1:].split("H")[0]) for k, name in enumerate(self.players)
                 if name != DIRECT_PATH and not name.endswith("MLP")}
        later = [k for k in layer if layer[k] > 0]
        if not later:
            return "", ""
        receiver = max(later, key=lambda k: self.direct.values[k])
        sender = max((k for k in layer if layer[k] < layer[receiver]), key=lambda k: self.gaps[k])
        return self.players[sender], self.players[receiver]

    @property
    def passed(self) -> bool:
        """Efficiency holds in both games."""
        return self.direct.efficiency.passed and self.total.efficiency.passed


def _coalition_count(n: int, permutations: int | None) -> int:
    """Coalitions one game evaluates: 2^n exact; sampled, each ordering's n − 1 inner prefixes, and ∅ and N once."""
    return 2**n if permutations is None and n <= EXACT_MAX else (permutations or PERMUTATIONS) * (n - 1) + 2


def _baseline_rows(baseline: str) -> int:
    return {"zero": 0, "mean": MEAN_BATCH, "resample": 1}.get(baseline, 0)


def shapley_evaluations(model: Transformer, ids: tuple[int, ...], metric: Metric, baseline: str = "zero",
                        corrupted: tuple[int, ...] | None = None, permutations: int | None = None, seed: int = 0) -> int:
    """The sequences ``shapley`` with these arguments runs through the model, known before it runs (a caller may
    refuse a million): the full run, the baseline's run, and one per coalition of the total game (the direct game
    reads its coalitions off the full run)."""
    return 1 + _baseline_rows(baseline) + _coalition_count(len(players(model)), permutations)


def _game_mb(model: Transformer, ids: tuple[int, ...], baseline: str, coalition_count: int) -> float:
    """What a game on ``ids`` holds beside the weights, in MB: the full run's cache, the baseline run's, and the
    largest batch of coalitions' forward pass (``chunk_rows`` of them at most: their activations, at most)."""
    cfg, pos = model.cfg, len(ids)
    baseline_mb = {"zero": 0.0, "mean": cfg.activations_mb(MEAN_BATCH, min(cfg.n_ctx, MEAN_LENGTH)),
                   "resample": cfg.activations_mb(1, pos)}.get(baseline, 0.0)
    return cfg.activations_mb(1, pos) + baseline_mb + cfg.activations_mb(min(chunk_rows(model, pos), coalition_count), pos)


def shapley_mb(model: Transformer, ids: tuple[int, ...], metric: Metric | None = None, baseline: str = "zero",
               corrupted: tuple[int, ...] | None = None, permutations: int | None = None, seed: int = 0) -> float:
    """What ``shapley`` holds beside the weights, in MB (``_game_mb``)."""
    return _game_mb(model, ids, baseline, _coalition_count(len(players(model)), permutations))


@costs(shapley_mb, "Shapley values of every head, MLP and the direct path, in both games")
@torch.inference_mode()
def shapley(model: Transformer, ids: tuple[int, ...], metric: Metric, baseline: str = "zero",
            corrupted: tuple[int, ...] | None = None, permutations: int | None = None, seed: int = 0) -> HeadShapley:
    """Both games' Shapley values on the prediction at the last of ``ids`` (see the module): exact up to EXACT_MAX
    players unless ``permutations`` is given; sampled orderings from ``seed`` otherwise."""
    start = time.perf_counter()
    game = head_game(model, ids, metric, baseline, corrupted)
    direct, total = (_play(game, kind, permutations, seed) for kind in GAMES)
    return HeadShapley(game.players, game.metric.label, game.baseline, direct, total,
                       1 + game.baseline_rows + total.evaluations, time.perf_counter() - start, COMPOSITION_DIRECT_SHARE)


def shapley_cost(model: Transformer, positions: int, baseline: str = "zero", permutations: int | None = None) -> float:
    """The stated cost of ``shapley`` on a prompt of ``positions`` tokens: its forward passes
    (``shapley_evaluations``; the baseline's rows counted at the prompt's length) × positions × the model's
    parameters (``ModelConfig.n_params``)."""
    passes = 1 + _baseline_rows(baseline) + _coalition_count(len(players(model)), permutations)
    return float(passes) * positions * model.cfg.n_params()


def permutations_within(model: Transformer, positions: int, baseline: str = "zero", cap: float = COST_MAX
                        ) -> int | None:
    """What ``shapley``'s ``permutations`` may be so that its cost (``shapley_cost``) stays within ``cap``: None when
    every coalition fits (up to EXACT_MAX players), else the most orderings that fit, PERMUTATIONS at most; below 2
    when not even two fit (no standard error): the caller refuses."""
    n = len(players(model))
    if n <= EXACT_MAX and shapley_cost(model, positions, baseline) <= cap:
        return None
    passes = int(cap // (positions * model.cfg.n_params())) - 1 - _baseline_rows(baseline) - 2  # ∅ and N, once
    return max(0, min(PERMUTATIONS, passes // max(1, n - 1)))


def prompt_length(model: Transformer, cap: float = COST_MAX) -> int:
    """The induction prompt's segment length for ``model``: the scored length (``eval_length``), or, where the zero
    baseline's game there fits fewer than PERMUTATIONS orderings within ``cap``, the longest shorter one where they
    fit, induction.MIN_LENGTH at the least (where it may still fit fewer; the scored length when that is shorter)."""
    scored = eval_length(model.cfg.n_ctx)
    for length in range(scored, MIN_LENGTH - 1, -1):
        fitting = permutations_within(model, 2 * length, "zero", cap)  # <bos> r r[:-1]: 2 · length positions
        if fitting is None or fitting >= PERMUTATIONS:
            return length
    return min(MIN_LENGTH, scored)


@costs(residual.ledger_mb, "direct logit attribution of every component")
def player_attribution(model: Transformer, ids: tuple[int, ...], metric: Metric) -> np.ndarray:
    """Direct logit attribution (``residual.attribution``) of the logit difference ``metric`` at the last of ``ids``,
    gathered as the game's players [player]: the direct path is the token and positional embeddings, an MLP its
    output with its bias; the other biases are no players."""
    if not metric.linear:
        raise ValueError("direct logit attribution shares out a logit difference: Metric(right, wrong)")
    dla = residual.attribution(model, ids, len(ids) - 1, metric.right, metric.wrong)
    share = dict(zip(dla.labels, dla.shares))
    return np.array([share.get("embed", 0.0) + share.get("pos_embed", 0.0) if player == DIRECT_PATH
                     else share[player] + share.get(f"{player} bias", 0.0) if player.endswith("MLP")
                     else share[player] for player in players(model)])


def direct_game_check_mb(model: Transformer, ids: tuple[int, ...], *_) -> float:
    """What ``direct_game_check`` holds beside the weights, in MB: the game's full run and the attribution's ledger."""
    return model.cfg.activations_mb(1, len(ids)) + residual.ledger_mb(model, ids)


@costs(direct_game_check_mb, "the direct game against direct logit attribution")
@torch.inference_mode()
def direct_game_check(model: Transformer, ids: tuple[int, ...], metric: Metric, permutations: int | None = None,
                      seed: int = 0) -> Check:
    """The direct game's φ with the zero baseline on the logit difference ``metric`` against direct logit
    attribution (``player_attribution``), player by player, within DIRECT_GAME_TOLERANCE of the model's dtype: the
    game is additive there, so efficiency and additivity force φ to be each player's direct write. The game is
    exact up to EXACT_MAX players unless ``permutations`` is given; sampled, every ordering gives the same values.
    It needs no forward pass beyond the full run's: the direct game reads its coalitions off the final residual."""
    dla = player_attribution(model, ids, metric)
    values = _play(head_game(model, ids, metric), "direct", permutations, seed).values
    tolerance = DIRECT_GAME_TOLERANCE[str(model.embed.W_E.dtype).removeprefix("torch.")]
    return compare(torch.from_numpy(values), torch.from_numpy(dla), tolerance)


@dataclass(frozen=True)
class Interaction:
    """The Shapley interaction index of two players in one game."""

    first: str
    second: str
    game: str                # "direct" or "total"
    value: float             # I_ij: > 0 when they are worth more together than apart
    standard_error: float    # 0 when exact
    worth: float             # v(N) − v(∅): the whole game's worth, for scale
    evaluations: int         # coalitions evaluated
    exact: bool

    @property
    def share(self) -> float:
        """I_ij as a share of the whole game's worth (NaN when it is worth nothing)."""
        return self.value / self.worth if self.worth else float("nan")


def interaction_evaluations(model: Transformer, ids: tuple[int, ...], metric: Metric, first: str, second: str,
                            game: str = "total", baseline: str = "zero", corrupted: tuple[int, ...] | None = None,
                            samples: int | None = None, seed: int = 0) -> int:
    """The coalitions ``interaction`` evaluates, known before it runs: 2^n exact; sampled, 4 per sample and the
    empty and full ones."""
    n = len(players(model))
    return 2**n if samples is None and n <= EXACT_MAX else 4 * (samples or PERMUTATIONS) + 2


def interaction_mb(model: Transformer, ids: tuple[int, ...], metric: Metric | None = None, first: str = "",
                   second: str = "", game: str = "total", baseline: str = "zero",
                   corrupted: tuple[int, ...] | None = None, samples: int | None = None, seed: int = 0) -> float:
    """What ``interaction`` holds beside the weights, in MB (``_game_mb``)."""
    return _game_mb(model, ids, baseline, interaction_evaluations(model, ids, metric, first, second, samples=samples))


@costs(interaction_mb, "the Shapley interaction index of two components")
@torch.inference_mode()
def interaction(model: Transformer, ids: tuple[int, ...], metric: Metric, first: str, second: str,
                game: str = "total", baseline: str = "zero", corrupted: tuple[int, ...] | None = None,
                samples: int | None = None, seed: int = 0) -> Interaction:
    """I of players ``first`` and ``second`` (labels of ``players``) on the prediction at the last of ``ids``: exact
    over every coalition up to EXACT_MAX players unless ``samples`` is given, else sampled (PERMUTATIONS unless told)."""
    state = head_game(model, ids, metric, baseline, corrupted)
    unknown = {first, second} - set(state.players)
    if unknown:
        raise ValueError(f"no player named {', '.join(sorted(unknown))}; choose from {', '.join(state.players)}")
    n, i, j = len(state.players), state.players.index(first), state.players.index(second)
    value = lambda present: coalition_values(state, game, present)
    if samples is None and n <= EXACT_MAX:
        v = value(coalitions(n)).numpy()
        return Interaction(first, second, game, exact_interaction(v, n, i, j), 0.0, float(v[-1] - v[0]), 2**n, True)
    estimate, error, evaluations = sampled_interaction(value, n, i, j, samples or PERMUTATIONS, seed)
    ends = value(torch.stack([torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool)]))
    return Interaction(first, second, game, estimate, error, float(ends[1] - ends[0]), evaluations + 2, False)


@dataclass(frozen=True)
class Together:
    """Whether two players "work only together" in one game: their interaction, beside their own credit."""

    interaction: Interaction
    credit: float        # φ_i + φ_j in the interaction's game
    share_min: float     # TOGETHER_SHARE_MIN
    nats_min: float      # TOGETHER_MIN
    bar: float           # what I_ij must clear for its sampling error: one-sided 95 % of its standard error (0 exact)

    @property
    def share(self) -> float:
        """I_ij as a share of the pair's own credit (NaN when the pair has none)."""
        return self.interaction.value / self.credit if self.credit > 0 else float("nan")

    @property
    def passed(self) -> bool:
        """I_ij clears its sampling error, is at least nats_min, and at least share_min of a positive credit."""
        value = self.interaction.value
        return self.credit > 0 and value > self.bar and value >= self.nats_min and value >= self.share_min * self.credit


def together(pair: Interaction, game: HeadShapley) -> Together:
    """The verdict on ``pair`` (``interaction``'s result) with the two players' credit from ``game`` (``shapley``'s
    result on the same prediction, baseline and metric), in the interaction's game."""
    values = dict(zip(game.players, getattr(game, pair.game).values))
    return Together(pair, float(values[pair.first] + values[pair.second]), TOGETHER_SHARE_MIN, TOGETHER_MIN,
                    above_random_bar(0.0, pair.standard_error, 1))
