"""An SAE graded by the toy model's true features (``mechlib.sae_grading``): the best cosine on directions whose answer
is known, SAELens's cosine beside it, and dictionary learning succeeding and failing where theory says it must."""

import math

import numpy as np
import pytest
import torch
from sae_lens.util import cosine_similarities

from mechlib import sae_grading
from mechlib.device import experiment_mb
from mechlib.sae_grading import RECOVERED_COSINE, best_cosines, sae_on_toy, toy_sae
from mechlib.superposition import train_toy

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: as the workers train


def test_each_true_feature_gets_its_best_signed_cosine_with_a_decoder_row():
    truth = torch.eye(3, dtype=torch.float64)
    rows = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 1.0]], dtype=torch.float64)
    cosine, latent = best_cosines(truth, rows)
    assert torch.allclose(cosine, torch.tensor([1 / math.sqrt(2), 1.0, 1 / math.sqrt(2)], dtype=torch.float64))
    assert latent.tolist() == [0, 1, 3]   # not row 2, −e₃: a non-negative latent cannot write +e₃ with it
    assert torch.allclose(cosine, cosine_similarities(truth, rows).max(dim=1).values)   # SAELens's cosine


@pytest.fixture(scope="module")
def pentagon():
    toy = train_toy(5, 2, sparsity=0.9, seed=0)
    assert toy.n_represented == 5
    return toy


def test_enough_latents_and_sparsity_recover_every_true_feature(pentagon):
    found = sae_on_toy(pentagon, d_sae=10, seed=0)                     # ReLU + L1 at λ = L1_COEFFICIENT
    assert found.grade.all_recovered and found.grade.n_recovered == 5 and found.graded.tolist() == [0, 1, 2, 3, 4]
    assert (found.grade.best_cosine >= RECOVERED_COSINE).all() and len(set(found.grade.best_latent)) == 5
    assert found.grade.l0 < 1.1 and found.grade.variance_explained > 0.85
    assert found.grade.verdict.startswith("the dictionary holds every true feature within cosine 0.95")


def test_fewer_latents_than_features_must_miss_one(pentagon):
    """The pentagon's features are 72° apart and a recovered one has a row within 18° (cos 0.95): no row serves two,
    so 4 latents recover at most 4 of 5."""
    short = sae_on_toy(pentagon, d_sae=4, seed=0)
    assert not short.grade.all_recovered and short.grade.n_recovered <= 4
    assert "of 5 true features" in short.grade.verdict


def test_too_little_sparsity_reconstructs_everything_and_recovers_no_dictionary(pentagon):
    """With k = 2, as many latents as the toy has dimensions, any two rows that span the plane reconstruct every
    activation: the loss no longer pulls the rows onto the features."""
    dense = sae_on_toy(pentagon, d_sae=10, activation="topk", k=2, seed=0)
    assert dense.grade.variance_explained > 0.99 and not dense.grade.all_recovered


def test_the_page_call_trains_both_and_declares_its_cost():
    both = toy_sae(5, 2, 0.9, 10, seed=0)
    assert both.toy.n_represented == 5 and both.grade.all_recovered and both.W_dec.shape == (10, 2)
    assert np.isfinite(both.seconds) and experiment_mb(toy_sae, 5, 2, 0.9, 10) == sae_grading.toy_sae_mb(5, 2, 0.9, 10)
