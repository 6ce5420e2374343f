"""The sparse autoencoder's core (``mechlib.sae``): TopK keeps exactly k latents and unit decoder rows, the ReLU SAE's
penalty is λ Σ f_i ‖W_dec[i]‖, the field's measures on an SAE whose answer is known, and clear refusals."""

import pytest
import torch

from mechlib.sae import SAE, SAEConfig, sae_mb, sae_stats, train_sae


def acts(n: int = 1024, d_in: int = 8, seed: int = 0) -> torch.Tensor:  # [n, d_in]
    return torch.randn(n, d_in, generator=torch.Generator().manual_seed(seed)) + 1.0


def test_topk_fires_at_most_k_latents_and_keeps_its_decoder_rows_unit():
    sae = train_sae(acts(), SAEConfig(d_in=8, d_sae=32, activation="topk", k=3), 50, batch_size=256, lr=1e-2)
    fired = (sae.encode(acts(seed=1)) > 0).sum(-1)                       # [n]
    assert fired.max() <= 3 and fired.float().mean() > 2                  # ≤ k always, and k nearly always
    assert sae_stats(sae, acts(seed=1)).l0 <= 3
    assert torch.allclose(sae.W_dec.norm(dim=-1), torch.ones(32), atol=1e-6)


def test_the_relu_penalty_weighs_each_latent_by_its_decoder_rows_norm():
    sae = train_sae(acts(), SAEConfig(d_in=8, d_sae=16, activation="relu", l1_coefficient=0.5), 20, batch_size=256)
    x = acts(64, seed=2)
    with torch.no_grad():
        sae.W_dec[3] *= 4                                                 # a longer row pays more per unit of f
        loss, f = sae.loss(x)
        mse = (sae.decode(f) - x).pow(2).sum(-1).mean()
    assert loss == pytest.approx(float(mse + 0.5 * (f * sae.W_dec.norm(dim=-1)).sum(-1).mean()), rel=1e-6)
    assert float((f * sae.W_dec.norm(dim=-1)).sum(-1).mean()) > float(f.sum(-1).mean()) * 1.01


def test_a_perfect_reconstruction_explains_all_the_variance():
    """Latents ±e_j (W_enc = [I, −I], W_dec its transpose, biases 0): ReLU(x) − ReLU(−x) = x, each coordinate
    written by exactly one of its two latents. A latent that never fires is dead."""
    d_in = 6
    sae = SAE(SAEConfig(d_in=d_in, d_sae=2 * d_in + 1, activation="relu")).double()
    eye = torch.eye(d_in, dtype=torch.float64)
    with torch.no_grad():
        sae.W_enc[:, : 2 * d_in] = torch.cat([eye, -eye], dim=1)
        sae.W_dec[: 2 * d_in] = torch.cat([eye, -eye], dim=0)
        sae.b_enc[-1] = -1.0                                              # reads nothing, fires never
    x = torch.randn(500, d_in, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    stats = sae_stats(sae, x, batch_size=128)
    assert stats.variance_explained == 1.0 and stats.mse == 0.0
    assert stats.l0 == d_in and stats.dead_fraction == pytest.approx(1 / (2 * d_in + 1))


def test_a_bad_config_or_training_is_refused_with_what_to_choose():
    with pytest.raises(ValueError, match="activation must be one of"):
        SAEConfig(d_in=8, d_sae=16, activation="gelu")
    with pytest.raises(ValueError, match="k=17 is out of range; choose k between 1 and 16"):
        SAEConfig(d_in=8, d_sae=16, k=17)
    with pytest.raises(ValueError, match="d_sae=0 is out of range"):
        SAEConfig(d_in=8, d_sae=0)
    with pytest.raises(ValueError, match="L1 coefficient must be a number ≥ 0"):
        SAEConfig(d_in=8, d_sae=16, activation="relu", l1_coefficient=-1.0)
    with pytest.raises(ValueError, match="training needs steps ≥ 1"):
        train_sae(acts(), SAEConfig(d_in=8, d_sae=16), 0)
    assert sae_mb(SAEConfig(d_in=128, d_sae=512), 1024) > sae_mb(SAEConfig(d_in=128, d_sae=512), 1)
