"""QK and OV circuits, composition, copying and path expansion (Elhage et al. 2021).

Every matrix here has rank ≤ d_head and is kept as a ``FactoredMatrix``: a vocab × vocab circuit
is never formed unless a page asks for a few of its rows.
"""

import math

import torch
from torch import Tensor

from mechlib import residual
from mechlib.data import bigram_distribution, builtin_text
from mechlib.device import require_budget
from mechlib.factored import FactoredMatrix
from mechlib.model import Cache, Transformer

__all__ = ["bigram_kl", "qk_circuit", "positional_qk_circuit", "ov_circuit", "composition_scores", "composition_mb",
           "composition_ceiling", "random_baseline", "empirical_baseline", "copying_scores", "ov_eigenvalues",
           "path_expansion", "skip_trigrams", "virtual_ov"]

MODES = ("Q", "K", "V")


@torch.inference_mode()
def bigram_kl(model: Transformer) -> tuple[float, float]:
    """(KL(corpus bigrams ‖ model), the corpus's conditional bigram entropy), both in nats.

    For a zero-layer shortformer model the logits of a token are exactly W_E[token] W_U + b_U.
    """
    cfg = model.cfg
    if cfg.n_layers or cfg.positional != "shortformer" or cfg.normalization is not None:
        raise ValueError("bigram_kl reads the logits as W_E W_U + b_U, which holds only for a zero-layer "
                         "shortformer model without LayerNorm")
    tokens = torch.tensor(model.tokenizer.encode(builtin_text()))
    p_current, P = bigram_distribution(tokens, model.cfg.d_vocab)              # [V], [V V]
    logits = model.embed.W_E @ model.unembed.W_U + model.unembed.b_U           # [V V]
    log_Q = logits.double().cpu().log_softmax(-1)
    log_P = torch.where(P > 0, P.log(), 0.0)
    kl = (p_current[:, None] * P * (log_P - log_Q)).sum()
    entropy = -(p_current[:, None] * P * log_P).sum()
    return float(kl), float(entropy)


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
    require_budget(composition_mb(model), "Composition scores for every pair of heads")
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
    require_budget(composition_mb(model), "Composition ceilings for every pair of heads")
    S, T, earlier = _writers_and_readers(model, mode)
    tiny = torch.finfo(S.dtype).tiny
    share_S, share_T = (sigma.pow(2) / sigma.pow(2).sum(-1, keepdim=True).clamp(min=tiny)  # σ_i² / ‖σ‖², descending
                        for sigma in (torch.linalg.svdvals(S), torch.linalg.svdvals(T)))   # [(layer head) d_head]
    return _by_layer_pair(model, torch.where(earlier, (share_S @ share_T.T).sqrt(), 0.0))


def random_baseline(d_model: int) -> float:
    """The composition score expected of unrelated heads, about 1/√d_model."""
    return d_model**-0.5


@torch.inference_mode()
def empirical_baseline(d_model: int, d_head: int, samples: int = 200, seed: int = 0) -> float:
    """The mean composition score of random Gaussian factors of the model's sizes."""
    g = torch.Generator().manual_seed(seed)
    factors = [torch.randn(samples, *shape, generator=g, dtype=torch.float64)
               for shape in ((d_model, d_head), (d_head, d_model), (d_model, d_head), (d_head, d_model))]
    A, B = FactoredMatrix(factors[0], factors[1]), FactoredMatrix(factors[2], factors[3])
    return float(((A @ B).norm() / (A.norm() * B.norm())).mean())


@torch.inference_mode()
def ov_eigenvalues(model: Transformer, layer: int, head: int) -> Tensor:
    """The non-zero eigenvalues of the OV circuit W_E W_OV W_U, through its d_head × d_head core: [d_head] complex."""
    circuit = ov_circuit(model, layer, head)
    return FactoredMatrix(circuit.A.double(), circuit.B.double()).eigenvalues()


@torch.inference_mode()
def copying_scores(model: Transformer) -> Tensor:
    """Σ Re λ / Σ |λ| over the OV circuit's eigenvalues, per head [layer head]: 1 for a pure copier, −1 for its opposite."""
    scores = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, dtype=torch.float64)
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            eigenvalues = ov_eigenvalues(model, layer, head)
            scores[layer, head] = eigenvalues.real.sum() / eigenvalues.abs().sum()
    return scores


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


def virtual_ov(model: Transformer, earlier: tuple[int, int], later: tuple[int, int]) -> FactoredMatrix:
    """The OV circuit of the virtual head formed by V-composition, W_OV^earlier W_OV^later [d_model, d_model]:
    what the later head moves when what it reads was written by the earlier head."""
    a, b = model.blocks[earlier[0]].attn, model.blocks[later[0]].attn
    return FactoredMatrix(a.W_V[earlier[1]], a.W_O[earlier[1]] @ b.W_V[later[1]] @ b.W_O[later[1]])
