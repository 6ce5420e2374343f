"""The toy model of superposition (Elhage et al. 2022, "Toy Models of Superposition"): n sparse features squeezed
into m < n dimensions and read back out through a ReLU.

A feature vector x ∈ [0, 1]ⁿ has each feature present with probability 1 − S (S the **sparsity**) and, when present,
uniform in [0, 1]. The model stores it in m dimensions and reconstructs it:

    h  = W x                 [m]    the hidden activations (W: [m, n], column W_i is feature i's direction)
    x' = ReLU(Wᵀ h + b)      [n]

trained on the **importance**-weighted squared error Σ_i I_i (x_i − x'_i)², I_i = decay^i. Dense features (S = 0)
get m orthogonal directions and the rest nothing; sparse ones share the m dimensions: **superposition**, e.g. five
features in a pentagon in two dimensions. A feature's **dimensionality** D_i = ‖W_i‖² / Σ_j (Ŵ_i · W_j)² is the share
of a dimension it holds: 1 with a dimension of its own, 2/5 in the pentagon, 1/2 in an antipodal pair, 0 when it is
not represented.

Several instances (initialisations) train at once, batched; the one with the lowest loss on a fresh sample is kept,
as the paper picks among its instances: an instance stuck with a feature folded onto another loses to one without.
"""

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib.device import costs

__all__ = ["N_FEATURES", "N_HIDDEN", "REPRESENTED_NORM", "OWN_INTERFERENCE", "INSTANCES", "STEPS", "BATCH", "LR",
           "EVAL_BATCH", "importances", "sample_features", "dimensionality", "interference", "Superposition",
           "toy_mb", "train_toy", "hidden_activations"]

N_FEATURES, N_HIDDEN = (5, 20), (2, 5)  # the ranges a page offers: n features into m dimensions
REPRESENTED_NORM = 0.5     # feature i is represented when ‖W_i‖ ≥ this (a learned one reaches ≈ 1, a dropped one ≈ 0)
OWN_INTERFERENCE = 0.1     # …and has a direction of its own when also Σ_{j≠i} (Ŵ_i · W_j)² ≤ this (no other feature
                           # projects onto it: D_i ≥ 0.9 at ‖W_i‖ = 1; the pentagon's neighbours put 1.5 there)
INSTANCES = 4              # initialisations trained at once; the best on a fresh sample is kept
STEPS, BATCH, LR = 2000, 1024, 1e-2
EVAL_BATCH = 16_384


def importances(n_features: int, decay: float) -> Tensor:  # -> [n]
    """I_i = decay^i: equal for decay 1, the paper's 0.9 makes each feature matter less than the one before."""
    return decay ** torch.arange(n_features, dtype=torch.float32)


def sample_features(shape: tuple[int, ...], sparsity: float, generator: torch.Generator) -> Tensor:
    """Features uniform in [0, 1], each zero with probability ``sparsity``: [*shape] (the last axis the features)."""
    present = torch.rand(shape, generator=generator) >= sparsity
    return torch.rand(shape, generator=generator) * present


def dimensionality(W: Tensor) -> Tensor:  # W: [m, n] -> D: [n]
    """D_i = ‖W_i‖² / Σ_j (Ŵ_i · W_j)²: 0 for a feature with no direction (‖W_i‖ = 0)."""
    norms = W.norm(dim=0)                                        # [n]
    unit = W / norms.clamp_min(1e-12)                           # [m, n]
    projections = (unit.T @ W).pow(2).sum(-1)                   # [n]: Σ_j (Ŵ_i · W_j)², the j = i term ‖W_i‖²
    return torch.where(norms > 0, norms.pow(2) / projections.clamp_min(1e-24), torch.zeros_like(norms))


def interference(W: Tensor) -> Tensor:  # W: [m, n] -> [n]
    """Σ_{j≠i} (Ŵ_i · W_j)²: how much the other features write along feature i's direction."""
    norms = W.norm(dim=0)
    return ((W / norms.clamp_min(1e-12)).T @ W).pow(2).sum(-1) - norms.pow(2)


@dataclass(frozen=True)
class Superposition:
    """A trained toy model and what it did with its features."""

    n_features: int
    n_hidden: int
    sparsity: float
    importance_decay: float
    seed: int
    W: np.ndarray                # [m, n]: column i is feature i's direction
    b: np.ndarray                # [n]
    norms: np.ndarray            # [n]: ‖W_i‖
    dimensionality: np.ndarray   # [n]: D_i
    interference: np.ndarray     # [n]: Σ_{j≠i} (Ŵ_i · W_j)²
    represented: np.ndarray      # [n] bool: ‖W_i‖ ≥ REPRESENTED_NORM
    own_direction: np.ndarray    # [n] bool: represented, with interference ≤ OWN_INTERFERENCE
    loss: float                  # the kept instance's importance-weighted loss on a fresh sample of EVAL_BATCH
    seconds: float               # the training's wall time

    @property
    def n_represented(self) -> int:
        return int(self.represented.sum())

    @property
    def n_own(self) -> int:
        return int(self.own_direction.sum())

    @property
    def in_superposition(self) -> bool:
        """More features represented than there are dimensions to hold them."""
        return self.n_represented > self.n_hidden

    @property
    def verdict(self) -> str:
        where = ("in superposition: more features than dimensions" if self.in_superposition
                 else "no superposition: at most one feature per dimension")
        return (f"{self.n_represented} of {self.n_features} features represented in {self.n_hidden} dimensions, "
                f"{self.n_own} with a direction of their own; {where}")


def toy_mb(n_features: int, n_hidden: int, *_) -> float:
    """A training's memory in MB: per instance a batch of features, their reconstruction and both gradients
    (4 batch n floats) and the hidden layer (2 batch m), and the evaluation sample's features and output."""
    return (INSTANCES * BATCH * (4 * n_features + 2 * n_hidden) + 2 * EVAL_BATCH * INSTANCES * n_features) * 4 / 2**20


def _reconstruct(W: Tensor, b: Tensor, x: Tensor) -> Tensor:  # W: [inst, m, n], b: [inst, n], x: [inst, batch, n]
    """x' = ReLU(Wᵀ W x + b) for each instance, one matmul each: torch's batched matmul of these small shapes took
    44 ms a step on 2 threads beside a busy neighbour (0.19 ms on one); one matmul per instance 0.47 ms on either."""
    return torch.stack([torch.relu((x_i @ W_i.T) @ W_i + b_i)      # [batch, m] then [batch, n]
                        for W_i, b_i, x_i in zip(W, b, x, strict=True)])


def _losses(W: Tensor, b: Tensor, x: Tensor, importance: Tensor) -> Tensor:  # -> [inst]
    return ((x - _reconstruct(W, b, x)).pow(2) * importance).sum(-1).mean(-1)


@costs(toy_mb, "the toy model of superposition's training", trains=True)
def train_toy(n_features: int, n_hidden: int, sparsity: float, importance_decay: float = 1.0, seed: int = 0,
              steps: int = STEPS) -> Superposition:
    """INSTANCES toy models trained at once (Adam, ``steps`` steps of BATCH fresh samples, the step size falling
    linearly to 0 over the last half); the one with the lowest loss on a fresh sample is kept."""
    if not 1 <= n_hidden < n_features:
        raise ValueError(f"superposition needs fewer dimensions than features: 1 ≤ m < n, not m = {n_hidden}, "
                         f"n = {n_features}")
    if not 0 <= sparsity < 1 or not 0 < importance_decay <= 1 or steps < 1:
        raise ValueError(f"sparsity must be in [0, 1), the importance decay in (0, 1] and steps ≥ 1, not {sparsity}, "
                         f"{importance_decay} and {steps}")
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    importance = importances(n_features, importance_decay)
    W = (torch.randn(INSTANCES, n_hidden, n_features, generator=generator)
         * (2 / (n_hidden + n_features)) ** 0.5).requires_grad_()      # Xavier normal, as the paper's code
    b = torch.zeros(INSTANCES, n_features, requires_grad=True)
    optimizer = torch.optim.Adam([W, b], lr=LR)
    decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, 2 * (1 - step / steps)))
    for _ in range(steps):
        x = sample_features((INSTANCES, BATCH, n_features), sparsity, generator)
        loss = _losses(W, b, x, importance).sum()    # instances are independent: their sum trains each
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        decay.step()
    with torch.no_grad():
        held_out = _losses(W, b, sample_features((INSTANCES, EVAL_BATCH, n_features), sparsity, generator), importance)
        best = int(held_out.argmin())
        W_best, b_best = W[best].detach(), b[best].detach()
        norms, crowding = W_best.norm(dim=0), interference(W_best)
    represented = norms >= REPRESENTED_NORM
    return Superposition(n_features, n_hidden, sparsity, importance_decay, seed, W_best.numpy(), b_best.numpy(),
                         norms.numpy(), dimensionality(W_best).numpy(), crowding.numpy(), represented.numpy(),
                         (represented & (crowding <= OWN_INTERFERENCE)).numpy(), float(held_out[best]),
                         time.perf_counter() - start)


def hidden_activations(toy: Superposition, n_samples: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """(h = W x on ``n_samples`` fresh feature vectors [n_samples, m], the true feature directions Wᵀ [n, m]): what a
    sparse autoencoder reads, and what it should find."""
    generator = torch.Generator().manual_seed(seed)
    W = torch.from_numpy(toy.W)                                                  # [m, n]
    x = sample_features((n_samples, toy.n_features), toy.sparsity, generator)   # [n_samples, n]
    return x @ W.T, W.T.clone()
