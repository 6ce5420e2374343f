"""The residual stream: the ledger balances, the logit lens ends at the logits, DLA adds up."""

import pytest
import torch

from mechlib import residual
from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.unit.helpers import randomised

CONFIGS = [
    ModelConfig(n_layers=0, d_model=16, n_heads=2, d_vocab=20, n_ctx=8),
    ModelConfig(n_layers=2, d_model=24, n_heads=3, d_vocab=30, n_ctx=10),
    ModelConfig(n_layers=2, d_model=24, n_heads=4, d_vocab=30, n_ctx=10, d_mlp=48, normalization="LN"),
    ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=20, n_ctx=8, positional="shortformer"),
]


def run(cfg: ModelConfig, dtype=torch.float64):
    model = randomised(cfg).to(dtype)
    tokens = torch.randint(0, cfg.d_vocab, (3, cfg.n_ctx), generator=torch.Generator().manual_seed(1))
    logits, cache = model.run_with_cache(tokens)
    return model, tokens, logits, cache


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_ledger_sums_to_the_final_residual(cfg):
    model, _, logits, cache = run(cfg)
    book = residual.ledger(model, cache)
    assert len(book.labels) == book.terms.shape[0]
    assert (book.terms.sum(0) - residual.final_residual(model, cache)).abs().max() <= 1e-10
    expected = 1 + (cfg.positional == "standard") + cfg.n_layers * (cfg.n_heads + 1 + 2 * (cfg.d_mlp is not None))
    assert len(book.labels) == expected


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_logit_lens_last_layer_is_the_models_output(cfg):
    model, _, logits, cache = run(cfg)
    lens = residual.logit_lens(model, cache)
    assert lens.shape == (cfg.n_layers + 1, 3, cfg.n_ctx, cfg.d_vocab)
    assert (lens[-1] - logits).abs().max() <= 1e-10


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_direct_logit_attribution_adds_up_to_the_logit(cfg):
    model, tokens, logits, cache = run(cfg)
    targets = tokens.roll(-1, dims=1)
    labels, shares = residual.direct_logit_attribution(model, cache, targets)
    assert labels[-1] == "bias" and shares.shape == (len(labels), 3, cfg.n_ctx)
    logit = logits.gather(-1, targets[..., None])[..., 0]
    assert (shares.sum(0) - logit).abs().max() <= 1e-10


@torch.inference_mode()
def test_direct_logit_attribution_float32_within_a_stated_bound():
    model, tokens, logits, cache = run(CONFIGS[2], torch.float32)
    _, shares = residual.direct_logit_attribution(model, cache, tokens)
    logit = logits.gather(-1, tokens[..., None])[..., 0]
    assert ((shares.sum(0) - logit).abs() <= 1e-4 * logit.abs().clamp(min=1)).all()


def test_subspace_overlap_known_answers():
    cfg = ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=5, n_ctx=4)
    model = Transformer(cfg)
    with torch.no_grad():
        model.blocks[0].attn.W_O.zero_()
        model.blocks[0].attn.W_O[0, :, :4] = torch.eye(4)       # head 0 writes into dims 0-3
        model.blocks[0].attn.W_O[1, :, 4:] = torch.eye(4) * 3   # head 1 into dims 4-7: orthogonal
    labels, overlap = residual.subspace_overlap(model)
    assert labels == ["L0H0", "L0H1"]
    assert torch.allclose(overlap, torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))


def test_random_heads_overlap_about_d_head_over_d_model():
    cfg = ModelConfig(n_layers=2, d_model=256, n_heads=8, d_vocab=5, n_ctx=4)
    _, overlap = residual.subspace_overlap(Transformer(cfg))
    off_diagonal = overlap[~torch.eye(16, dtype=torch.bool)]
    assert off_diagonal.mean() == pytest.approx(residual.random_overlap(256, 32), rel=0.1)
