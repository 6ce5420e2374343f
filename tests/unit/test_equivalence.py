"""The Equivalence page's experiment: known shapes, passing checks, honest skips."""

import dataclasses

import numpy as np
import pytest
import torch
from einops import rearrange

from mechlib import attention, checks, equivalence


def test_the_step_table_follows_the_readings_numbering_and_shapes():
    """Seed 000 at its sizes (B=1, S=20, V=50,000, D=512, H=8, d_head 64): its nine steps, its copy step, its
    per-head views at 5–7 and 8′; the scale/mask step 6a is marked as ours."""
    rows = {r["step"]: r for r in equivalence.steps(**equivalence.SEED_SIZES)}
    assert list(rows) == ["1", "2", "3", "4", "5", "6", "6a", "7", "8", "9", "8′", "9′"]
    reading = {step: row["as the reading writes it"] for step, row in rows.items()}
    assert reading["1"] == "1 × 20 × 50,000"
    assert reading["2"] == reading["3"] == reading["4"] == reading["8"] == reading["9"] == reading["9′"] == "1 × 20 × 512"
    assert reading["5"] == reading["7"] == "1 × 1 × 20 × 64"
    assert reading["6"] == "1 × 1 × 20 × 20"
    assert reading["8′"] == "1 × 20 × 1 × 512"
    assert rows["5"]["all heads"] == rows["7"]["all heads"] == "1 × 8 × 20 × 64"
    assert rows["6"]["all heads"] == rows["6a"]["all heads"] == "1 × 8 × 20 × 20"
    assert rows["8′"]["all heads"] == "1 × 20 × 8 × 512"
    assert [step for step, row in rows.items() if not row["in the reading?"].startswith("yes")] == ["6a"]
    assert rows["6a"]["in the reading?"] == "no: added here (the reading skips scaling and masking)"
    assert rows["4"]["operation"] == "copy into Q, K and V"


@pytest.mark.parametrize("n_heads, scores", [(8, "1 × 8 × 20 × 20"), (4, "1 × 4 × 20 × 20"), (1, "1 × 1 × 20 × 20")])
def test_step_6_exercise_offers_the_tables_shape_which_follows_H(n_heads, scores):
    sizes = equivalence.SEED_SIZES | {"n_heads": n_heads}
    step6 = next(r for r in equivalence.steps(**sizes) if r["step"] == "6")["all heads"]
    options = equivalence.scores_shape_options(1, 20, 512, n_heads)
    assert step6 == scores and step6 in options and len(options) == len(set(options))
    assert "1 × 1 × 20 × 20" in options and "1 × 20 × 512" in options  # the reading's one-head view, the stream
    assert len(options) == (5 if n_heads == 1 else 6)  # with one head, all heads' shape is one head's


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
    assert result.z.shape == (20, 8, 64) and result.W_O.shape == (8, 64, 512) and result.out.shape == (20, 512)
    assert result.z.dtype == result.W_O.dtype == result.out.dtype == dtype
    assert (result.out[3] == result.attn_out).all()
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


def test_every_size_cuts_W_E_from_one_table():
    small = equivalence._embedding(100, 16, seed=0)
    assert torch.equal(small, equivalence._embedding(5_000, 512, seed=0)[:100, :16])
    with pytest.raises(ValueError, match="exceed W_E's table; choose d_vocab ≤ 50,257 and d_model ≤ 1,024"):
        equivalence.run(batch=1, seq=4, d_vocab=50_258, d_model=16, n_heads=2, seed=0)


def test_one_hot_check_runs_only_where_it_fits_the_memory_it_is_given():
    # Base ≈ 206.3 MB (W_E's whole table); the float32 check adds 4.0 MB, the float64 one 8.0 + 25.6 MB.
    result = equivalence.run(batch=1, seq=20, d_vocab=50_000, d_model=64, n_heads=8, seed=0, memory_mb=215)
    assert result.lookups["float32"] is not None and result.lookups["float32"].passed
    assert result.lookups["float64"] is None
    assert result.lookup_mb["float64"] == pytest.approx((20 * 50_000 * 8 + 50_000 * 64 * 8 + 20 * 64 * 8) / 1e6)


def test_impossible_sizes_are_refused():
    with pytest.raises(ValueError, match="d_model=100 is not divisible by n_heads=8"):
        equivalence.run(batch=1, seq=4, d_vocab=10, d_model=100, n_heads=8, seed=0)
    with pytest.raises(ValueError, match="position=4 is outside the sequence"):
        equivalence.run(batch=1, seq=4, d_vocab=10, d_model=16, n_heads=2, seed=0, position=4)


def test_one_hot_check_is_skipped_above_its_compute_cap():
    result = equivalence.run(batch=2, seq=40, d_vocab=50_000, d_model=512, n_heads=8, seed=0)  # 2.05e9 multiply-adds
    assert result.lookups == {"float32": None, "float64": None}
    assert result.checks["float64"].passed


@pytest.fixture(scope="module")
def seed_run_float64() -> equivalence.EquivalenceResult:
    return equivalence.run(**equivalence.SEED_SIZES, seed=0, dtype="float64", position=3)


@pytest.mark.parametrize("i, j", [(0, 0), (5, 0), (19, 511), (7, 100)])
def test_element_partial_sums_add_to_the_output_element_in_float64(seed_run_float64, i, j):
    """Seed 000's R₁,₁ argument at its sizes: 512 terms, 8 partial sums of 64, one per head."""
    result = seed_run_float64
    element = equivalence.element(result, i, j)
    assert element.terms.shape == (512,) and element.partial_sums.shape == element.per_head.shape == (8,)
    assert abs(element.partial_sums.sum() - result.out[i, j]) <= 1e-10
    assert element.output == result.out[i, j] and abs(element.total - element.output) <= 1e-10
    assert element.check.passed and element.check.tolerance == 1e-10 and element.check.max_abs_diff <= 1e-10
    assert np.allclose(element.terms.reshape(8, 64).sum(1), element.partial_sums, rtol=0, atol=1e-12)
    own = np.einsum("hl,hld->hd", result.z[i], result.W_O)[:, j]  # head h's result z_h W_O^h at [i, j]
    assert np.abs(element.partial_sums - own).max() <= 1e-12
    assert np.abs(element.per_head - own).max() <= 1e-12


def test_element_in_float32_passes_at_float32s_tolerance():
    result = equivalence.run(**equivalence.SEED_SIZES, seed=0, dtype="float32", position=5)
    element = equivalence.element(result, 5, 0)
    assert element.check.tolerance == 1e-5 and element.check.passed
    assert 0 < element.check.max_abs_diff <= 1e-5  # float32 rounding shows: not exact, within tolerance


def test_element_known_answer_and_range_messages():
    """Two heads of one number each: h[0] = (1, 2), column 0 of W_O = (3, 5) → terms 3, 10; R[0, 0] = 13."""
    result = equivalence.run(batch=1, seq=2, d_vocab=5, d_model=2, n_heads=2, seed=0, dtype="float64")
    z = np.array([[[1.0], [2.0]], [[0.0], [0.0]]])  # [pos head d_head]
    W_O = np.array([[[3.0, 4.0]], [[5.0, 6.0]]])    # [head d_head d_model]
    result = dataclasses.replace(result, z=z, W_O=W_O, out=np.array([[13.0, 16.0], [0.0, 0.0]]))
    element = equivalence.element(result, 0, 0)
    assert element.terms.tolist() == [3.0, 10.0] and element.partial_sums.tolist() == [3.0, 10.0]
    assert element.per_head.tolist() == [3.0, 10.0] and element.total == element.output == 13.0
    wrong = equivalence.element(dataclasses.replace(result, out=np.array([[14.0, 16.0], [0.0, 0.0]])), 0, 0)
    assert not wrong.check.passed and wrong.check.max_abs_diff == 1.0
    with pytest.raises(ValueError, match=r"i=2 is outside the sequence; choose 0 … 1"):
        equivalence.element(result, 2, 0)
    with pytest.raises(ValueError, match=r"j=2 is outside d_model; choose 0 … 1"):
        equivalence.element(result, 0, 2)


@pytest.mark.parametrize("difference, bucket", [(0.0, "exactly equal"), (8e-15, "below 1e-10"),
                                                (1e-10, "1e-10 to 1e-05"), (1.7e-6, "1e-10 to 1e-05"),
                                                (1e-5, "1e-10 to 1e-05"), (2e-5, "above 1e-05")])
def test_difference_buckets_edge_at_the_tolerances(difference, bucket):
    assert equivalence.difference_bucket(difference) == bucket and bucket in equivalence.DIFFERENCES


def test_float32_and_float64_readings_land_in_different_buckets():
    result = equivalence.run(**equivalence.SEED_SIZES, seed=0)
    assert equivalence.difference_bucket(result.checks["float64"].max_abs_diff) == "below 1e-10"
    assert equivalence.difference_bucket(result.checks["float32"].max_abs_diff) == "1e-10 to 1e-05"


def test_row_owner_options_hold_the_right_owner_and_the_usual_mistakes():
    assert equivalence.row_owner_options(70, 8, 64) == ["head 1, row 6", "head 2, row 6", "head 6, row 8"]
    assert equivalence.row_owner_options(511, 8, 64) == ["head 7, row 63"]  # head-minor agrees here; 1-based is no head
    assert equivalence.row_owner_options(0, 1, 64) == ["head 0, row 0"]


def test_output_length_and_largest_partial():
    norms = np.array([3.0, 4.0])  # longest 4, at right angles 5, aligned 7
    assert equivalence.output_length(norms, 2.5) == "shorter than every head's"
    assert equivalence.output_length(norms, 3.0) == equivalence.output_length(norms, 4.4) == "about the longest head's"
    assert equivalence.output_length(norms, 4.5) == equivalence.output_length(norms, 5.9) == (
        "about √(Σ_h ‖result_h‖²), as for heads at right angles")
    assert equivalence.output_length(norms, 6.0) == "about Σ_h ‖result_h‖, as for heads all pointing one way"
    assert equivalence.largest_partial(np.array([0.1, -0.5, 0.3])) == 1
