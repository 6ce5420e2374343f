"""The Equivalence page's experiment: known shapes, passing checks, honest skips."""

import pytest
import torch
from einops import rearrange

from mechlib import attention, checks, equivalence


def test_seed_sizes_give_the_seed_table():
    rows = {r["step"]: r["shape"] for r in equivalence.steps(**equivalence.SEED_SIZES)}
    assert rows["1"] == "1 × 20 × 50,000"
    assert rows["2"] == rows["3"] == rows["8a"] == rows["9a"] == rows["9b"] == "1 × 20 × 512"
    assert rows["4"] == rows["7"] == "1 × 8 × 20 × 64"
    assert rows["5"] == rows["6"] == "1 × 8 × 20 × 20"
    assert rows["8b"] == "1 × 20 × 8 × 512"


@pytest.mark.parametrize("row, owner", [(0, (0, 0)), (63, (0, 63)), (64, (1, 0)), (70, (1, 6)), (511, (7, 63))])
def test_wo_row_owner(row, owner):
    assert equivalence.wo_row_owner(row, 64) == owner


def random_W_O(heads: int = 4, d_head: int = 3, d_model: int = 12) -> torch.Tensor:
    return torch.randn(heads, d_head, d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_wo_block_check_passes_head_major_rows_and_fails_head_minor_ones():
    W_O = random_W_O()                                                            # [head d_head d_model]
    head_major = rearrange(W_O, "head d_head d_model -> (head d_head) d_model")
    head_minor = rearrange(W_O, "head d_head d_model -> (d_head head) d_model")
    right = equivalence.wo_block_check(W_O, head_major, checks.TOLERANCE["float64"])
    assert right.passed and right.max_abs_diff == 0.0
    wrong = equivalence.wo_block_check(W_O, head_minor, checks.TOLERANCE["float64"])
    assert not wrong.passed and wrong.max_abs_diff > 0.1


def test_the_concatenated_W_O_is_read_off_concat_then_project(monkeypatch):
    W_O = random_W_O()
    assert torch.equal(equivalence.concatenated_W_O(W_O), rearrange(W_O, "head d_head d_model -> (head d_head) d_model"))
    assert equivalence.wo_block_check(W_O, equivalence.concatenated_W_O(W_O), 1e-10).passed

    def mixed_orders(z, W_O):  # concatenates z head-major but stacks W_O head-minor: a wrong concat reading
        return (rearrange(z, "... head d_head -> ... (head d_head)")
                @ rearrange(W_O, "head d_head d_model -> (d_head head) d_model"))

    monkeypatch.setattr(attention, "concat_then_project", mixed_orders)
    assert not equivalence.wo_block_check(W_O, equivalence.concatenated_W_O(W_O), 1e-10).passed


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_run_at_seed_sizes_passes_every_check(dtype):
    result = equivalence.run(**equivalence.SEED_SIZES, seed=0, dtype=dtype, position=3)
    assert result.checks["float64"].max_abs_diff <= 1e-10
    assert result.checks["float32"].passed and result.checks["float32"].tolerance == 1e-5
    assert all(check is not None and check.max_abs_diff == 0.0 for check in result.lookups.values())
    assert result.lookup_mb["float32"] == pytest.approx((20 * 50_000 * 4 + 20 * 512 * 4) / 1e6)
    assert result.lookup_mb["float64"] == pytest.approx((20 * 50_000 * 8 + 50_000 * 512 * 8 + 20 * 512 * 8) / 1e6)
    assert result.wo_block_check.passed and result.wo_block_check.max_abs_diff == 0.0
    assert result.head_norms.shape == (8,) and result.head_results.shape == (8, 512)
    assert result.position_check.passed
    assert abs(result.head_results.sum(0) - result.attn_out).max() <= (1e-10 if dtype == "float64" else 1e-4)
    assert set(result.time_ms) == {"concat_then_project", "per_head_then_sum"} and min(result.time_ms.values()) > 0


def test_compare_fails_on_a_perturbed_tensor():
    reference = torch.linspace(-50, 50, 101, dtype=torch.float64)
    assert checks.compare(reference.clone(), reference, 1e-10).passed
    bumped = reference.clone()
    bumped[80] += 30 * 1e-10 * 31  # |ref| = 30 there: 31× the allowed 30 · 1e-10
    check = checks.compare(bumped, reference, 1e-10)
    assert not check.passed and check.max_scaled_diff == pytest.approx(31e-10, rel=1e-3)


def test_one_hot_check_runs_only_where_it_fits_the_budget(monkeypatch):
    # Base ≈ 12.9 MB; the float32 check adds 4.0 MB, the float64 one 8.0 + 25.6 MB.
    monkeypatch.setenv("MECHLIB_MEMORY_BUDGET_MB", "20")
    result = equivalence.run(batch=1, seq=20, d_vocab=50_000, d_model=64, n_heads=8, seed=0)
    assert result.lookups["float32"] is not None and result.lookups["float32"].passed
    assert result.lookups["float64"] is None
    assert result.lookup_mb["float64"] == pytest.approx((20 * 50_000 * 8 + 50_000 * 64 * 8 + 20 * 64 * 8) / 1e6)


def test_impossible_and_memory_busting_sizes_are_refused(monkeypatch):
    with pytest.raises(ValueError, match="d_model=100 is not divisible by n_heads=8"):
        equivalence.run(batch=1, seq=4, d_vocab=10, d_model=100, n_heads=8, seed=0)
    with pytest.raises(ValueError, match="position=4 is outside the sequence"):
        equivalence.run(batch=1, seq=4, d_vocab=10, d_model=16, n_heads=2, seed=0, position=4)
    monkeypatch.setenv("MECHLIB_MEMORY_BUDGET_MB", "50")
    # 4 B · (V·D + S·D + 4·D²) for the weights, 8 B · (6·B·S·D + 2·B·H·S² + B·S·H·D + 4·D²) for one
    # precision's readings, 8 B · (B·S·H·D + B·S·D) kept: 221.6 + 34.0 + 0.3 MB
    with pytest.raises(ValueError, match="would need about 256 MB, above this server's budget of 50 MB"):
        equivalence.run(batch=1, seq=4, d_vocab=50_000, d_model=1024, n_heads=8, seed=0)


def test_one_hot_check_is_skipped_above_its_compute_cap():
    result = equivalence.run(batch=2, seq=40, d_vocab=50_000, d_model=512, n_heads=8, seed=0)  # 2.05e9 multiply-adds
    assert result.lookups == {"float32": None, "float64": None}
    assert result.checks["float64"].passed
