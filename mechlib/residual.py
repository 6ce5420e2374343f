"""The residual stream (Elhage et al. 2021): every component reads from it and adds to it.

The final residual is exactly the sum of what was written: the token embedding, the positional
embedding (standard positions), each head's result, each attention output bias, each MLP's
output and bias. The logit lens reads the stream at every layer boundary through the final
LayerNorm and W_U; direct logit attribution splits one logit into the components' shares.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from mechlib.model import Cache, Transformer

__all__ = ["Ledger", "ledger", "boundaries", "logit_lens", "direct_logit_attribution", "subspace_overlap",
           "random_overlap"]


@dataclass(frozen=True)
class Ledger:
    labels: list[str]   # one per component: "embed", "pos_embed", "L0H1", "L0 attn bias", "L1 MLP", "L1 MLP bias"
    terms: Tensor       # [component batch pos d_model]; their sum is the final residual


@torch.inference_mode()
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


@torch.inference_mode()
def final_residual(model: Transformer, cache: Cache) -> Tensor:
    """The residual after the last block (before the final LayerNorm): [batch pos d_model]."""
    n = model.cfg.n_layers
    return cache[f"blocks.{n - 1}.hook_resid_post"] if n else ledger(model, cache).terms.sum(0)


@torch.inference_mode()
def boundaries(model: Transformer, cache: Cache) -> Tensor:
    """The residual at every layer boundary: before block 0, …, after the last block: [n_layers+1 batch pos d_model]."""
    n = model.cfg.n_layers
    stream = [cache[f"blocks.{layer}.hook_resid_pre"] for layer in range(n)]
    return torch.stack(stream + [final_residual(model, cache)])


def unembed(model: Transformer, resid: Tensor) -> Tensor:
    """The model's own read-out of a residual: final LayerNorm (if any), then W_U and b_U."""
    if model.cfg.normalization == "LN":
        resid = model.ln_final(resid, None, "ln_final")
    return resid @ model.unembed.W_U + model.unembed.b_U


@torch.inference_mode()
def logit_lens(model: Transformer, cache: Cache) -> Tensor:
    """Logits read at every layer boundary, each through the final LayerNorm: [n_layers+1 batch pos d_vocab].
    The last equals the model's logits."""
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

    A head writes into the row space of its W_O (rank ≤ d_head). The overlap of two such subspaces is the
    mean squared cosine of their principal angles, ‖Q₁ᵀQ₂‖²_F / d_head: 1 when equal, 0 when orthogonal.
    """
    bases, labels = [], []
    for layer, block in enumerate(model.blocks):
        for head in range(model.cfg.n_heads):
            basis, _ = torch.linalg.qr(block.attn.W_O[head].T.double())       # [d_model d_head], orthonormal
            bases.append(basis)
            labels.append(f"L{layer}H{head}")
    stacked = torch.stack(bases)                                               # [head d_model d_head]
    products = torch.einsum("amk,bmn->abkn", stacked, stacked)                 # [head head d_head d_head]
    return labels, products.pow(2).sum((-1, -2)) / model.cfg.d_head


def random_overlap(d_model: int, d_head: int) -> float:
    """The expected overlap of two random d_head-dimensional subspaces of a d_model-dimensional space."""
    return d_head / d_model
