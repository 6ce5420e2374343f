"""QK and OV circuits, composition, copying and path expansion (Elhage et al. 2021).

Every matrix here has rank ≤ d_head and is kept as a ``FactoredMatrix``: a vocab × vocab circuit
is never formed unless a page asks for a few of its rows.
"""

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib import bigrams, residual
from mechlib.bigrams import Ceiling
from mechlib.checks import BIGRAM_GAP_MAX, BIGRAM_KL_SHARE, Check, above_random_bar, compare, model_tolerance
from mechlib.data import bigram_distribution, builtin_text, token_labels, word_ids
from mechlib.device import costs, to_numpy
from mechlib.factored import FactoredMatrix
from mechlib.model import Cache, Transformer

__all__ = ["corpus_bigrams", "frequent_tokens", "ZeroLayer", "zero_layer", "bigram_example", "OneLayer", "one_layer",
           "copy_ranks", "TokenTables", "token_tables",
           "qk_circuit", "positional_qk_circuit", "ov_circuit", "composition_score_reference", "composition_scores",
           "composition_mb", "composition_ceiling", "random_baseline", "Chance", "random_composition", "random_copying",
           "head_label", "VirtualHead", "Composition", "composition", "copying_score", "copying_scores", "ov_eigenvalues",
           "path_expansion", "skip_trigrams", "virtual_ov"]

MODES = ("Q", "K", "V")
TABLE_TOKENS = 20     # tokens on a token × token table
CHOOSABLE_TOKENS = 200  # current tokens whose next-token table a page offers
TOP_NEXT = 8          # next tokens listed per current token
TRIGRAM_DESTINATIONS, TRIGRAM_VOCABULARY, TRIGRAMS = 40, 300, 15  # skip-trigrams: searched over, and kept
STRONGEST, VIRTUAL_HEADS = 3, 4  # composing pairs named, virtual heads listed


def head_label(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def corpus_bigrams(model: Transformer) -> tuple[Tensor, Tensor]:
    """The built-in text's p(current) [d_vocab] and P(next | current) [d_vocab d_vocab], in the model's tokenizer."""
    return bigram_distribution(torch.tensor(model.tokenizer.encode(builtin_text())), model.cfg.d_vocab)


def frequent_tokens(model: Transformer, n: int, words_only: bool = False) -> list[int]:
    """The n most frequent ids of the built-in text, never <bos> or <unk>, only words (``data.word_ids``) where
    ``words_only``; ids 2, 3, … without a tokenizer, which has no words. Counted token by token: no bigram table
    [d_vocab d_vocab] (GPT-2's would be 20 GB)."""
    tokenizer = model.tokenizer
    if tokenizer is None:
        if words_only:
            raise ValueError("this model has no tokenizer, so its ids are not words: choose words_only=False")
        return list(range(2, min(model.cfg.d_vocab, n + 2)))
    counts = torch.bincount(torch.tensor(tokenizer.encode(builtin_text())), minlength=model.cfg.d_vocab)  # [d_vocab]
    ranked = [i for i in counts.argsort(descending=True, stable=True).tolist()
              if i not in (tokenizer.bos_id, tokenizer.unk_id)]
    return (word_ids(model.tokenizer, ranked) if words_only else ranked)[:n]


@dataclass(frozen=True)
class ZeroLayer:
    """A zero-layer model against the corpus: W_E W_U is the direct path, a bigram table (Elhage et al. 2021)."""

    ceiling: Ceiling          # the model's KL beside the best rank-d_model fit's, the unigram baseline's, the entropy
    bound: float              # BIGRAM_KL_SHARE · entropy
    learned: bool             # model KL ≤ bound: the model has learned the bigram statistics
    at_best: bool             # model KL ≤ the best fit's + BIGRAM_GAP_MAX: as well as its width allows
    ids: list[int]            # the CHOOSABLE_TOKENS most frequent tokens, most frequent first
    labels: list[str]         # their labels
    example: int              # the one a page opens on: ``bigram_example``
    next_tokens: list[dict[str, list]]  # per id: the TOP_NEXT (at most d_vocab) likeliest next tokens, model and corpus
    model_table: np.ndarray   # [current next] P_model on the TABLE_TOKENS most frequent
    corpus_table: np.ndarray  # [current next] P_corpus on the same


@torch.inference_mode()
@costs(lambda model: bigrams.estimate_mb(model.cfg.d_vocab))
def zero_layer(model: Transformer) -> ZeroLayer:
    """The zero-layer model's bigram table W_E W_U + b_U against the corpus's, whether it has learned it, and how
    close it is to the best its width allows (``bigrams.ceiling``)."""
    ceiling = bigrams.ceiling(model)
    model_probs, (_, corpus_probs) = bigrams.zero_layer_logits(model).softmax(-1), corpus_bigrams(model)  # [V V] each
    ids, tokenizer = frequent_tokens(model, CHOOSABLE_TOKENS), model.tokenizer
    table, listed = ids[:TABLE_TOKENS], min(TOP_NEXT, model.cfg.d_vocab)
    (p_model, by_model), (p_corpus, by_corpus) = (probs[ids].topk(listed) for probs in (model_probs, corpus_probs))
    next_tokens = [{"model's next token": token_labels(tokenizer, by_model[i]), "model probability": p_model[i].tolist(),
                    "corpus's next token": token_labels(tokenizer, by_corpus[i]), "corpus probability": p_corpus[i].tolist()}
                   for i in range(len(ids))]
    bound = BIGRAM_KL_SHARE * ceiling.entropy
    example = bigram_example(tokenizer, ids, by_model[:, 0].tolist(), by_corpus[:, 0].tolist())
    return ZeroLayer(ceiling, bound, ceiling.model_kl <= bound, ceiling.model_kl <= ceiling.best_fit_kl + BIGRAM_GAP_MAX,
                     ids, token_labels(tokenizer, ids), example, next_tokens, to_numpy(model_probs[table][:, table]),
                     to_numpy(corpus_probs[table][:, table]))


def bigram_example(tokenizer, ids: list[int], model_next: list[int], corpus_next: list[int]) -> int:
    """The current token a zero-layer model's bigram table is best shown on: the first of ``ids`` (most frequent
    first) that is a word whose bigram the model learned, i.e. whose likeliest next token under the model,
    ``model_next[i]``, is the corpus's likeliest too, ``corpus_next[i]``, and is itself a word ("of" → "the").
    Failing that, the first whose likeliest next token the model learned; failing that, the first of ``ids``."""
    learned = [i for i, (mine, corpus) in enumerate(zip(model_next, corpus_next)) if mine == corpus]
    words = set(word_ids(tokenizer, ids + model_next))
    return ids[next((i for i in learned if ids[i] in words and model_next[i] in words), learned[0] if learned else 0)]


def qk_circuit(model: Transformer, layer: int, head: int) -> FactoredMatrix:
    """W_E W_QK W_Eᵀ [d_vocab, d_vocab]: how much a destination token attends to a source token, by tokens alone."""
    attn, W_E = model.blocks[layer].attn, model.embed.W_E
    return FactoredMatrix(W_E @ attn.W_Q[head], (W_E @ attn.W_K[head]).T)


def positional_qk_circuit(model: Transformer, layer: int, head: int) -> FactoredMatrix:
    """W_pos W_QK W_posᵀ [n_ctx, n_ctx]: how much a destination position attends to a source position."""
    attn, W_pos = model.blocks[layer].attn, model.pos_embed.W_pos
    return FactoredMatrix(W_pos @ attn.W_Q[head], (W_pos @ attn.W_K[head]).T)


def ov_circuit(model: Transformer, layer: int, head: int) -> FactoredMatrix:
    """W_E W_OV W_U [d_vocab, d_vocab]: how attending to a source token raises each output token's logit."""
    attn = model.blocks[layer].attn
    return FactoredMatrix(model.embed.W_E @ attn.W_V[head], attn.W_O[head] @ model.unembed.W_U)


@torch.inference_mode()
def composition_score_reference(model: Transformer, mode: str, writer: tuple[int, int], reader: tuple[int, int]) -> float:
    """The composition score as the paper defines it, every matrix dense [d_model d_model]:
    ‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F), W_A the writer's W_OV, W_B what the later reader reads through:
    its W_QK (Q-composition), W_QKᵀ (K-composition) or W_OV (V-composition). ``composition_scores``
    computes the same for every pair at once, without forming these matrices."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choose 'Q', 'K' or 'V'")
    if writer[0] >= reader[0]:
        raise ValueError(f"the writer (layer {writer[0]}) must sit in an earlier layer than the reader (layer {reader[0]})")
    a, b = model.blocks[writer[0]].attn, model.blocks[reader[0]].attn
    W_A = a.W_V[writer[1]] @ a.W_O[writer[1]]                                   # W_OV of the writer
    W_QK = b.W_Q[reader[1]] @ b.W_K[reader[1]].T                                # the reader's queries · keys
    W_B = {"Q": W_QK, "K": W_QK.T, "V": b.W_V[reader[1]] @ b.W_O[reader[1]]}[mode]
    return float(torch.linalg.matrix_norm(W_A @ W_B) / (torch.linalg.matrix_norm(W_A) * torch.linalg.matrix_norm(W_B)))


def _orthonormal_left(left: Tensor, right: Tensor) -> Tensor:
    """For L R with L: [..., d, k], R: [..., k, n]: the k × n matrix S with ‖L R X‖ = ‖S X‖ for every X.

    S = Uᵀ R with Lᵀ L = U Uᵀ (Cholesky): then L = Q Uᵀ for an orthonormal Q, and Q drops out of the norm.
    A rank-deficient L (a head with zero weights, or d < k) falls back to its QR factor, padded with zero
    rows to k rows: rows of zeros change no norm, and every layer's S keeps the same shape.
    """
    lower, info = torch.linalg.cholesky_ex(left.transpose(-1, -2) @ left)
    if not info.any():
        return lower.transpose(-1, -2) @ right
    upper = torch.linalg.qr(left)[1]                                              # [..., min(d, k), k]
    return torch.nn.functional.pad(upper, (0, 0, 0, left.shape[-1] - upper.shape[-2])) @ right


GRAM_BLOCK = 128  # d_model columns per Gram block, at most
GRAM_ELEMENTS = 2**22  # … and fewer where one block for every head would pass this many elements (16 MB in float32)


def _gram_block(heads: int) -> int:
    """Columns per Gram block for this many heads: GRAM_BLOCK, or fewer to keep a block for all within GRAM_ELEMENTS."""
    return max(1, min(GRAM_BLOCK, math.isqrt(GRAM_ELEMENTS // max(heads, 1))))


def _squared_norms_by_gram(S: Tensor, T: Tensor, split: int) -> Tensor:
    """[a, b]: ‖S_a T_bᵀ‖_F² for S: [a, k, d], T: [b, k, d], as ⟨S_aᵀ S_a, T_bᵀ T_b⟩_F (Gram matrices).

    Forming S_a T_bᵀ costs k² d multiply-adds per pair; the inner product of two d × d Grams costs d², and
    half that since both are symmetric: only their upper block triangle is formed (an off-diagonal block
    counts twice), one block pair at a time, so no head's whole d × d Gram is ever held. Rows from
    ``split`` on are wanted only against columns from ``split`` on; the rest of them is left 0. The inner
    product cancels where S_a T_bᵀ is near 0: its rounding is about ε ‖S_a‖²_F ‖T_b‖²_F.
    """
    block = _gram_block(max(len(S), len(T)))
    starts = range(0, S.shape[-1], block)
    squared = S.new_zeros(len(S), len(T))
    for i in starts:
        rows = slice(i, i + block)
        for j in starts[i // block:]:
            cols = slice(j, j + block)
            gram_S = (S[..., rows].transpose(-1, -2) @ S[..., cols]).flatten(1)  # [a (block block)]
            gram_T = (T[..., rows].transpose(-1, -2) @ T[..., cols]).flatten(1)  # [b (block block)]
            twice = 1 if i == j else 2
            squared[:split].addmm_(gram_S[:split], gram_T.T, alpha=twice)
            squared[split:, split:].addmm_(gram_S[split:], gram_T[split:].T, alpha=twice)
    return squared.clamp_(min=0)


def _squared_norms_directly(S: Tensor, T: Tensor) -> Tensor:
    """[a, b]: ‖S_a T_bᵀ‖_F² for S: [a, k, d], T: [b, k, d], by forming every k × k product in one matrix product."""
    (a, k, d), b = S.shape, len(T)
    products = S.reshape(a * k, d) @ T.reshape(b * k, d).T                        # [(a k) (b k)]
    return products.pow_(2).reshape(a, k, b, k).sum((1, 3))


# For a later head's attention module: the factors (L, R) of the matrix it reads through, W^B = L R up to transposes.
READS = {"Q": lambda attn: (attn.W_K, attn.W_Q.transpose(-1, -2)),                 # W_QK: queries read
         "K": lambda attn: (attn.W_Q, attn.W_K.transpose(-1, -2)),                 # W_QKᵀ: keys read
         "V": lambda attn: (attn.W_O.transpose(-1, -2), attn.W_V.transpose(-1, -2))}  # W_OV: values read


def _writers_and_readers(model: Transformer, mode: str) -> tuple[Tensor, Tensor, Tensor]:
    """S_A over layers 0 … L−2 and T_B over layers 1 … L−1, each [(layer head) d_head d_model], and which pairs count.

    Through d_head-sized factors, W_OV^A acts like S_A = R_V W_O (W_V = Q_V R_V) and W^B like T_B (e.g.
    W_Q R_Kᵀ): ‖W_OV^A W^B‖_F = ‖S_A T_Bᵀ‖_F, and each has the singular values of the matrix it stands for.
    The mask [(layer_A head_A) (layer_B head_B)] is true where layer_A < layer_B.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choose 'Q', 'K' or 'V'")
    S = torch.stack([_orthonormal_left(b.attn.W_V, b.attn.W_O) for b in model.blocks[:-1]]).flatten(0, 1)
    T = torch.stack([_orthonormal_left(*READS[mode](b.attn)) for b in model.blocks[1:]]).flatten(0, 1)
    layer_A = torch.arange(model.cfg.n_layers - 1, device=S.device).repeat_interleave(model.cfg.n_heads)
    return S, T, layer_A[:, None] < layer_A + 1                                    # T's row r is in layer_A[r] + 1


def _by_layer_pair(model: Transformer, pairs: Tensor) -> Tensor:
    """[(layer_A head_A) (layer_B head_B)] over layers 0 … L−2 × 1 … L−1 → [layer_A, head_A, layer_B, head_B]."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = pairs.new_zeros(L, H, L, H)
    out[:-1, :, 1:] = pairs.reshape(L - 1, H, L - 1, H)
    return out


def composition_mb(model: Transformer) -> float:
    """Estimated memory of ``composition_scores`` in MB: pair-by-pair tables, the factors and one layer's
    Cholesky factors, Gram blocks, one reader layer's products."""
    cfg, itemsize = model.cfg, model.embed.W_E.element_size()
    heads, k = (cfg.n_layers - 1) * cfg.n_heads, cfg.d_head
    elements = (4 * (cfg.n_layers * cfg.n_heads) ** 2 + 2 * heads * k * cfg.d_model + 2 * cfg.n_heads * k * k
                + 2 * heads * _gram_block(heads) ** 2 + heads * k * cfg.n_heads * k)
    return (elements * itemsize + 2 * heads**2) / 2**20


@torch.inference_mode()
def composition_scores(model: Transformer, mode: str) -> Tensor:
    """[layer_A, head_A, layer_B, head_B]: ‖W_OV^A W^B‖_F / (‖W_OV^A‖_F ‖W^B‖_F), zero unless layer_A < layer_B.

    W^B is W_QK (Q-composition: A writes what B's queries read), W_QKᵀ (K-composition: keys) or W_OV
    (V-composition: values). The score is ‖S_A T_Bᵀ‖_F / (‖S_A‖_F ‖T_B‖_F) (``_writers_and_readers``).
    Where 2 d_head² > d_model, a Gram inner product (d_model²/2 per pair) costs less than forming S_A T_Bᵀ
    (d_head² d_model), so every pair goes through Gram matrices first; their rounding in the squared
    score is about ε, so a reader layer with a score below ε^(1/3) is recomputed by forming the products,
    which keeps every score within about ε^(2/3) / 2 of exact. Computed in the model's dtype.
    """
    L, H = model.cfg.n_layers, model.cfg.n_heads
    if L < 2:                                                                     # no earlier → later pair
        return model.embed.W_E.new_zeros(L, H, L, H)
    S, T, earlier = _writers_and_readers(model, mode)
    k, d = S.shape[-2:]
    denominator = S.pow(2).sum((-1, -2)).sqrt()[:, None] * T.pow(2).sum((-1, -2)).sqrt()  # [(layer_A head_A) (…_B)]
    if 2 * k * k > d:
        squared = _squared_norms_by_gram(S, T, (L - 1) // 2 * H)  # writers in later layers meet only later readers
        cancelled = earlier & (squared < (torch.finfo(S.dtype).eps ** (1 / 3) * denominator) ** 2)
        readers = cancelled.reshape(-1, L - 1, H).any(dim=(0, 2)).nonzero().flatten().tolist()
    else:
        squared, readers = S.new_zeros(len(S), len(T)), range(L - 1)
    for j in readers:                                                             # reader layer j + 1
        writers, read = slice(0, (j + 1) * H), slice(j * H, (j + 1) * H)          # writers in layers 0 … j
        squared[writers, read] = _squared_norms_directly(S[writers], T[read])
    valid = earlier & (denominator > 0)
    ratio = torch.where(valid, squared.sqrt_() / denominator.clamp(min=torch.finfo(S.dtype).tiny), 0.0)
    return _by_layer_pair(model, ratio)


@torch.inference_mode()
def composition_ceiling(model: Transformer, mode: str) -> Tensor:
    """[layer_A, head_A, layer_B, head_B]: the highest composition score the two heads' singular values allow.

    With σ the singular values of W_OV^A and τ those of W^B, both descending, ‖W_A W_B‖_F² = ⟨W_AᵀW_A, W_B W_Bᵀ⟩
    is at most Σ σ_i² τ_i² (von Neumann's trace inequality), reached when A writes along its strongest
    directions exactly what B reads along its strongest ones, in the same order. So a score is at most
    √(Σ σ_i² τ_i²) / (‖σ‖ ‖τ‖): a writer with r comparable singular values scores at most about 1/√r,
    however well it lines up with the reader. Zero unless layer_A < layer_B.
    """
    L, H = model.cfg.n_layers, model.cfg.n_heads
    if L < 2:                                                                     # no earlier → later pair
        return model.embed.W_E.new_zeros(L, H, L, H)
    S, T, earlier = _writers_and_readers(model, mode)
    tiny = torch.finfo(S.dtype).tiny
    share_S, share_T = (sigma.pow(2) / sigma.pow(2).sum(-1, keepdim=True).clamp(min=tiny)  # σ_i² / ‖σ‖², descending
                        for sigma in (torch.linalg.svdvals(S), torch.linalg.svdvals(T)))   # [(layer head) d_head]
    return _by_layer_pair(model, torch.where(earlier, (share_S @ share_T.T).sqrt(), 0.0))


def random_baseline(d_model: int) -> float:
    """The composition score expected of unrelated heads, about 1/√d_model."""
    return d_model**-0.5


@dataclass(frozen=True)
class Chance:
    """A score's distribution over random heads of one model's sizes: its mean and standard deviation, and from
    them the bar a score must pass to be "above random" (``checks.above_random_bar``)."""

    mean: float
    sd: float

    def bar(self, tests: int) -> float:
        """What each of ``tests`` scores tested at once must pass to be "above random": mean + z·sd, Bonferroni."""
        return above_random_bar(self.mean, self.sd, tests)


RANDOM_SAMPLES = 200  # random heads drawn per chance distribution …
EIGEN_WORK = 2**24    # … or, for wide heads, about this many r³ steps of eigenvalue work, but never fewer than 20


@functools.lru_cache(maxsize=32)
@torch.inference_mode()
def random_composition(d_model: int, d_head: int, samples: int = RANDOM_SAMPLES, seed: int = 0) -> Chance:
    """Composition scores of random Gaussian factors of these sizes, seeded (and cached per size). The mean is the
    empirical baseline, about 1/√d_model; half of random pairs score above it, so "above random" is ``bar``."""
    g = torch.Generator().manual_seed(seed)
    factors = [torch.randn(samples, *shape, generator=g, dtype=torch.float64)
               for shape in ((d_model, d_head), (d_head, d_model), (d_model, d_head), (d_head, d_model))]
    A, B = FactoredMatrix(factors[0], factors[1]), FactoredMatrix(factors[2], factors[3])
    scores = (A @ B).norm() / (A.norm() * B.norm())                           # [samples]
    return Chance(float(scores.mean()), float(scores.std()))


def _gaussian_r(rows: int, cols: int, samples: int, rng: np.random.Generator) -> Tensor:
    """[samples, min(rows, cols), cols]: R of the QR factorisation of a rows × cols standard Gaussian matrix, drawn
    without forming the matrix (Bartlett): √χ²(rows − i) on the diagonal, N(0, 1) above it, 0 below."""
    k = min(rows, cols)
    R = np.triu(rng.standard_normal((samples, k, cols)), 1)
    R[:, range(k), range(k)] = np.sqrt(rng.chisquare(rows - np.arange(k), (samples, k)))
    return torch.from_numpy(R)


@functools.lru_cache(maxsize=32)
@torch.inference_mode()
def random_copying(d_vocab: int, d_model: int, d_head: int, seed: int = 0) -> Chance:
    """Copying scores of the heads of random models of these sizes (every weight Gaussian), seeded and cached per size.

    The nonzero eigenvalues of W_E W_OV W_U are those of W_O W_U W_E W_V [d_head d_head]. With W_Oᵀ = Q_O R_O and
    W_V = Q_V R_V, the middle Q_Oᵀ W_U and W_E Q_V are independent Gaussian, and their product is G R_Y (G
    Gaussian, R_Y the R of a d_vocab × r Gaussian): the eigenvalues are those of the r × r matrix G R_Y R_V R_Oᵀ,
    r = min(d_model, d_head), drawn without any vocabulary-sized matrix. With d_head = 1 a random head scores ±1.
    """
    r = min(d_model, d_head)
    samples = min(RANDOM_SAMPLES, max(20, EIGEN_WORK // r**3))
    rng = np.random.default_rng(seed)
    R_O, R_V = _gaussian_r(d_model, d_head, samples, rng), _gaussian_r(d_model, d_head, samples, rng)  # [samples r d_head]
    R_Y = _gaussian_r(d_vocab, r, samples, rng)                                  # [samples min(d_vocab, r) r]
    G = torch.from_numpy(rng.standard_normal((samples, r, R_Y.shape[1])))       # [samples r min(d_vocab, r)]
    scores = copying_score(torch.linalg.eigvals(G @ R_Y @ R_V @ R_O.transpose(-1, -2)))  # [samples]
    return Chance(float(scores.mean()), float(scores.std()))


@dataclass(frozen=True)
class VirtualHead:
    """A writer and a later reader that V-compose act as one head with OV circuit W_OV^writer W_OV^reader."""

    writer: str
    reader: str
    v_composition: float
    norm: float          # ‖W_OV^writer W_OV^reader‖_F
    above_random: bool   # v_composition > Composition.bar


@dataclass(frozen=True)
class Composition:
    """Q-, K- and V-composition of every earlier head with every later one (Elhage et al. 2021)."""

    writers: list[str]               # heads of layers 0 … L−2
    readers: list[str]               # heads of layers 1 … L−1
    scores: dict[str, np.ndarray]    # mode -> [writer reader]; NaN where the writer is not in an earlier layer
    random: float                    # 1/√d_model
    chance: Chance                   # scores of random factors of the model's sizes
    tested: int                      # V-composition pairs the virtual heads are picked from
    bar: float                       # chance.bar(tested): a virtual head is "above random" past this
    strongest: list[tuple[str, str, str, float]]  # (mode, writer, reader, score), the STRONGEST highest
    virtual: list[VirtualHead]       # the VIRTUAL_HEADS pairs with the highest V-composition

    @property
    def any_virtual_above_random(self) -> bool:
        return any(v.above_random for v in self.virtual)


@costs(composition_mb)
@torch.inference_mode()
def composition(model: Transformer) -> Composition:
    """Every earlier → later pair's composition scores, the random baselines, and the strongest virtual heads."""
    cfg = model.cfg
    if cfg.n_layers < 2:
        raise ValueError("composition needs two layers or more: an earlier head to write and a later one to read")
    L, H = cfg.n_layers, cfg.n_heads
    writers = [head_label(layer, head) for layer in range(L - 1) for head in range(H)]
    readers = [head_label(layer, head) for layer in range(1, L) for head in range(H)]
    earlier = np.arange(L - 1).repeat(H)[:, None] < np.arange(1, L).repeat(H)[None, :]  # [writer reader]
    scores = {mode: np.where(earlier, to_numpy(composition_scores(model, mode)[:-1, :, 1:]
                                                          .reshape((L - 1) * H, (L - 1) * H).double()), np.nan) for mode in MODES}
    chance, tested = random_composition(cfg.d_model, cfg.d_head), int(earlier.sum())
    bar = chance.bar(tested)                  # the top pairs are picked from all of them: a family-wise bar
    pairs = [(float(scores[m][a, b]), m, a, b) for m in MODES for a, b in zip(*earlier.nonzero())]
    strongest = [(m, writers[a], readers[b], score) for score, m, a, b in sorted(pairs, reverse=True)[:STRONGEST]]
    virtual = []
    for score, _, a, b in sorted((p for p in pairs if p[1] == "V"), reverse=True)[:VIRTUAL_HEADS]:
        writer, reader = divmod(int(a), H), divmod(int(b) + H, H)              # readers start at layer 1
        norm = float(virtual_ov(model, writer, reader).norm())
        virtual.append(VirtualHead(writers[a], readers[b], score, norm, score > bar))
    return Composition(writers, readers, scores, random_baseline(cfg.d_model), chance, tested, bar, strongest, virtual)


@torch.inference_mode()
def ov_eigenvalues(model: Transformer, layer: int, head: int) -> Tensor:
    """The non-zero eigenvalues of the OV circuit W_E W_OV W_U, through its d_head × d_head core: [d_head] complex."""
    circuit = ov_circuit(model, layer, head)
    return FactoredMatrix(circuit.A.double(), circuit.B.double()).eigenvalues()


def copying_score(eigenvalues: Tensor) -> Tensor:
    """Σ Re λ / Σ |λ| over an OV circuit's eigenvalues [..., k] -> [...]: 1 for a pure copier, −1 for its opposite,
    0 for a head that moves nothing."""
    return eigenvalues.real.sum(-1) / eigenvalues.abs().sum(-1).clamp(min=torch.finfo(eigenvalues.real.dtype).tiny)


@torch.inference_mode()
def copying_scores(model: Transformer) -> Tensor:
    """The copying score of every head's OV circuit W_E W_OV W_U, [layer head]."""
    return torch.stack([copying_score(torch.stack([ov_eigenvalues(model, layer, head) for head in range(model.cfg.n_heads)]))
                        for layer in range(model.cfg.n_layers)])


@torch.inference_mode()
def path_expansion(model: Transformer, cache: Cache) -> tuple[list[str], Tensor]:
    """Logits as a sum over paths, for a model without LayerNorm: the direct path (embeddings straight to
    W_U), one term per head (its result through W_U), the attention biases, and b_U.
    Returns (labels, [path batch pos d_vocab]); the paths sum to the real logits."""
    if model.cfg.normalization is not None:
        raise ValueError("path expansion is exact only without LayerNorm; choose an attention-only zoo model")
    book = residual.ledger(model, cache)
    paths = book.terms @ model.unembed.W_U                                       # [term batch pos d_vocab]
    labels = ["direct: " + label if label in ("embed", "pos_embed") else label for label in book.labels]
    return labels + ["b_U"], torch.cat([paths, model.unembed.b_U.expand_as(paths[0])[None]])


@torch.inference_mode()
def skip_trigrams(model: Transformer, layer: int, head: int, destinations: list[int], vocabulary: list[int],
                  per_destination: int = 3) -> list[tuple[int, int, int, float, float]]:
    """[source … destination → output] triples of one head, from its circuits only (no input needed):
    for each destination token, the sources (among ``vocabulary``) its QK circuit scores highest, and for
    each such source the output token (among ``vocabulary``) its OV circuit raises most. Returns (source,
    destination, output, qk score, ov score), best QK score first. Only the rows and columns asked for
    are formed."""
    qk = qk_circuit(model, layer, head).rows(destinations).columns(vocabulary).dense()  # [destination vocabulary]
    top_qk, picked = qk.topk(per_destination, dim=-1)                                     # [destination per]
    sources = torch.tensor(vocabulary)[picked.cpu()]
    ov = ov_circuit(model, layer, head).rows(sources.flatten().tolist()).columns(vocabulary).dense()
    top_ov, outputs = ov.max(dim=-1)
    triples = []
    for i, destination in enumerate(destinations):
        for j in range(per_destination):
            flat = i * per_destination + j
            triples.append((int(sources[i, j]), destination, vocabulary[int(outputs[flat])], float(top_qk[i, j]),
                            float(top_ov[flat])))
    return sorted(triples, key=lambda t: -t[3])


RANK_ELEMENTS = 2**22  # OV rows formed at once by ``copy_ranks``: at most this many elements (16 MB in float32)


@torch.inference_mode()
def copy_ranks(model: Transformer, layer: int, head: int, ids: list[int]) -> tuple[Tensor, Tensor]:
    """How readily one head copies each token t of ``ids``, from its OV circuit W_E W_OV W_U alone: t's own logit
    (the entry [t, t]) and its copy rank, how many of all d_vocab output tokens attending to t raises more than t
    itself (0: attending to t raises t most of all). Returns ([len(ids)] own logits, [len(ids)] ranks). Of a head
    that does not copy, a token's rank is any of 0 … d_vocab − 1 alike."""
    ov, own, ranks = ov_circuit(model, layer, head), [], []
    for start in range(0, len(ids), max(1, RANK_ELEMENTS // model.cfg.d_vocab)):
        chunk = ids[start:start + max(1, RANK_ELEMENTS // model.cfg.d_vocab)]
        rows = ov.rows(chunk).dense()                                              # [chunk d_vocab]
        mine = rows.gather(1, torch.tensor(chunk, device=rows.device)[:, None])  # [chunk 1]
        own.append(mine[:, 0])
        ranks.append((rows > mine).sum(-1))
    return torch.cat(own), torch.cat(ranks)


@dataclass(frozen=True)
class TokenTables:
    """One head's QK and OV circuits on the tokens it copies most readily, and its skip-trigrams, read from its
    weights alone (Elhage et al. 2021)."""

    candidates: int           # tokens ranked: the TRIGRAM_VOCABULARY most frequent (words only, if asked)
    labels: list[str]         # the TABLE_TOKENS of them the head copies most readily (lowest copy rank), best first
    copy_ranks: list[int]     # per label: output tokens that attending to it raises more than its own (``copy_ranks``)
    chance_rank: float        # the worst of the TABLE_TOKENS best copy ranks expected of a head that does not copy
    qk: np.ndarray            # [destination source] W_E W_QK W_Eᵀ on those tokens
    ov: np.ndarray            # [source output] W_E W_OV W_U on those tokens
    trigrams: list[tuple[str, str, str, float, float]]  # (source, destination, output, QK score, OV logit)


@costs(lambda model, *_: 4 * (RANK_ELEMENTS + 3 * TRIGRAM_DESTINATIONS * TRIGRAM_VOCABULARY) / 1e6)  # the OV rows
@torch.inference_mode()                                  # formed at once, and the skip-trigram search's score tables
def token_tables(model: Transformer, layer: int, head: int, words_only: bool) -> TokenTables:
    """The token × token tables a page shows of one head, on tokens chosen by the head's own numbers.

    Candidates: the TRIGRAM_VOCABULARY most frequent tokens of the built-in text (only words, ``data.word_ids``,
    where ``words_only``). Tables: the TABLE_TOKENS candidates with the lowest copy rank (``copy_ranks``; ties: the
    higher own logit first), so a copying head shows its diagonal. The selection alone lowers the ranks shown: of a
    head that does not copy, the k-th lowest of n ranks, each uniform over d_vocab, is about k / (n + 1) · d_vocab,
    which ``chance_rank`` states for k = TABLE_TOKENS. Skip-trigrams: the TRIGRAM_DESTINATIONS most frequent
    candidates as destinations, sources and outputs among the candidates, best QK score first."""
    vocabulary, tokenizer = frequent_tokens(model, TRIGRAM_VOCABULARY, words_only), model.tokenizer
    own, ranks = copy_ranks(model, layer, head, vocabulary)
    order = sorted(range(len(vocabulary)), key=lambda i: (int(ranks[i]), -float(own[i])))[:TABLE_TOKENS]
    table = [vocabulary[i] for i in order]
    qk = to_numpy(qk_circuit(model, layer, head).rows(table).columns(table).dense().double())
    ov = to_numpy(ov_circuit(model, layer, head).rows(table).columns(table).dense().double())
    trigrams = [(*token_labels(tokenizer, [s, d, o]), q, v) for s, d, o, q, v in
                skip_trigrams(model, layer, head, vocabulary[:TRIGRAM_DESTINATIONS], vocabulary,
                              per_destination=min(2, len(vocabulary)))[:TRIGRAMS]]
    return TokenTables(len(vocabulary), token_labels(tokenizer, table), [int(ranks[i]) for i in order],
                       len(table) / (len(vocabulary) + 1) * model.cfg.d_vocab, qk, ov, trigrams)


def virtual_ov(model: Transformer, earlier: tuple[int, int], later: tuple[int, int]) -> FactoredMatrix:
    """The OV circuit of the virtual head formed by V-composition, W_OV^earlier W_OV^later [d_model, d_model]:
    what the later head moves when what it reads was written by the earlier head."""
    a, b = model.blocks[earlier[0]].attn, model.blocks[later[0]].attn
    return FactoredMatrix(a.W_V[earlier[1]], a.W_O[earlier[1]] @ b.W_V[later[1]] @ b.W_O[later[1]])


@dataclass(frozen=True)
class OneLayer:
    """Layer 0's copying and the path expansion of one prompt (its heads' tables: ``token_tables``)."""

    eigenvalues: dict[str, np.ndarray]  # head label -> [d_head] complex eigenvalues of its OV circuit, layer 0
    copying: np.ndarray       # [head] Σ Re λ / Σ |λ|, layer 0
    copying_bar: float        # random_copying(…).bar(n_heads): what a random head reaches, Bonferroni over the heads
    copiers: int              # heads of layer 0 whose copying score passes copying_bar
    path_labels: list[str]    # the paths of the path expansion; empty with LayerNorm
    path_norms: np.ndarray | None  # [path] mean ‖logit contribution‖ over the prompt's positions
    path_check: Check | None  # Σ paths against the model's logits from a separate forward pass; None with LayerNorm


@torch.inference_mode()
@costs(lambda model, ids: residual.ledger_mb(model, ids)  # and the paths [component+1 pos d_vocab]
       + 4 * (residual.components(model) + 1) * len(ids) * model.cfg.d_vocab / 1e6)
def one_layer(model: Transformer, ids: tuple[int, ...]) -> OneLayer:
    """Every layer-0 head's OV eigenvalues and copying score; the path expansion of the prompt ``ids`` (without
    LayerNorm)."""
    cfg, eigenvalues = model.cfg, torch.stack([ov_eigenvalues(model, 0, h) for h in range(model.cfg.n_heads)]).cpu()
    copying, bar = to_numpy(copying_score(eigenvalues)), random_copying(cfg.d_vocab, cfg.d_model, cfg.d_head).bar(cfg.n_heads)
    labels, norms, check = [], None, None
    if cfg.normalization is None:
        tokens = torch.tensor([ids])                                            # [batch=1 pos]
        _, cache = model.run_with_cache(tokens)
        labels, paths = path_expansion(model, cache)                            # [path batch pos d_vocab]
        check = compare(paths.sum(0), model(tokens), model_tolerance(model))
        norms = to_numpy(paths[:, 0].norm(dim=-1).mean(-1).double())
    return OneLayer({head_label(0, h): to_numpy(e) for h, e in enumerate(eigenvalues)}, copying, bar, int((copying > bar).sum()),
                    labels, norms, check)
