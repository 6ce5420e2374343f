"""Sparse autoencoders: dictionary learning on a layer's activations (Bricken et al. 2023, "Towards Monosemanticity";
Gao et al. 2024, "Scaling and evaluating sparse autoencoders").

An SAE writes each activation x as a sparse, non-negative combination of learned directions (its **dictionary**, the
rows of W_dec) plus a bias:

    f = σ((x − b_dec) W_enc + b_enc)      [batch, d_sae]   the latents' activations
    x̂ = f W_dec + b_dec                    [batch, d_in]    the reconstruction

with σ one of two activations, both in use in the field:

- ``"relu"``: ReLU, with sparsity bought by an L1 penalty on f weighted by each decoder row's norm
  (loss = ‖x − x̂‖² + λ Σ_i f_i ‖W_dec[i]‖), so that shrinking a row cannot dodge the penalty;
- ``"topk"``: keep the k largest pre-activations (ReLU'd), zero the rest: L0 ≤ k by construction, no penalty to
  tune, and no shrinkage of the kept activations.

Weights are named as SAELens names them (``mechlib.sae_lens_format`` reads and writes its layout) and shaped as
TransformerLens shapes a layer: inputs on the left.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from mechlib.config import JsonConfig, whole
from mechlib.shared import Shareable

__all__ = ["ACTIVATIONS", "SAEConfig", "SAE", "SAEStats", "sae_stats", "initialised", "learning_rate", "train_sae", "sae_mb"]

ACTIVATIONS = ("relu", "topk")
LIMITS = {"d_in": (1, 32768), "d_sae": (1, 1 << 20)}
NAME_CHARS = 200  # a hook's or a model's name, at most


@dataclass(frozen=True)
class SAEConfig(JsonConfig):
    """An SAE's sizes and sparsity, and what it reads: a checkpoint's metadata holds it as JSON (``mechlib.io``)."""

    d_in: int                    # width of the activations it reads (d_model for a residual stream, d_mlp for neurons)
    d_sae: int                   # latents: the dictionary's size
    activation: str = "topk"     # one of ACTIVATIONS
    k: int = 16                  # "topk": latents kept per activation
    l1_coefficient: float = 1.0  # "relu": λ, the L1 penalty's weight
    hook_name: str = ""          # the TransformerLens hook it reads ("blocks.0.hook_resid_post"); "" for a toy's hidden
    model_name: str = ""         # the model whose activations it was trained on ("attn-only-2l"); "" for a toy's

    def __post_init__(self) -> None:
        for name, (low, high) in LIMITS.items():
            whole(name, getattr(self, name), low, high)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, not {str(self.activation)[:40]!r}")
        if self.activation == "topk":
            whole("k", self.k, 1, self.d_sae)
        if not isinstance(self.l1_coefficient, int | float) or not 0 <= self.l1_coefficient < float("inf"):
            raise ValueError(f"the L1 coefficient must be a number ≥ 0, not {str(self.l1_coefficient)[:40]}")
        for name in ("hook_name", "model_name"):
            if not isinstance(getattr(self, name), str) or len(getattr(self, name)) > NAME_CHARS:
                raise ValueError(f"{name} must be a string of at most {NAME_CHARS} characters")

    def n_params(self) -> int:
        """W_enc, W_dec and the two biases."""
        return 2 * self.d_in * self.d_sae + self.d_sae + self.d_in

    def estimate_mb(self, batch: int, bytes_per_number: int = 4) -> float:
        """Weights, and one batch of ``batch`` activations' pre-activations, latents and reconstructions, in MB."""
        return (self.n_params() + batch * (2 * self.d_sae + 2 * self.d_in)) * bytes_per_number / 1e6


class SAE(Shareable):
    """A sparse autoencoder with ``cfg.d_sae`` latents over ``cfg.d_in``-wide activations; shared read-only between
    sessions as a model is (``Shareable``)."""

    def __init__(self, cfg: SAEConfig):
        super().__init__()
        self.cfg = cfg
        self.W_enc = nn.Parameter(torch.zeros(cfg.d_in, cfg.d_sae))  # [d_in, d_sae]
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae))             # [d_sae]
        self.W_dec = nn.Parameter(torch.zeros(cfg.d_sae, cfg.d_in))  # [d_sae, d_in]: row i is latent i's direction
        self.b_dec = nn.Parameter(torch.zeros(cfg.d_in))              # [d_in]

    def pre_activations(self, x: Tensor) -> Tensor:  # x: [..., d_in] -> [..., d_sae]
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def encode(self, x: Tensor) -> Tensor:  # x: [..., d_in] -> f: [..., d_sae], non-negative and sparse
        pre = self.pre_activations(x)
        if self.cfg.activation == "relu":
            return torch.relu(pre)
        top = pre.topk(self.cfg.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))

    def decode(self, f: Tensor) -> Tensor:  # f: [..., d_sae] -> x̂: [..., d_in]
        return f @ self.W_dec + self.b_dec

    def forward(self, x: Tensor) -> Tensor:  # x: [..., d_in] -> x̂: [..., d_in]
        return self.decode(self.encode(x))

    def loss(self, x: Tensor) -> tuple[Tensor, Tensor]:  # x: [batch, d_in] -> (loss, f [batch, d_sae])
        """Squared error summed over d_in and averaged over the batch, plus (ReLU) λ Σ_i f_i ‖W_dec[i]‖."""
        f = self.encode(x)
        mse = (self.decode(f) - x).pow(2).sum(-1).mean()
        if self.cfg.activation == "topk":
            return mse, f
        return mse + self.cfg.l1_coefficient * (f * self.W_dec.norm(dim=-1)).sum(-1).mean(), f


@dataclass(frozen=True)
class SAEStats:
    """The field's measures of an SAE on a set of activations."""

    l0: float                   # mean number of latents active per activation
    variance_explained: float   # 1 − Σ‖x − x̂‖² / Σ‖x − mean x‖²
    dead_fraction: float        # share of latents that fire on none of the activations
    mse: float                  # mean over activations of ‖x − x̂‖²


@torch.inference_mode()
def sae_stats(sae: SAE, acts: Tensor, batch_size: int = 4096) -> SAEStats:  # acts: [n, d_in]
    squared, fired, active = 0.0, torch.zeros(sae.cfg.d_sae, dtype=torch.bool), 0.0
    for start in range(0, len(acts), batch_size):
        x = acts[start:start + batch_size]
        f = sae.encode(x)
        squared += float((sae.decode(f) - x).pow(2).sum())
        fired |= (f > 0).any(0).cpu()
        active += float((f > 0).sum())
    total = float((acts - acts.mean(0)).pow(2).sum())
    return SAEStats(l0=active / len(acts), variance_explained=1 - squared / total,
                    dead_fraction=1 - float(fired.float().mean()), mse=squared / len(acts))


def initialised(cfg: SAEConfig, acts: Tensor, generator: torch.Generator) -> SAE:  # acts: [n, d_in]
    """Decoder rows random unit vectors, the encoder their transpose (Conerly et al. 2024), b_dec the activations'
    mean: at the start each latent reads the direction it writes."""
    sae = SAE(cfg).to(acts.device, acts.dtype)
    with torch.no_grad():
        directions = torch.randn(cfg.d_sae, cfg.d_in, generator=generator, dtype=acts.dtype).to(acts.device)
        sae.W_dec.copy_(directions / directions.norm(dim=-1, keepdim=True))
        sae.W_enc.copy_(sae.W_dec.T)
        sae.b_dec.copy_(acts.mean(0))
    return sae


def learning_rate(step: int, steps: int, lr: float, decay: float) -> float:
    """``lr``, then falling linearly to 0 over the last ``decay`` share of the steps (Gao et al. 2024 decay theirs
    over the last part of training; 0: constant). ``step`` counts from 0."""
    return lr if decay <= 0 else lr * min(1.0, (steps - step) / (decay * steps))


def train_sae(acts: Tensor, cfg: SAEConfig, steps: int, *, batch_size: int = 1024, lr: float = 1e-3, seed: int = 0,
              decay: float = 0.0, on_step: Callable[[int, float, "SAE"], None] | None = None) -> SAE:  # acts: [n, d_in]
    """Adam on minibatches drawn from ``acts`` with ``seed``, the step size from ``learning_rate``; after each step the
    decoder's rows are set back to unit norm (TopK; for ReLU the penalty already weighs each row's norm, so they are
    left free). ``on_step(step, loss, sae)`` after every step (from 1): it may evaluate the SAE, or raise to stop the
    training."""
    if steps < 1 or batch_size < 1:
        raise ValueError(f"training needs steps ≥ 1 and batch_size ≥ 1, not {steps} and {batch_size}")
    generator = torch.Generator().manual_seed(seed)
    sae = initialised(cfg, acts, generator)
    optimizer = torch.optim.Adam(sae.parameters(), lr=lr)
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps, lr, decay)
        rows = torch.randint(len(acts), (batch_size,), generator=generator).to(acts.device)
        loss, _ = sae.loss(acts[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if cfg.activation == "topk":
            with torch.no_grad():
                sae.W_dec /= sae.W_dec.norm(dim=-1, keepdim=True)
        if on_step is not None:
            on_step(step + 1, float(loss.detach()), sae)
    return sae.requires_grad_(False).eval()


def sae_mb(cfg: SAEConfig, batch_size: int) -> float:
    """Memory of a training in MB: weights, their gradients and Adam's two moments (4 × 2 d_in d_sae floats), and one
    batch's pre-activations, latents and their gradients (≈ 4 batch d_sae)."""
    weights = 2 * cfg.d_in * cfg.d_sae + cfg.d_sae + cfg.d_in
    return (4 * weights + 4 * batch_size * cfg.d_sae) * 4 / 2**20
