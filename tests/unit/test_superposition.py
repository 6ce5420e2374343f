"""The toy model of superposition (``mechlib.superposition``): the feature dimensionality on directions whose answer is
known by geometry, and the paper's two regimes from training: dense features get one dimension each and the rest
nothing, sparse ones share two dimensions as a pentagon."""

import math

import numpy as np
import pytest
import torch

from mechlib import superposition
from mechlib.device import experiment_mb
from mechlib.superposition import dimensionality, hidden_activations, interference, train_toy

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: as the workers train


def polygon(n: int) -> torch.Tensor:  # -> W [2, n]: n unit directions evenly round the circle
    angles = 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
    return torch.stack([angles.cos(), angles.sin()])


def test_dimensionality_is_the_share_of_a_dimension_each_feature_holds():
    assert torch.allclose(dimensionality(polygon(5)), torch.full((5,), 2 / 5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(interference(polygon(5)), torch.full((5,), 1.5, dtype=torch.float64), atol=1e-12)
    own_and_none = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.5, 0.0]], dtype=torch.float64)   # two own axes, one dropped
    assert dimensionality(own_and_none).tolist() == [1.0, 1.0, 0.0]
    assert interference(own_and_none).tolist() == [0.0, 0.0, 0.0]
    antipodal = torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)    # a pair shares a dimension
    assert torch.allclose(dimensionality(antipodal), torch.tensor([0.5, 0.5, 1.0], dtype=torch.float64))


@pytest.fixture(scope="module")
def dense():
    return train_toy(5, 2, sparsity=0.0, importance_decay=0.9, seed=0)


@pytest.fixture(scope="module")
def sparse():
    return train_toy(5, 2, sparsity=0.9, seed=0)


def test_dense_features_get_a_dimension_each_for_the_most_important_and_nothing_for_the_rest(dense):
    """At S = 0 (importance 0.9^i: with equal importance the dense features' covariance is isotropic, and every pair
    of directions loses alike, so no answer is known) the two most important features take the two dimensions."""
    assert dense.represented.tolist() == [True, True, False, False, False]
    assert dense.own_direction.tolist() == [True, True, False, False, False]
    assert np.allclose(dense.dimensionality[:2], 1, atol=0.02) and (dense.norms[2:] < 0.2).all()
    assert not dense.in_superposition
    assert dense.verdict.startswith("2 of 5 features represented in 2 dimensions, 2 with a direction of their own")


def test_sparse_features_share_two_dimensions_as_a_pentagon(sparse):
    assert sparse.n_represented == 5 and sparse.n_own == 0 and sparse.in_superposition
    assert np.allclose(sparse.dimensionality, 2 / 5, atol=0.02)
    angles = np.sort(np.degrees(np.arctan2(sparse.W[1], sparse.W[0])))
    assert np.allclose(np.diff(np.append(angles, angles[0] + 360)), 72, atol=3)   # neighbours 72° apart
    assert "in superposition: more features than dimensions" in sparse.verdict
    assert sparse.W.shape == (2, 5) and sparse.b.shape == (5,) and (sparse.b < 0).all()  # the bias cuts interference


def test_hidden_activations_are_the_features_written_along_their_directions(sparse):
    h, truth = hidden_activations(sparse, 20_000, seed=3)
    assert h.shape == (20_000, 2) and torch.equal(truth, torch.from_numpy(sparse.W).T)
    assert (h.abs().sum(-1) == 0).float().mean() == pytest.approx(0.9 ** 5, abs=0.01)  # no feature present
    one = h[(h.abs().sum(-1) > 0)]
    best = (torch.nn.functional.normalize(one, dim=-1) @ torch.nn.functional.normalize(truth, dim=-1).T).max(-1).values
    assert (best > 1 - 1e-5).float().mean() > 0.75   # most active samples hold one feature: along its direction


def test_bad_sizes_are_refused_and_the_cost_is_declared():
    with pytest.raises(ValueError, match="fewer dimensions than features"):
        train_toy(3, 3, 0.5)
    with pytest.raises(ValueError, match="sparsity must be in"):
        train_toy(5, 2, 1.0)
    assert experiment_mb(train_toy, 20, 5, 0.9) == superposition.toy_mb(20, 5) > superposition.toy_mb(5, 2) > 0
