"""QK and OV circuits, composition, copying and path expansion (Elhage et al. 2021).

Every matrix here has rank ≤ d_head and is kept as a ``FactoredMatrix``: a vocab × vocab circuit
is never formed unless a page asks for a few of its rows.
"""

import torch
from torch import Tensor

from mechlib import residual
from mechlib.factored import FactoredMatrix
from mechlib.model import Cache, Transformer

__all__ = ["qk_circuit", "positional_qk_circuit", "ov_circuit", "composition_scores", "composition_ceiling",
           "random_baseline", "empirical_baseline", "copying_scores", "ov_eigenvalues", "path_expansion", "skip_trigrams", "virtual_ov"]

MODES = ("Q", "K", "V")


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
    A rank-deficient L (a head with zero weights) falls back to the QR factor.
    """
    lower, info = torch.linalg.cholesky_ex(left.transpose(-1, -2) @ left)
    upper = lower.transpose(-1, -2) if not info.any() else torch.linalg.qr(left)[1]
    return upper @ right


GRAM_BLOCK = 128  # d_model columns per Gram block: one block pair's Grams for every head stay in the L3 cache
DIRECT_CHUNK = 2**22  # elements of S_a (and of T_b) gathered at once when products are formed directly


def _squared_product_norms(S: Tensor, T: Tensor, split: int) -> Tensor:
    """[a, b]: ‖S_a T_bᵀ‖_F² for S: [a, k, d], T: [b, k, d], as ⟨S_aᵀ S_a, T_bᵀ T_b⟩_F (Gram matrices).

    Forming S_a T_bᵀ costs k² d multiply-adds per pair; the inner product of two d × d Grams costs d², and
    half that since both are symmetric: only their upper block triangle is formed (an off-diagonal block
    counts twice), one block pair at a time, so no head's whole d × d Gram is ever held. Rows from
    ``split`` on are wanted only against columns from ``split`` on; the rest of them is left 0. The inner
    product cancels where S_a T_bᵀ is near 0: its rounding is about ε ‖S_a‖²_F ‖T_b‖²_F.
    """
    starts = range(0, S.shape[-1], GRAM_BLOCK)
    squared = S.new_zeros(S.shape[0], T.shape[0])
    for i in starts:
        rows = slice(i, i + GRAM_BLOCK)
        for j in starts[i // GRAM_BLOCK:]:
            cols = slice(j, j + GRAM_BLOCK)
            gram_S = (S[..., rows].transpose(-1, -2) @ S[..., cols]).flatten(1)  # [a (block block)]
            gram_T = (T[..., rows].transpose(-1, -2) @ T[..., cols]).flatten(1)  # [b (block block)]
            twice = 1 if i == j else 2
            squared[:split].addmm_(gram_S[:split], gram_T.T, alpha=twice)
            squared[split:, split:].addmm_(gram_S[split:], gram_T[split:].T, alpha=twice)
    return squared.clamp_(min=0)


def _product_norms(S: Tensor, T: Tensor) -> Tensor:
    """[n]: ‖S_i T_iᵀ‖_F for S, T: [n, k, d], forming each k × k product (k² d multiply-adds), in chunks."""
    chunk = max(1, DIRECT_CHUNK // (S.shape[-2] * S.shape[-1]))
    return torch.cat([S.new_zeros(0)] + [torch.linalg.matrix_norm(s @ t.transpose(-1, -2))
                                         for s, t in zip(S.split(chunk), T.split(chunk))])


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


@torch.inference_mode()
def composition_scores(model: Transformer, mode: str) -> Tensor:
    """[layer_A, head_A, layer_B, head_B]: ‖W_OV^A W^B‖_F / (‖W_OV^A‖_F ‖W^B‖_F), zero unless layer_A < layer_B.

    W^B is W_QK (Q-composition: A writes what B's queries read), W_QKᵀ (K-composition: keys) or W_OV
    (V-composition: values). The score is ‖S_A T_Bᵀ‖_F / (‖S_A‖_F ‖T_B‖_F) (``_writers_and_readers``).
    Every pair is taken through Gram matrices, whose rounding in the squared score is about ε; a score
    below ε^(1/3) is then recomputed from S_A T_Bᵀ itself, which keeps every score within about
    ε^(2/3) / 2 of exact (float32: a 1e-5 bound, about 1e-7 seen). Computed in the model's dtype.
    """
    if model.cfg.n_layers < 2:                                                    # no earlier → later pair
        return model.embed.W_E.new_zeros(model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_layers, model.cfg.n_heads)
    S, T, earlier = _writers_and_readers(model, mode)
    half = (model.cfg.n_layers - 1) // 2 * model.cfg.n_heads                      # S's heads in layers ≥ this row …
    norms = _squared_product_norms(S, T, half).sqrt_()                            # … only meet T's from this column
    denominator = (torch.linalg.vector_norm(S, dim=(-1, -2))[:, None]             # [(layer_A head_A) (layer_B head_B)]
                   * torch.linalg.vector_norm(T, dim=(-1, -2)))
    valid = earlier & (denominator > 0)
    cancelled = valid & (norms < torch.finfo(S.dtype).eps ** (1 / 3) * denominator)
    rows, cols = cancelled.nonzero(as_tuple=True)
    norms[rows, cols] = _product_norms(S[rows], T[cols])
    return _by_layer_pair(model, torch.where(valid, norms / denominator.clamp(min=torch.finfo(S.dtype).tiny), 0.0))


@torch.inference_mode()
def composition_ceiling(model: Transformer, mode: str) -> Tensor:
    """[layer_A, head_A, layer_B, head_B]: the highest composition score the two heads' spectra allow.

    ‖W_A W_B‖_F ≤ ‖W_A‖₂ ‖W_B‖_F and ≤ ‖W_A‖_F ‖W_B‖₂, so a score is at most min(σ₁/‖·‖_F) of W_OV^A and
    W^B: a writer with r comparable singular values scores at most about 1/√r, however well its output
    lines up with what the reader reads. Zero unless layer_A < layer_B.
    """
    if model.cfg.n_layers < 2:                                                    # no earlier → later pair
        return model.embed.W_E.new_zeros(model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_layers, model.cfg.n_heads)
    S, T, earlier = _writers_and_readers(model, mode)
    sigma_S, sigma_T = torch.linalg.svdvals(S), torch.linalg.svdvals(T)        # [(layer head) d_head], descending
    spread_S = sigma_S[:, 0] / sigma_S.norm(dim=-1).clamp(min=torch.finfo(S.dtype).tiny)  # σ₁ / ‖·‖_F
    spread_T = sigma_T[:, 0] / sigma_T.norm(dim=-1).clamp(min=torch.finfo(S.dtype).tiny)
    return _by_layer_pair(model, torch.where(earlier, torch.minimum(spread_S[:, None], spread_T), 0.0))


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
