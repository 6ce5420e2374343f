"""The Equivalence page's experiment: concat-then-project equals project-per-head-then-sum.

W_O is H row blocks of size d_head × d_model stacked: row r of the concatenated W_O is row
r mod d_head of head r // d_head's block. So concat(z_1 … z_H) @ W_O = Σ_h z_h @ W_O[h]. The block
check reads the concatenated matrix off ``attention.concat_then_project`` itself (its output for unit
inputs), so it fails if that function stacked the blocks in another order than the one it concatenates z in.
``run`` builds random weights from a seed, computes both readings in float32 and float64 and
returns plain values (numbers, numpy arrays) that a cache can keep; ``element`` takes one output element
R[i, j] apart into its D terms and H per-head partial sums (seed 000's R₁,₁ argument), from what ``run`` kept.
The question helpers (``difference_bucket`` …) turn a run's numbers into the answer a page reveals.
"""

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from einops import rearrange

from mechlib import attention
from mechlib.checks import TOLERANCE, Check, compare, tolerance_for
from mechlib.config import ModelConfig
from mechlib.device import DEVICE, costs, median_ms, to_numpy

__all__ = ["SEED_SIZES", "EMBEDDING_MAX", "EquivalenceResult", "ElementSum", "steps", "estimate_mb", "lookup_mb", "peak_mb", "run",
           "wo_row_owner", "concatenated_W_O", "wo_block_check", "element", "DIFFERENCES", "difference_bucket",
           "scores_shape_options", "row_owner_options", "LENGTHS", "output_length", "largest_partial"]

SEED_SIZES = {"batch": 1, "seq": 20, "d_vocab": 50_000, "d_model": 512, "n_heads": 8}
LOOKUP_MAX_MACS = 2e9  # the one-hot product's multiply-adds allowed per request (about a second on 2 cores)
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class EquivalenceResult:
    checks: dict[str, Check]          # dtype name -> concat vs per-head-sum, at that precision
    time_ms: dict[str, float]         # reading -> median time in the chosen dtype
    lookups: dict[str, Check | None]  # dtype name -> one-hot @ W_E vs W_E[tokens]; None where it would not fit
    lookup_mb: dict[str, float]       # dtype name -> memory the one-hot check needs
    head_norms: np.ndarray            # [head] ‖result_h‖ at the chosen position
    head_results: np.ndarray          # [head, d_model] result_h at the chosen position
    attn_out: np.ndarray              # [d_model] concat-then-project at the chosen position
    position_check: Check             # Σ_h result_h vs attn_out at the chosen position
    wo_block_check: Check             # rows of the W_O concat_then_project multiplies vs the per-head blocks W_O[h]
    z: np.ndarray                     # [pos head d_head] the heads' outputs, batch item 0, in the run's dtype
    W_O: np.ndarray                   # [head d_head d_model] in the run's dtype
    out: np.ndarray                   # [pos d_model] concat-then-project, batch item 0, in the run's dtype


@dataclass(frozen=True)
class ElementSum:
    """One output element R[i, j] taken apart: its D terms, their H per-head partial sums, and their total."""

    terms: np.ndarray         # [d_model] h[i, k] W_O[k, j] for each k of the concatenated heads
    partial_sums: np.ndarray  # [head] Σ of head h's d_head terms
    per_head: np.ndarray      # [head] head h's per-head result (z_h W_O^h) at [i, j]
    total: float              # Σ_h partial_sums[h]
    output: float             # R[i, j] as the layer computed it (concat-then-project)
    check: Check              # total against output, at the run's precision


def _shape(*sizes: int) -> str:
    return " × ".join(f"{size:,}" for size in sizes)


def steps(batch: int, seq: int, d_vocab: int, d_model: int, n_heads: int) -> list[dict[str, str]]:
    """Seed 000's step table, numbered as the reading numbers it, with live shapes: "as the reading writes it"
    shows one head where the reading does (H = 1 at steps 5–7 and 8′), "all heads" the whole tensor. Step 6a
    (scale, mask, softmax) is not in the reading; 8′ and 9′ are its additive reading's two last steps."""
    B, S, V, D, H, L = batch, seq, d_vocab, d_model, n_heads, d_model // n_heads
    rows = [  # step, operation, symbols, as the reading writes it, all heads, in the reading?
        ("1", "one-hot input", "B × S × V", _shape(B, S, V), _shape(B, S, V), "yes"),
        ("2", "× W_E (V × D): embeddings", "B × S × D", _shape(B, S, D), _shape(B, S, D), "yes"),
        ("3", "+ W_pos (S × D, learned): positions", "B × S × D", _shape(B, S, D), _shape(B, S, D), "yes"),
        ("4", "copy into Q, K and V", "B × S × D", _shape(B, S, D), _shape(B, S, D), "yes"),
        ("5", "× W_Q, W_K, W_V (D × d_head, one per head): Q, K, V", "B × H × S × d_head", _shape(B, 1, S, L),
         _shape(B, H, S, L), "yes"),
        ("6", "Q Kᵀ per head: scores", "B × H × S × S", _shape(B, 1, S, S), _shape(B, H, S, S), "yes"),
        ("6a", "÷ √d_head, causal mask, softmax: pattern", "B × H × S × S", _shape(B, 1, S, S), _shape(B, H, S, S),
         "no: added here (the reading skips scaling and masking)"),
        ("7", "pattern · V per head: z", "B × H × S × d_head", _shape(B, 1, S, L), _shape(B, H, S, L), "yes"),
        ("8", "concat: the heads' z side by side", "B × S × D", _shape(B, S, D), _shape(B, S, D), "yes"),
        ("9", "× W_O (D × D)", "B × S × D", _shape(B, S, D), _shape(B, S, D), "yes"),
        ("8′", "no concat: × each head's W_O block (d_head × D)", "B × S × H × D", _shape(B, S, 1, D),
         _shape(B, S, H, D), "yes: the additive reading"),
        ("9′", "sum over H", "B × S × D", _shape(B, S, D), _shape(B, S, D), "yes: the additive reading"),
    ]
    keys = ("step", "operation", "symbols", "as the reading writes it", "all heads", "in the reading?")
    return [dict(zip(keys, row)) for row in rows]


def estimate_mb(batch: int, seq: int, d_vocab: int, d_model: int, n_heads: int) -> float:
    """Peak memory of ``run`` without the one-hot checks, in MB: the float32 weights (W_E's whole table dominates:
    206 MB for any V and D), and at
    8 bytes a number one precision's embeddings, q/k/v/z, scores and pattern, both outputs, weights,
    plus the chosen precision's outputs kept while the other runs."""
    B, S, V, D, H = batch, seq, d_vocab, d_model, n_heads
    weights = 4 * (EMBEDDING_MAX[0] * EMBEDDING_MAX[1] + S * D + 4 * D * D)
    one_run = 8 * (6 * B * S * D + 2 * B * H * S * S + B * S * H * D + 4 * D * D)
    kept = 8 * (B * S * H * D + B * S * D)
    return (weights + one_run + kept) / 1e6


def lookup_mb(batch: int, seq: int, d_vocab: int, d_model: int, dtype: str) -> float:
    """Extra memory of the one-hot check in ``dtype``: the one-hot input, W_E cast to it, the product."""
    size = DTYPES[dtype].itemsize
    cast = d_vocab * d_model * size if dtype != "float32" else 0
    return (batch * seq * d_vocab * size + cast + batch * seq * d_model * size) / 1e6


def _lookup_runs(batch: int, seq: int, d_vocab: int, d_model: int, n_heads: int, dtype: str, memory_mb: float) -> bool:
    """Whether ``run`` checks the one-hot product in ``dtype``: within ``memory_mb`` and ``LOOKUP_MAX_MACS``."""
    fits = estimate_mb(batch, seq, d_vocab, d_model, n_heads) + lookup_mb(batch, seq, d_vocab, d_model, dtype) <= memory_mb
    return fits and batch * seq * d_vocab * d_model <= LOOKUP_MAX_MACS


def peak_mb(batch: int, seq: int, d_vocab: int, d_model: int, n_heads: int, memory_mb: float = math.inf) -> float:
    """Peak memory of ``run`` in MB: ``estimate_mb`` plus the larger one-hot check it makes within ``memory_mb``."""
    checks = [lookup_mb(batch, seq, d_vocab, d_model, name) for name in DTYPES
              if _lookup_runs(batch, seq, d_vocab, d_model, n_heads, name, memory_mb)]
    return estimate_mb(batch, seq, d_vocab, d_model, n_heads) + max(checks, default=0.0)


def wo_row_owner(row: int | torch.Tensor, d_head: int) -> tuple[int | torch.Tensor, int | torch.Tensor]:
    """Row r of the concatenated W_O is row r mod d_head of head r // d_head's block."""
    return row // d_head, row % d_head


def concatenated_W_O(W_O: torch.Tensor) -> torch.Tensor:
    """The (head·d_head) × d_model matrix that ``attention.concat_then_project`` multiplies, read off the function:
    row r is its output for the concatenated z = e_r, i.e. z = 1 at head r // d_head, entry r mod d_head."""
    H, L, _ = W_O.shape
    unit = torch.eye(H * L, dtype=W_O.dtype, device=W_O.device).view(H * L, H, L)  # [(head d_head) head d_head]
    return attention.concat_then_project(unit, W_O)                                  # [(head d_head) d_model]


def wo_block_check(W_O: torch.Tensor, concatenated: torch.Tensor, tolerance: float) -> Check:
    """Row r of the concatenated W_O [(head d_head) d_model] against row r mod d_head of the per-head path's
    block W_O[r // d_head] ([head d_head d_model]), for every r."""
    rows = torch.arange(concatenated.shape[0], device=W_O.device)
    head, local = wo_row_owner(rows, W_O.shape[1])
    return compare(concatenated, W_O[head, local], tolerance)


def _readings(x: torch.Tensor, W_Q, W_K, W_V, W_O, dtype: torch.dtype):
    """z, W_O, concat-then-project [batch pos d_model] and per-head results [batch pos head d_model] in dtype."""
    x = x.to(DEVICE, dtype)                                        # [batch pos d_model]
    Wq, Wk, Wv, Wo = (w.to(DEVICE, dtype) for w in (W_Q, W_K, W_V, W_O))
    q, k, v = attention.qkv(x, Wq), attention.qkv(x, Wk), attention.qkv(x, Wv)  # [batch pos head d_head]
    z = attention.mix_values(attention.attention_pattern(attention.attention_scores(q, k)), v)
    return z, Wo, attention.concat_then_project(z, Wo), attention.per_head_results(z, Wo)


EMBEDDING_MAX = (50_257, 1_024)  # (d_vocab, d_model) of the table every W_E is cut from: GPT-2's vocabulary, its medium width


@functools.lru_cache(maxsize=1)
def _embedding_table(seed: int) -> torch.Tensor:
    """The float32 table [50,257 1,024] (206 MB) from ``seed``, drawn once and kept for the last seed asked, which
    most of a class shares: every size's W_E is its top-left corner. Drawn per size, W_E was the run's largest
    draw (25.6 million numbers at the seed sizes); a class moving the V and D sliders redrew it on nearly every
    move, a sixth of the server's time (py-spy, 30 students). Cut from one table, V and D also change nothing
    but the rows and columns they add or remove."""
    return torch.randn(*EMBEDDING_MAX, generator=torch.Generator().manual_seed(seed))


def _embedding(d_vocab: int, d_model: int, seed: int) -> torch.Tensor:
    """W_E [d_vocab d_model] from ``seed``: a read-only view of the table's top-left corner."""
    return _embedding_table(seed)[:d_vocab, :d_model]


@functools.lru_cache(maxsize=64)
@torch.inference_mode()
def _lookups(d_vocab: int, d_model: int, seed: int, tokens: tuple[tuple[int, ...], ...],
             dtypes: tuple[str, ...]) -> dict[str, Check | None]:
    """Step 1–2's check in each of ``dtypes`` (None in the others): the one-hot input [batch pos d_vocab] times
    W_E equals W_E's rows at the tokens. Nine tenths of a run's time (W_E cast to float64, a B·S·V·D product) for
    what depends on neither the heads, the precision shown nor the position, so it is kept for the last 64 token
    sets asked."""
    W_E, ids = _embedding(d_vocab, d_model, seed), torch.tensor(tokens, device=DEVICE)  # [d_vocab d_model], [batch pos]
    lookups = dict.fromkeys(DTYPES)
    for name in dtypes:
        W_E_d = W_E.to(DEVICE, DTYPES[name])                                            # [d_vocab d_model]
        one_hot = torch.zeros(*ids.shape, d_vocab, dtype=W_E_d.dtype, device=DEVICE).scatter_(
            -1, ids[..., None], 1.0)                                                    # [batch pos d_vocab]
        lookups[name] = compare(one_hot @ W_E_d, W_E_d[ids], TOLERANCE[name])
    return lookups


@costs(lambda batch, seq, d_vocab, d_model, n_heads, seed, dtype="float32", position=0, memory_mb=math.inf:
       peak_mb(batch, seq, d_vocab, d_model, n_heads, memory_mb), "this attention layer")
@torch.inference_mode()
def run(batch: int, seq: int, d_vocab: int, d_model: int, n_heads: int, seed: int,
        dtype: str = "float32", position: int = 0, memory_mb: float = math.inf) -> EquivalenceResult:
    """Both readings on the same random weights and tokens; see ``EquivalenceResult``. A one-hot check that would
    take the run past ``memory_mb`` (a server's budget) is skipped, and its entry in ``lookups`` is None."""
    cfg = ModelConfig(n_layers=1, d_model=d_model, n_heads=n_heads, d_vocab=d_vocab, n_ctx=seq, seed=seed)
    if not 1 <= batch <= 64:
        raise ValueError(f"batch={batch} is out of range; choose batch between 1 and 64")
    if d_vocab > EMBEDDING_MAX[0] or d_model > EMBEDDING_MAX[1]:
        raise ValueError(f"d_vocab={d_vocab}, d_model={d_model} exceed W_E's table; choose d_vocab ≤ "
                         f"{EMBEDDING_MAX[0]:,} and d_model ≤ {EMBEDDING_MAX[1]:,}")
    if not 0 <= position < seq:
        raise ValueError(f"position={position} is outside the sequence; choose 0 … {seq - 1}")
    H, D, L, V = n_heads, d_model, cfg.d_head, d_vocab

    W_E = _embedding(V, D, seed)                                   # [d_vocab d_model], shared: read only
    g = torch.Generator().manual_seed(seed + 1)  # the other weights' own stream: W_E is drawn once for all sizes
    W_pos = torch.randn(seq, D, generator=g)                       # [pos d_model]
    W_Q, W_K, W_V = (torch.randn(H, D, L, generator=g) / D**0.5 for _ in range(3))  # [head d_model d_head]
    W_O = torch.randn(H, L, D, generator=g) / D**0.5               # [head d_head d_model]
    tokens = torch.randint(0, V, (batch, seq), generator=g)        # [batch pos]

    lookup_sizes = {name: lookup_mb(batch, seq, d_vocab, d_model, name) for name in DTYPES}
    runs = tuple(name for name in DTYPES if _lookup_runs(batch, seq, V, D, H, name, memory_mb))
    lookups = dict(_lookups(V, D, seed, tuple(map(tuple, tokens.tolist())), runs))  # a copy: the cache's is shared

    checks = {}
    for name in sorted(DTYPES, key=lambda n: n == dtype):          # the chosen precision last, and kept
        z, Wo, concat, per_head = _readings(W_E[tokens] + W_pos, W_Q, W_K, W_V, W_O, DTYPES[name])
        checks[name] = compare(per_head.sum(-2), concat, TOLERANCE[name])

    time_ms = {"concat_then_project": median_ms(lambda: attention.concat_then_project(z, Wo)),
               "per_head_then_sum": median_ms(lambda: attention.per_head_results(z, Wo).sum(-2))}
    at = per_head[0, position]                                     # [head d_model]
    return EquivalenceResult(
        checks=checks, time_ms=time_ms, lookups=lookups, lookup_mb=lookup_sizes,
        head_norms=to_numpy(at.norm(dim=-1).double()), head_results=to_numpy(at.double()),
        attn_out=to_numpy(concat[0, position].double()),
        position_check=compare(at.sum(0), concat[0, position], TOLERANCE[dtype]),
        wo_block_check=wo_block_check(Wo, concatenated_W_O(Wo), TOLERANCE[dtype]),
        z=to_numpy(z[0]), W_O=to_numpy(Wo), out=to_numpy(concat[0]),
    )


@torch.inference_mode()
def element(result: EquivalenceResult, i: int, j: int) -> ElementSum:
    """Seed 000's R₁,₁ argument at any element (batch item 0, in the run's precision): R[i, j] is a D-term sum
    over the concatenated heads, R[i, j] = Σ_{k<D} h[i, k] W_O[k, j], and its terms come in H runs of d_head,
    one per head (k // d_head): each run's partial sum is that head's own result z_h W_O^h at [i, j]."""
    z, W_O, out = (torch.as_tensor(a) for a in (result.z, result.W_O, result.out))  # [pos head d_head] …
    if not 0 <= i < z.shape[0]:
        raise ValueError(f"i={i} is outside the sequence; choose 0 … {z.shape[0] - 1}")
    if not 0 <= j < W_O.shape[-1]:
        raise ValueError(f"j={j} is outside d_model; choose 0 … {W_O.shape[-1] - 1}")
    h = rearrange(z[i], "head d_head -> (head d_head)")              # [d_model] the concatenated heads at i
    column = rearrange(W_O[..., j], "head d_head -> (head d_head)")  # [d_model] column j of the concatenated W_O
    terms = h * column                                               # [d_model]
    partial = terms.view(W_O.shape[0], W_O.shape[1]).sum(-1)         # [head]
    total = partial.sum()
    return ElementSum(terms=to_numpy(terms.double()), partial_sums=to_numpy(partial.double()),
                      per_head=to_numpy(attention.per_head_results(z[i], W_O)[:, j].double()),
                      total=float(total), output=float(out[i, j]),
                      check=compare(total, out[i, j], tolerance_for(out.dtype)))


# ---------------------------------------------------------------------------------------------------------------
# The answers the page's questions reveal, computed from a run

DIFFERENCES = ("exactly equal", f"below {TOLERANCE['float64']:.0e}",
               f"{TOLERANCE['float64']:.0e} to {TOLERANCE['float32']:.0e}", f"above {TOLERANCE['float32']:.0e}")


def difference_bucket(max_abs_diff: float) -> str:
    """The ``DIFFERENCES`` bucket of a largest |difference|; the edges are float64's and float32's tolerances."""
    if max_abs_diff == 0.0:
        return DIFFERENCES[0]
    if max_abs_diff < TOLERANCE["float64"]:
        return DIFFERENCES[1]
    return DIFFERENCES[2] if max_abs_diff <= TOLERANCE["float32"] else DIFFERENCES[3]


def scores_shape_options(batch: int, seq: int, d_model: int, n_heads: int) -> list[str]:
    """Plausible shapes of all heads' scores at step 6: the right one (B × H × S × S), one head's (the reading's
    view), z's, heads after positions, a single S × S per batch item, and the stream's; each distinct one once."""
    B, S, D, H, L = batch, seq, d_model, n_heads, d_model // n_heads
    shapes = {_shape(*sizes) for sizes in [(B, H, S, S), (B, 1, S, S), (B, H, S, L), (B, S, H, S), (B, S, S), (B, S, D)]}
    return sorted(shapes)


def row_owner_options(row: int, n_heads: int, d_head: int) -> list[str]:
    """Plausible owners of row ``row`` of the concatenated W_O: the right one (``wo_row_owner``), the head-minor
    order (head r mod H, row r // H) and 1-based head counting; each valid, distinct one once, in head order."""
    head, local = wo_row_owner(row, d_head)
    candidates = {(head, local), (row % n_heads, row // n_heads), (head + 1, local)}
    return [f"head {h}, row {r}" for h, r in sorted(candidates) if h < n_heads and r < d_head]


LENGTHS = ("shorter than every head's", "about the longest head's", "about √(Σ_h ‖result_h‖²), as for heads at right angles",
           "about Σ_h ‖result_h‖, as for heads all pointing one way")


def output_length(head_norms: np.ndarray, output_norm: float) -> str:
    """Where ‖Σ_h result_h‖ sits among the heads' lengths ‖result_h‖ [head]: below all of them (the heads cancel),
    else the nearest (by ratio) of the longest head's, the right-angle length √(Σ‖result_h‖²) and the aligned Σ‖result_h‖."""
    if output_norm < head_norms.min():
        return LENGTHS[0]
    marks = [head_norms.max(), np.sqrt((head_norms**2).sum()), head_norms.sum()]
    return LENGTHS[1 + int(np.abs(np.log(output_norm / np.array(marks))).argmin())]


def largest_partial(partial_sums: np.ndarray) -> int:
    """The head whose partial sum [head] is largest in magnitude."""
    return int(np.abs(partial_sums).argmax())
