"""QK and OV circuits, composition, copying and path expansion (Elhage et al. 2021).

Every matrix here has rank ≤ d_head and is kept as a ``FactoredMatrix``: a vocab × vocab circuit
is never formed unless a page asks for a few of its rows.
"""

import torch
from torch import Tensor

from mechlib import residual
from mechlib.factored import FactoredMatrix
from mechlib.model import Cache, Transformer

__all__ = ["qk_circuit", "positional_qk_circuit", "ov_circuit", "composition_scores", "random_baseline",
           "empirical_baseline", "copying_scores", "ov_eigenvalues", "path_expansion", "skip_trigrams", "virtual_ov"]

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


@torch.inference_mode()
def composition_scores(model: Transformer, mode: str) -> Tensor:
    """[layer_A, head_A, layer_B, head_B]: ‖W_OV^A W^B‖_F / (‖W_OV^A‖_F ‖W^B‖_F), zero unless layer_A < layer_B.

    W^B is W_QK (Q-composition: A writes what B's queries read), W_QKᵀ (K-composition: keys) or W_OV
    (V-composition: values). Through d_head-sized factors, W_OV^A acts like S_A = R_V W_O (W_V = Q_V R_V)
    and W^B like T_B (e.g. W_Q R_Kᵀ), so ‖W_OV^A W^B‖_F = ‖S_A T_B‖_F, a d_head × d_head product: one
    matrix product per later layer gives it for every earlier head. Computed in the model's dtype.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choose 'Q', 'K' or 'V'")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    W_Q, W_K, W_V, W_O = (torch.stack([getattr(b.attn, name) for b in model.blocks])
                          for name in ("W_Q", "W_K", "W_V", "W_O"))               # [layer head …]
    S = _orthonormal_left(W_V, W_O)                                               # [layer head d_head d_model]
    first, second = {"Q": (W_Q, W_K), "K": (W_K, W_Q), "V": (W_V, W_O.transpose(-1, -2))}[mode]
    T = _orthonormal_left(second, first.transpose(-1, -2))                        # T_Bᵀ: [layer head d_head d_model]
    dh, d = S.shape[-2], S.shape[-1]
    scores = torch.zeros(L, H, L, H, dtype=S.dtype, device=S.device)
    for later in range(1, L):                                                     # only earlier → later pairs
        products = S[:later].reshape(later * H * dh, d) @ T[later].reshape(H * dh, d).T  # [(earlier head dh) (head dh)]
        scores[:later, :, later] = products.pow_(2).reshape(later, H, dh, H, dh).sum((2, 4)).sqrt()
    norms_A = S.pow(2).sum((-1, -2)).sqrt()                                       # [layer head]
    norms_B = T.pow(2).sum((-1, -2)).sqrt()                                       # [layer head]
    denominator = norms_A[:, :, None, None] * norms_B[None, None]
    return torch.where(denominator > 0, scores / denominator.clamp(min=torch.finfo(S.dtype).tiny), 0.0)


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
