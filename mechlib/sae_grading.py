"""A sparse autoencoder graded by the truth: dictionary learning on the toy model of superposition, whose true feature
directions are known (``mechlib.superposition``), so whether an SAE found the features is a measurement, not a hope.

Each true feature's direction d_i (a column of the toy's W) is compared with every latent's decoder row: its **best
cosine** max_j cos(d_i, W_dec[j]) says how well the dictionary holds it, and it is **recovered** when that reaches
RECOVERED_COSINE. The cosine is signed: a latent's activation is non-negative, so it writes only +W_dec[j], and a row
pointing the opposite way cannot write the feature. Only the features the toy represents are graded: a feature it
dropped has no direction in its hidden activations to find.

Beside it, the field's measures on fresh activations (``sae.sae_stats``): L0, variance explained, dead latents.

The SAE is a ReLU encoder with an L1 penalty (λ = L1_COEFFICIENT), chosen by measurement (``bench/sae_toy.py``: 5
features in 2 dimensions at sparsity 0.9, 10 latents, seeds 0–4): it recovered every feature on 5 of 5 seeds (worst
best cosine ≥ 0.995), paying for it in shrinkage (variance explained ≈ 0.91); TopK with k = 1 recovered them on 4 of 5
(variance explained ≈ 0.99), the fifth left with one latent between two neighbouring features (cosine 0.81 to both)
and one dead. Smaller penalties recover less (λ = 0.1: none of 5).
Dictionary learning succeeds here with enough latents and enough sparsity, and fails, as the theory says it must, with
fewer latents than features (some feature has no latent) or too little sparsity (k as large as the hidden width: any
basis reconstructs every activation, so nothing pulls the rows onto the features).
"""

import time
from dataclasses import dataclass

import numpy as np
from torch import Tensor

from mechlib.device import costs
from mechlib.sae import SAE, SAEConfig, sae_mb, sae_stats, train_sae
from mechlib.superposition import Superposition, hidden_activations, toy_mb, train_toy

__all__ = ["RECOVERED_COSINE", "L1_COEFFICIENT", "SAMPLES", "SAE_STEPS", "SAE_BATCH", "SAE_LR", "best_cosines", "SAEGrade", "grade",
           "ToySAE", "sae_on_toy", "toy_sae_mb", "toy_sae"]

RECOVERED_COSINE = 0.95   # a true feature is recovered when some decoder row is within ≈ 18° of it
L1_COEFFICIENT = 0.3      # λ of the toy's ReLU SAE (the toy's activations have norms up to ≈ 1.1)
SAMPLES = 32_768          # toy activations the SAE trains on; as many fresh ones grade it
SAE_STEPS, SAE_BATCH, SAE_LR = 2000, 1024, 3e-3


def best_cosines(truth: Tensor, W_dec: Tensor) -> tuple[Tensor, Tensor]:  # truth: [n, d_in], W_dec: [d_sae, d_in]
    """(each true direction's best cosine with a decoder row [n], that row's index [n])."""
    unit_truth = truth / truth.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    unit_rows = W_dec / W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (unit_truth @ unit_rows.T).max(dim=-1)                      # [n, d_sae] -> max over latents


@dataclass(frozen=True)
class SAEGrade:
    """An SAE's dictionary against the true feature directions, and the field's measures of it."""

    best_cosine: np.ndarray     # [n]: each true feature's best cosine with a decoder row
    best_latent: np.ndarray     # [n]: the latent that holds it
    recovered: np.ndarray       # [n] bool: best cosine ≥ RECOVERED_COSINE
    l0: float
    variance_explained: float
    dead_fraction: float

    @property
    def n_recovered(self) -> int:
        return int(self.recovered.sum())

    @property
    def all_recovered(self) -> bool:
        return bool(self.recovered.all())

    @property
    def verdict(self) -> str:
        n = len(self.recovered)
        found = "every true feature" if self.all_recovered else f"{self.n_recovered} of {n} true features"
        return (f"the dictionary holds {found} within cosine {RECOVERED_COSINE} (worst best cosine "
                f"{self.best_cosine.min():.3f}); L0 {self.l0:.2f}, variance explained {self.variance_explained:.3f}, "
                f"{self.dead_fraction:.0%} of latents dead")


def grade(sae: SAE, truth: Tensor, acts: Tensor) -> SAEGrade:  # truth: [n, d_in], acts: [batch, d_in]
    cosine, latent = best_cosines(truth, sae.W_dec.detach())
    stats = sae_stats(sae, acts)
    return SAEGrade(cosine.numpy(), latent.numpy(), (cosine >= RECOVERED_COSINE).numpy(), stats.l0,
                    stats.variance_explained, stats.dead_fraction)


@dataclass(frozen=True)
class ToySAE:
    """An SAE trained on a toy model's hidden activations, graded by the toy's features."""

    toy: Superposition
    cfg: SAEConfig
    W_dec: np.ndarray           # [d_sae, m]: the learned dictionary
    grade: SAEGrade             # over the toy's represented features
    graded: np.ndarray          # [n_graded]: which of the toy's features were graded (its represented ones)
    seconds: float              # the SAE's training and grading (the toy's own is toy.seconds)


def sae_on_toy(toy: Superposition, d_sae: int, activation: str = "relu", k: int = 1,
               l1_coefficient: float = L1_COEFFICIENT, seed: int = 0) -> ToySAE:
    """Sample SAMPLES of the toy's hidden activations, train an SAE of ``d_sae`` latents on them, and grade it on as
    many fresh ones against the toy's represented features."""
    start = time.perf_counter()
    cfg = SAEConfig(d_in=toy.n_hidden, d_sae=d_sae, activation=activation, k=k, l1_coefficient=l1_coefficient)
    acts, truth = hidden_activations(toy, SAMPLES, seed)                     # [SAMPLES, m], [n, m]
    sae = train_sae(acts, cfg, SAE_STEPS, batch_size=SAE_BATCH, lr=SAE_LR, seed=seed)
    fresh, _ = hidden_activations(toy, SAMPLES, seed + 1)
    graded = np.flatnonzero(toy.represented)
    return ToySAE(toy, cfg, sae.W_dec.numpy(), grade(sae, truth[graded], fresh), graded, time.perf_counter() - start)


def toy_sae_mb(n_features: int, n_hidden: int, sparsity: float, d_sae: int, *_) -> float:
    """The toy's training, then the SAE's: the larger, beside the SAE's activations (train and grade sets)."""
    sae = sae_mb(SAEConfig(n_hidden, d_sae, k=1), SAE_BATCH)
    return max(toy_mb(n_features, n_hidden), sae) + 2 * SAMPLES * n_hidden * 4 / 2**20


@costs(toy_sae_mb, "the toy model and its sparse autoencoder", trains=True)
def toy_sae(n_features: int, n_hidden: int, sparsity: float, d_sae: int, activation: str = "relu", k: int = 1,
            l1_coefficient: float = L1_COEFFICIENT, importance_decay: float = 1.0, seed: int = 0) -> ToySAE:
    """The toy (``superposition.train_toy``) and its SAE (``sae_on_toy``), both from ``seed``: plain values in, for a
    page's one cached call."""
    toy = train_toy(n_features, n_hidden, sparsity, importance_decay, seed)
    return sae_on_toy(toy, d_sae, activation, k, l1_coefficient, seed)
