"""Patterns and messages: regrouping, rank, non-uniqueness, scores from W_QK, messages add up."""

import numpy as np
import pytest
import torch

from mechlib import attention, patterns
from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.unit.helpers import randomised

CONFIGS = [
    ModelConfig(n_layers=2, d_model=24, n_heads=3, d_vocab=30, n_ctx=10),
    ModelConfig(n_layers=2, d_model=24, n_heads=4, d_vocab=30, n_ctx=10, d_mlp=48, normalization="LN"),
    ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=20, n_ctx=8, positional="shortformer", normalization="LN"),
]
# Heads as wide as the stream or wider (d_head set explicitly, as an uploaded checkpoint may): rank ≤ d_head is vacuous
WIDE = [
    ModelConfig(n_layers=1, d_model=8, n_heads=2, d_head=8, d_vocab=20, n_ctx=8),
    ModelConfig(n_layers=2, d_model=8, n_heads=2, d_head=12, d_vocab=20, n_ctx=8, normalization="LN"),
]


def setup(cfg, dtype=torch.float64):
    model = randomised(cfg).to(dtype)
    return model, tuple(torch.randint(0, cfg.d_vocab, (cfg.n_ctx,), generator=torch.Generator().manual_seed(3)).tolist())


@pytest.mark.parametrize("cfg", CONFIGS + WIDE)
def test_regrouping_is_exact_and_counts_multiply_adds(cfg):
    model, ids = setup(cfg)
    result = patterns.regrouping(model, ids, cfg.n_layers - 1, 1)
    assert result.check.passed and result.check.tolerance == 1e-10 and result.check.max_abs_diff <= 1e-10
    n, dh, d = cfg.n_ctx, cfg.d_head, cfg.d_model
    assert result.macs == {"((QKᵀ)V)O": n * n * dh + n * dh * d, "(QKᵀ)(VO)": n * dh * d + n * n * d}
    assert all(t > 0 for t in result.time_ms.values())


@pytest.mark.parametrize("wrong_head", [0, 2])
def test_regrouping_is_checked_against_the_models_own_results(wrong_head, monkeypatch):
    """The old check compared (A V) W_O with A (V W_O), both computed here: a model whose per-head results
    (hook_result) were wrong still passed. Now a wrong result of any head, chosen or not, fails."""
    model, ids = setup(CONFIGS[0])
    per_head = attention.per_head_results

    def off_by_a_little(z, W_O):                          # one head's result nudged, in the model's forward only
        results = per_head(z, W_O).clone()
        results[..., wrong_head, :] += 1e-6
        return results

    monkeypatch.setattr(attention, "per_head_results", off_by_a_little)
    check = patterns.regrouping(model, ids, 1, 1).check
    assert not check.passed and check.max_abs_diff == pytest.approx(1e-6, rel=1e-3)


def test_regrouping_float32_within_the_models_tolerance():
    model, ids = setup(CONFIGS[1], torch.float32)
    check = patterns.regrouping(model, ids, 0, 0).check
    assert check.passed and check.tolerance == 1e-5


@pytest.mark.parametrize("cfg", CONFIGS)
def test_W_QK_and_W_OV_have_rank_at_most_d_head(cfg):
    model, _ = setup(cfg)
    result = patterns.ranks(model, 0, 0)
    assert not result.vacuous
    for name, values in result.spectra.items():
        assert len(values) == cfg.d_model and result.ranks[name] == cfg.d_head, name
        assert values[cfg.d_head - 1] > 1e-6 and result.beyond[name] <= 1e-10, name


@pytest.mark.parametrize("cfg", [ModelConfig(n_layers=1, d_model=8, n_heads=1, d_vocab=10, n_ctx=6)] + WIDE)
def test_rank_at_most_d_head_is_vacuous_when_d_head_reaches_d_model(cfg):
    """d_head ≥ d_model (one head, or d_head set wider): no singular value lies past d_head, so rank ≤ d_head holds
    for any matrix. With d_head > d_model the old page indexed σ_{d_head} of d_model values and raised IndexError."""
    model, _ = setup(cfg)
    result = patterns.ranks(model, 0, 1 % cfg.n_heads)
    assert result.vacuous
    assert all(len(values) == cfg.d_model for values in result.spectra.values())
    assert result.ranks == {"W_QK": 8, "W_OV": 8} and result.beyond == {"W_QK": 0.0, "W_OV": 0.0}


@pytest.mark.parametrize("cfg", CONFIGS + WIDE)
def test_only_the_products_matter(cfg):
    model, ids = setup(cfg)
    result = patterns.non_uniqueness(model, ids, 0, 1, seed=0)
    for check in (result.pattern, result.messages):
        assert check.passed and check.tolerance == 1e-10 and check.max_abs_diff <= 1e-10


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_scores_from_W_QK_equal_the_cached_scores(cfg):
    model, _ = setup(cfg)
    tokens = torch.randint(0, cfg.d_vocab, (2, cfg.n_ctx), generator=torch.Generator().manual_seed(3))
    _, cache = model.run_with_cache(tokens)
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            mine = patterns.scores_from_W_QK(model, cache, layer, head)
            cached = cache[f"blocks.{layer}.attn.hook_attn_scores"][:, head]
            causal = torch.isfinite(cached)
            assert torch.equal(causal, torch.isfinite(mine))
            assert (mine[causal] - cached[causal]).abs().max() <= 1e-10


@pytest.mark.parametrize("cfg", CONFIGS + WIDE)
def test_scores_and_pattern(cfg):
    model, ids = setup(cfg)
    result = patterns.scores(model, ids, 0, 1)
    assert result.check.passed and result.check.max_abs_diff <= 1e-10
    n = cfg.n_ctx
    above = np.triu(np.ones((n, n), dtype=bool), 1)
    assert np.isneginf(result.scores[above]).all() and np.isfinite(result.scores[~above]).all()
    assert (result.pattern[above] == 0).all() and np.allclose(result.pattern.sum(-1), 1, atol=1e-12)


@pytest.mark.parametrize("cfg", CONFIGS + WIDE)
def test_weighted_messages_equal_the_head_output(cfg):
    model, ids = setup(cfg)
    result = patterns.messages(model, ids, 0, 1, dest=cfg.n_ctx - 1)
    assert result.check.passed and result.check.tolerance == 1e-10
    assert result.weights.shape == (cfg.n_ctx,) and abs(result.weights.sum() - 1) <= 1e-12
    assert len(result.top_tokens) == cfg.n_ctx and all(len(t) == patterns.TOP_PUSHED for t in result.top_tokens)
    early = patterns.messages(model, ids, 0, 1, dest=2)
    assert early.weights.shape == (3,) and early.check.passed


def test_effective_rank_counts_the_singular_values_that_hold_the_share():
    assert patterns.effective_rank(np.array([3.0, 1.0, 0.1])) == 2   # 9 / 10.01 < 0.9 ≤ 10 / 10.01
    assert patterns.effective_rank(np.array([3.0, 0.1, 0.1])) == 1
    assert patterns.effective_rank(np.ones(4)) == 4 and patterns.effective_rank(np.ones(10), 0.5) == 5
    assert patterns.effective_rank(np.zeros(3)) == 0


@pytest.mark.parametrize("d_head, d_model, bins", [
    (32, 128, [(1, 1), (2, 16), (17, 32), (33, 128)]),   # the last bin is what rank ≤ d_head rules out
    (24, 16, [(1, 1), (2, 8), (9, 16)]),                 # d_head ≥ d_model: nothing lies past the stream's width
    (1, 16, [(1, 1), (2, 16)]), (2, 16, [(1, 1), (2, 2), (3, 16)])])
def test_effective_rank_bins_cover_every_count_once(d_head, d_model, bins):
    assert patterns.effective_rank_bins(d_head, d_model) == bins
    for value in range(1, d_model + 1):
        assert sum(first <= value <= last for first, last in bins) == 1
        assert bins[patterns.bin_of(bins, value)][0] <= value


def test_the_layers_patterns_hold_every_head_and_the_chosen_one():
    """What the hover view draws: every head's pattern of the layer, rows summing to 1, nothing above the diagonal."""
    cfg = ModelConfig(n_layers=2, d_model=16, n_heads=4, d_vocab=20, n_ctx=8)
    model, ids = Transformer(cfg).double(), (0, 3, 5, 3, 5, 7)
    for head in range(4):
        result = patterns.scores(model, ids, 1, head)
        assert result.layer_patterns.shape == (4, 6, 6) and np.array_equal(result.layer_patterns[head], result.pattern)
    assert np.abs(result.layer_patterns.sum(-1) - 1).max() < 1e-12 and not np.triu(result.layer_patterns, 1).any()
