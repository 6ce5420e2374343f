"""Factored matrices agree with their dense products (float64, 1e-10)."""

import pytest
import torch

from mechlib.factored import FactoredMatrix


def factors(*batch, m=12, k=3, n=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return FactoredMatrix(torch.randn(*batch, m, k, generator=g, dtype=torch.float64),
                          torch.randn(*batch, k, n, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
def test_norm_equals_dense(batch):
    f = factors(*batch)
    assert f.shape == (*batch, 12, 9) and f.rank_bound == 3
    assert (f.norm() - torch.linalg.matrix_norm(f.dense())).abs().max() <= 1e-10


@pytest.mark.parametrize("batch", [(), (4,)])
def test_svd_equals_dense(batch):
    f = factors(*batch)
    U, S, V = f.svd()
    dense_S = torch.linalg.svdvals(f.dense())[..., :3]
    assert (S - dense_S).abs().max() <= 1e-10
    assert (U @ torch.diag_embed(S) @ V.transpose(-1, -2) - f.dense()).abs().max() <= 1e-10


def test_eigenvalues_equal_the_dense_non_zero_ones():
    f = factors(m=10, n=10, k=3, seed=1)
    mine = sorted(f.eigenvalues().tolist(), key=lambda z: (z.real, z.imag))
    dense = torch.linalg.eigvals(f.dense())
    dense = sorted([z for z in dense.tolist() if abs(z) > 1e-8], key=lambda z: (z.real, z.imag))
    assert len(mine) == len(dense) == 3
    assert max(abs(a - b) for a, b in zip(mine, dense)) <= 1e-10
    with pytest.raises(ValueError, match="square"):
        factors().eigenvalues()


def test_products_stay_factored_and_equal_dense():
    f, g = factors(m=12, n=9, k=3), factors(m=9, n=7, k=2, seed=2)
    product = f @ g
    assert isinstance(product, FactoredMatrix) and product.rank_bound == 3
    assert (product.dense() - f.dense() @ g.dense()).abs().max() <= 1e-10
    t = torch.randn(9, 5, dtype=torch.float64)
    assert ((f @ t).dense() - f.dense() @ t).abs().max() <= 1e-10
    left = torch.randn(4, 12, dtype=torch.float64)
    assert ((left @ f).dense() - left @ f.dense()).abs().max() <= 1e-10
    assert (f.T.dense() - f.dense().T).abs().max() <= 1e-12


def test_row_and_column_selection():
    f = factors()
    assert torch.equal(f.rows([0, 5]).dense(), f.dense()[[0, 5]])
    assert (f.columns(slice(2, 4)).dense() - f.dense()[:, 2:4]).abs().max() <= 1e-12
    with pytest.raises(ValueError, match="inner sizes differ"):
        FactoredMatrix(torch.zeros(3, 2), torch.zeros(3, 2))
