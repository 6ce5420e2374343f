"""Patterns and messages: regrouping, rank, non-uniqueness, scores from W_QK, messages add up."""

import pytest
import torch

from mechlib import patterns
from mechlib.config import ModelConfig
from tests.unit.helpers import randomised

CONFIGS = [
    ModelConfig(n_layers=2, d_model=24, n_heads=3, d_vocab=30, n_ctx=10),
    ModelConfig(n_layers=2, d_model=24, n_heads=4, d_vocab=30, n_ctx=10, d_mlp=48, normalization="LN"),
    ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=20, n_ctx=8, positional="shortformer", normalization="LN"),
]


def run(cfg, dtype=torch.float64):
    model = randomised(cfg).to(dtype)
    tokens = torch.randint(0, cfg.d_vocab, (2, cfg.n_ctx), generator=torch.Generator().manual_seed(3))
    return model, model.run_with_cache(tokens)[1]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_regrouping_is_exact_and_counts_multiply_adds(cfg):
    model, cache = run(cfg)
    result = patterns.regrouping(model, cache, 1 if cfg.n_layers > 1 else 0, 1, tolerance=1e-10)
    assert result.check.passed and result.check.max_abs_diff <= 1e-10
    n, dh, d = cfg.n_ctx, cfg.d_head, cfg.d_model
    assert result.macs == {"((QKᵀ)V)O": n * n * dh + n * dh * d, "(QKᵀ)(VO)": n * dh * d + n * n * d}


def test_regrouping_float32_within_bound():
    model, cache = run(CONFIGS[1], torch.float32)
    assert patterns.regrouping(model, cache, 0, 0, tolerance=1e-5).check.passed


@pytest.mark.parametrize("cfg", CONFIGS)
def test_W_QK_and_W_OV_have_rank_at_most_d_head(cfg):
    model, _ = run(cfg)
    for name, values in patterns.spectra(model, 0, 0).items():
        assert len(values) == cfg.d_model
        assert values[cfg.d_head - 1] > 1e-6 and values[cfg.d_head:].max(initial=0) <= 1e-10 * values[0], name


@pytest.mark.parametrize("cfg", CONFIGS)
def test_only_the_products_matter(cfg):
    model, cache = run(cfg)
    diffs = patterns.non_uniqueness(model, cache, 0, 1, seed=0)
    assert diffs["pattern"] <= 1e-10 and diffs["messages"] <= 1e-10


@pytest.mark.parametrize("cfg", CONFIGS)
def test_scores_from_W_QK_equal_the_cached_scores(cfg):
    model, cache = run(cfg)
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            mine = patterns.scores_from_W_QK(model, cache, layer, head)
            cached = cache[f"blocks.{layer}.attn.hook_attn_scores"][:, head]
            causal = torch.isfinite(cached)
            assert torch.equal(causal, torch.isfinite(mine))
            assert (mine[causal] - cached[causal]).abs().max() <= 1e-10


@pytest.mark.parametrize("cfg", CONFIGS)
def test_weighted_messages_equal_the_head_output(cfg):
    model, cache = run(cfg)
    result = patterns.messages(model, cache, 0, 1, dest=cfg.n_ctx - 1, tolerance=1e-10)
    assert result.check.passed
    assert result.weights.shape == (cfg.n_ctx,) and abs(result.weights.sum() - 1) <= 1e-12
    assert len(result.top_tokens) == cfg.n_ctx and all(len(t) == 3 for t in result.top_tokens)
