"""The residual stream: the ledger balances against a separate forward pass, the logit lens ends at the model's
logits, DLA adds up, and the heads' subspaces are compared with random ones."""

import numpy as np
import pytest
import torch

from mechlib import circuits, residual, zoo
from mechlib.checks import SEPARATE_MAX, Check
from mechlib.config import ModelConfig
from mechlib.device import experiment_mb
from mechlib.model import Transformer
from tests.unit.helpers import randomised

CONFIGS = [
    ModelConfig(n_layers=0, d_model=16, n_heads=2, d_vocab=20, n_ctx=8),
    ModelConfig(n_layers=2, d_model=24, n_heads=3, d_vocab=30, n_ctx=10),
    ModelConfig(n_layers=2, d_model=24, n_heads=4, d_vocab=30, n_ctx=10, d_mlp=48, normalization="LN"),
    ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=20, n_ctx=8, positional="shortformer"),
]
ZERO_LAYERS, LAYER_NORM = CONFIGS[0], CONFIGS[2]


def run(cfg: ModelConfig, dtype=torch.float64):
    model = randomised(cfg).to(dtype)
    tokens = torch.randint(0, cfg.d_vocab, (3, cfg.n_ctx), generator=torch.Generator().manual_seed(1))
    logits, cache = model.run_with_cache(tokens)
    return model, tokens, logits, cache


def ids_for(cfg: ModelConfig) -> tuple[int, ...]:
    return tuple(torch.randint(0, cfg.d_vocab, (cfg.n_ctx,), generator=torch.Generator().manual_seed(2)).tolist())


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_ledger_balances_against_a_separate_forward_pass(cfg):
    model, tokens, _, cache = run(cfg)
    book = residual.ledger(model, cache)
    expected = 1 + (cfg.positional == "standard") + cfg.n_layers * (cfg.n_heads + 1 + 2 * (cfg.d_mlp is not None))
    assert len(book.labels) == book.terms.shape[0] == expected
    check = residual.ledger_check(model, tokens, book)
    assert check.passed and check.logits.max_abs_diff <= 1e-10 and check.logits.tolerance == 1e-10
    assert (check.residual is None) == (cfg.n_layers == 0)
    if check.residual is not None:
        assert check.residual.max_abs_diff <= 1e-10


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_a_ledger_missing_a_term_fails_the_check(cfg):
    """With no layers the old check compared the ledger's sum with itself and passed whatever the ledger held."""
    model, tokens, _, cache = run(cfg)
    book = residual.ledger(model, cache)
    for dropped in (0, len(book.labels) - 1):  # the embedding, and the last component
        short = residual.Ledger(book.labels[:dropped] + book.labels[dropped + 1:],
                                torch.cat([book.terms[:dropped], book.terms[dropped + 1:]]))
        check = residual.ledger_check(model, tokens, short)
        assert not check.passed and not check.logits.passed, book.labels[dropped]
        assert check.residual is None or not check.residual.passed


@pytest.mark.parametrize("cfg", CONFIGS)
def test_a_ledger_function_that_drops_a_term_fails_the_page_check(cfg, monkeypatch):
    """The old zero-layer reference was built by the ledger function itself, so a bug in it could not show."""
    model, ids = randomised(cfg), ids_for(cfg)
    assert residual.ledger_at(model, ids, 3).check.passed
    full = residual.ledger
    monkeypatch.setattr(residual, "ledger", lambda m, c: residual.Ledger(full(m, c).labels[1:], full(m, c).terms[1:]))
    assert not residual.ledger_at(model, ids, 3).check.passed


@torch.inference_mode()
def test_zero_layer_ledger_is_checked_against_the_logits():
    model, tokens, _, cache = run(ZERO_LAYERS)
    book = residual.ledger(model, cache)
    assert book.labels == ["embed", "pos_embed"]
    nudged = residual.Ledger(book.labels, book.terms + 1e-6 * torch.randn(book.terms.shape, dtype=torch.float64))
    assert residual.ledger_check(model, tokens, book).passed
    assert not residual.ledger_check(model, tokens, nudged).passed


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_boundaries_are_the_models_residuals(cfg):
    model, _, _, cache = run(cfg)
    stream = residual.boundaries(model, cache)
    assert stream.shape == (cfg.n_layers + 1, 3, cfg.n_ctx, cfg.d_model)
    for layer in range(cfg.n_layers):
        assert torch.equal(stream[layer], cache[f"blocks.{layer}.hook_resid_pre"])
    assert torch.equal(residual.final_residual(model, cache), stream[-1])


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_logit_lens_last_layer_is_the_models_output(cfg):
    model, tokens, _, cache = run(cfg)
    lens = residual.logit_lens(model, cache)
    assert lens.shape == (cfg.n_layers + 1, 3, cfg.n_ctx, cfg.d_vocab)
    assert (lens[-1] - model(tokens)).abs().max() <= 1e-10


def skip_layer_norm(model, resid):
    return resid @ model.unembed.W_U + model.unembed.b_U


@pytest.mark.parametrize("name", ["gelu-2l", "random LN"])
def test_lens_check_catches_a_lens_that_skips_the_final_layer_norm(name, monkeypatch):
    model = zoo.load("gelu-2l") if name == "gelu-2l" else randomised(LAYER_NORM)
    ids = ids_for(model.cfg)
    assert residual.lens(model, ids, 3).check.passed
    monkeypatch.setattr(residual, "unembed", skip_layer_norm)
    assert not residual.lens(model, ids, 3).check.passed


@pytest.mark.parametrize("cfg", CONFIGS)
def test_ledger_at_a_position(cfg):
    model = randomised(cfg)
    result = residual.ledger_at(model, ids_for(cfg), 4)
    assert result.check.passed
    assert result.projections.sum() == pytest.approx(result.final_norm, abs=1e-9)
    assert len(result.labels) == len(result.projections) == len(result.norms)
    assert (result.norms + 1e-12 >= np.abs(result.projections)).all()


@pytest.mark.parametrize("cfg", CONFIGS)
def test_depth(cfg):
    model = randomised(cfg)
    result = residual.depth(model, ids_for(cfg))
    assert result.norms.shape == (cfg.n_layers + 1, cfg.n_ctx) and (result.norms > 0).all()
    per_layer = ["attention"] + ([] if cfg.attn_only else ["MLP"])
    assert result.components == [f"L{l} {kind}" for l in range(cfg.n_layers) for kind in per_layer]
    assert result.added.shape == (len(result.components),) and (result.added > 0).all()


@pytest.mark.parametrize("cfg", CONFIGS)
def test_lens_at_a_position(cfg):
    model, ids = randomised(cfg), ids_for(cfg)
    result = residual.lens(model, ids, 2)
    assert result.check.passed and result.check.max_abs_diff <= 1e-10
    assert len(result.top) == cfg.n_layers + 1 and all(len(t) == residual.LENS_TOP for t in result.top)
    assert (np.diff(result.top_probs, axis=1) <= 0).all()
    assert result.next_token == ids[3] and result.next_probs.shape == (cfg.n_layers + 1,)
    assert len(result.candidates) == residual.CANDIDATES
    last = residual.lens(model, ids, cfg.n_ctx - 1)
    assert last.next_token is None and last.next_probs.shape == (0,)


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_direct_logit_attribution_adds_up_to_the_logit(cfg):
    model, tokens, logits, cache = run(cfg)
    targets = tokens.roll(-1, dims=1)
    labels, shares = residual.direct_logit_attribution(model, cache, targets)
    assert labels[-1] == "bias" and shares.shape == (len(labels), 3, cfg.n_ctx)
    logit = logits.gather(-1, targets[..., None])[..., 0]
    assert (shares.sum(0) - logit).abs().max() <= 1e-10


@pytest.mark.parametrize("cfg", CONFIGS)
def test_attribution_of_a_logit_and_of_a_difference(cfg):
    model, ids = randomised(cfg), ids_for(cfg)
    logits = model(torch.tensor([ids]))[0, 5].detach()
    single = residual.attribution(model, ids, 5, 7)
    assert single.check.passed and single.logit == pytest.approx(float(logits[7]), abs=1e-10)
    difference = residual.attribution(model, ids, 5, 7, 2)
    assert difference.check.passed and difference.logit == pytest.approx(float(logits[7] - logits[2]), abs=1e-10)
    assert np.allclose(difference.shares, single.shares - residual.attribution(model, ids, 5, 2).shares, atol=1e-12)
    same = residual.attribution(model, ids, 5, 7, 7)
    assert same.logit == 0 and np.abs(same.shares).max() == 0


@torch.inference_mode()
def test_direct_logit_attribution_float32_within_a_stated_bound():
    model, tokens, logits, cache = run(LAYER_NORM, torch.float32)
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
    result = residual.subspaces(model)
    assert result.separate == "yes" and result.versus_random == "below" and result.room and result.least == 0
    assert result.pairs == 1 and result.largest <= SEPARATE_MAX


def test_random_heads_overlap_about_d_head_over_d_model():
    cfg = ModelConfig(n_layers=2, d_model=256, n_heads=8, d_vocab=5, n_ctx=4)
    result = residual.subspaces(Transformer(cfg))
    assert result.pairs == 16 * 15 // 2 and result.baseline == 32 / 256
    assert result.mean == pytest.approx(result.baseline, rel=0.1)
    assert result.versus_random == "about"
    assert result.written == 512 and not result.room  # 2 · 8 · 32 dimensions cannot fit orthogonally in 256
    # so every arrangement overlaps (512/256 − 1) / 15 on average: "no" would be a count, not a finding
    assert result.least == pytest.approx(1 / 15) and result.mean >= result.least and result.separate == "impossible"


def test_heads_sharing_one_subspace_overlap_above_random():
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=4, d_vocab=5, n_ctx=4)
    model = Transformer(cfg)
    with torch.no_grad():
        model.blocks[0].attn.W_O.copy_(model.blocks[0].attn.W_O[0].expand(4, -1, -1))
    result = residual.subspaces(model)
    assert result.mean == pytest.approx(1.0) and result.versus_random == "above"
    assert result.least == 0 and result.separate == "no"  # 4 · 4 = d_model: they could have been orthogonal


def test_one_head_has_nothing_to_compare():
    result = residual.subspaces(Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=1, d_vocab=5, n_ctx=4)))
    assert result.pairs == 0 and result.versus_random == "" and result.separate == "" and np.isnan(result.mean)


@pytest.mark.parametrize("d_head", [8, 12])
def test_heads_as_wide_as_the_stream_are_vacuous_not_above_random(d_head):
    """d_head ≥ d_model: every head's subspace is the whole stream, and so is a random one. The old verdict called
    d_head = d_model "above random" (rounding against a margin of 0) and d_head > d_model "below" (overlap 0.5
    against a baseline of 1.5: both divided by d_head instead of the subspace's dimension)."""
    cfg = ModelConfig(n_layers=1, d_model=8, n_heads=2, d_head=d_head, d_vocab=5, n_ctx=4)
    result = residual.subspaces(Transformer(cfg))
    assert np.allclose(result.overlap, 1.0, atol=1e-12) and result.k == 8 and result.baseline == 1.0
    assert result.versus_random == "vacuous" and result.least == 1.0 and result.separate == "impossible"
    assert result.written == 16 and not result.room


def test_least_overlap_is_reached_by_three_lines_in_a_plane():
    """Three 1-dimensional heads in 2 dimensions, 60° apart: cos² 60° = 1/4 for every pair, which is the bound."""
    cfg = ModelConfig(n_layers=1, d_model=2, n_heads=3, d_head=1, d_vocab=5, n_ctx=4)
    model = Transformer(cfg).double()
    angles = torch.tensor([0.0, 60.0, 120.0], dtype=torch.float64).deg2rad()
    with torch.no_grad():
        model.blocks[0].attn.W_O.copy_(torch.stack([angles.cos(), angles.sin()], -1)[:, None, :])
    result = residual.subspaces(model)
    assert residual.least_overlap(2, 1, 3) == result.least == 0.25
    assert result.mean == pytest.approx(0.25, abs=1e-12) and result.largest == pytest.approx(0.25, abs=1e-12)
    assert result.separate == "impossible"


def test_least_overlap_bounds_random_heads():
    for d_model, d_head, heads, seed in [(16, 4, 6, 0), (16, 8, 4, 1), (32, 4, 12, 2)]:
        cfg = ModelConfig(n_layers=2, d_model=d_model, n_heads=heads // 2, d_head=d_head, d_vocab=5, n_ctx=4, seed=seed)
        result = residual.subspaces(Transformer(cfg))
        assert result.least == pytest.approx(max(0.0, (heads * d_head / d_model - 1) / (heads - 1)))
        assert result.mean >= result.least - 1e-12


def test_no_layers_no_subspaces():
    with pytest.raises(ValueError, match="no layers has no heads"):
        residual.subspaces(Transformer(ZERO_LAYERS))


def test_random_overlap_spread_matches_sampling():
    n, k, samples = 16, 4, 4000
    g = torch.Generator().manual_seed(0)
    first, second = (torch.linalg.qr(torch.randn(samples, n, k, generator=g, dtype=torch.float64))[0] for _ in range(2))
    overlaps = (first.transpose(1, 2) @ second).pow(2).sum((1, 2)) / k
    assert float(overlaps.mean()) == pytest.approx(residual.random_overlap(n, k), rel=0.03)
    assert float(overlaps.std()) == pytest.approx(residual.random_overlap_sd(n, k), rel=0.05)


# The page's questions --------------------------------------------------------------------------------------------

PASSED = Check(0.0, 0.0, 1e-10)


@pytest.mark.parametrize("label, kind", [("embed", "the token embedding"), ("pos_embed", "the positional embedding"),
                                         ("L0H3", "a head"), ("L12H10", "a head"), ("L1 MLP", "an MLP"),
                                         ("L0 attn bias", "a bias"), ("L1 MLP bias", "a bias"), ("bias", "a bias")])
def test_term_kind_names_every_label_the_ledger_and_attribution_use(label, kind):
    assert residual.term_kind(label) == kind


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_every_ledger_label_has_a_kind(cfg):
    model, _, _, cache = run(cfg)
    labels = residual.direct_logit_attribution(model, cache, torch.zeros(3, cfg.n_ctx, dtype=torch.long))[0]
    kinds = residual.kinds_of(labels)
    assert kinds == [kind for kind in residual.TERM_KINDS
                     if {"the positional embedding": cfg.positional == "standard", "a head": cfg.n_layers > 0,
                         "an MLP": cfg.d_mlp is not None and cfg.n_layers > 0}.get(kind, True)]


@pytest.mark.parametrize("label", ["L0 attention", "L0H", "unembed", "LH1"])
def test_term_kind_refuses_what_is_not_a_term(label):
    with pytest.raises(ValueError, match=f"{label!r} is not a term of the residual stream's ledger"):
        residual.term_kind(label)


def test_the_largest_term_is_the_longest_along_the_final_residual_not_the_longest():
    book = residual.LedgerAt(["embed", "L0H0", "L0 MLP"], np.array([1.0, 0.5, 2.0]), np.array([1.5, 9.0, 2.0]), 3.5,
                             residual.LedgerCheck(PASSED, None))
    assert book.largest == "L0 MLP"


def test_the_largest_write_through_depth():
    assert residual.Depth(np.ones((3, 4)), ["L0 attention", "L0 MLP", "L1 attention"], np.array([1.0, 3.0, 2.0])).largest \
        == "L0 MLP"
    assert residual.Depth(np.ones((1, 4)), [], np.zeros(0)).largest == ""


def test_attribution_largest_term_and_top_heads():
    labels = ["embed", "L0H0", "L0H1", "L1H0", "L0 attn bias", "bias"]
    dla = residual.Attribution(labels, np.array([5.0, 1.0, 3.0, -2.0, 0.0, -1.0]), 6.0, PASSED)
    assert dla.largest == "embed" and dla.top_heads == ["L0H1"]
    tied = residual.Attribution(labels, np.array([0.0, 3.0, 3.0, -2.0, 4.0, -1.0]), 7.0, PASSED)
    assert tied.largest == "L0 attn bias" and tied.top_heads == ["L0H0", "L0H1"]
    assert residual.Attribution(["embed", "bias"], np.array([1.0, 2.0]), 3.0, PASSED).top_heads == []


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_lens_ranks_of_the_final_top_token(cfg):
    """Against a full sort of the logit lens at every boundary: the rank ends at 1, and first_top is the first 1."""
    model, ids = randomised(cfg), ids_for(cfg)
    result = residual.lens(model, ids, 4)
    read = residual.logit_lens(model, residual.cache_of(model, ids))[:, 0, 4]        # [boundary d_vocab]
    final = int(read[-1].argmax())
    ranks = [int((row.argsort(descending=True) == final).nonzero()) + 1 for row in read]
    assert result.final_ranks.tolist() == ranks and ranks[-1] == 1
    assert result.top[-1][0] == final
    assert result.first_top == ranks.index(1)


def test_first_top_is_the_first_boundary_at_rank_one():
    lens = residual.Lens([], np.zeros((4, 3)), None, np.zeros(0), [], np.array([7, 1, 3, 1]), PASSED)
    assert lens.first_top == 1
    assert residual.Lens([], np.zeros((3, 3)), None, np.zeros(0), [], np.array([2, 5, 1]), PASSED).first_top == 2


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_the_declared_costs_count_the_ledgers_terms_and_the_lens_read_out(cfg):
    """``components`` is the ledger's own count of terms, so ``ledger_mb`` holds what the ledger stacks; the lens
    holds as well its read-out at every boundary, and the one-layer paths theirs, each [… pos d_vocab] float32."""
    model, ids = randomised(cfg), tuple(range(1, cfg.n_ctx))
    book = residual.ledger(model, residual.cache_of(model, ids))
    assert residual.components(model) == len(book.labels) == book.terms.shape[0]
    forward = cfg.activations_mb(1, len(ids))
    assert residual.ledger_mb(model, ids) == forward + 4 * book.terms.numel() / 1e6
    read_out = 4 * (cfg.n_layers + 1) * len(ids) * cfg.d_vocab / 1e6
    assert experiment_mb(residual.lens, model, ids, 0) == pytest.approx(residual.ledger_mb(model, ids) + read_out)
    paths = 4 * (len(book.labels) + 1) * len(ids) * cfg.d_vocab / 1e6
    assert experiment_mb(circuits.one_layer, model, ids) == pytest.approx(residual.ledger_mb(model, ids) + paths)


def test_subspace_overlap_in_row_blocks_equals_every_pair_of_bases_multiplied_out(monkeypatch):
    """‖Q₁ᵀQ₂‖²_F / k for every pair, as the definition writes it, against the projectors' rows a block at a time
    (``OVERLAP_ROWS``, here 5 of 24: blocks that do not divide d_model): float64, to 1e-12."""
    cfg = ModelConfig(n_layers=2, d_model=24, n_heads=3, d_head=4, d_vocab=5, n_ctx=4)
    model = Transformer(cfg).double()
    monkeypatch.setattr(residual, "OVERLAP_ROWS", 5)
    labels, overlap = residual.subspace_overlap(model)
    bases = torch.stack([torch.linalg.qr(block.attn.W_O[h].T)[0] for block in model.blocks for h in range(3)])
    expected = torch.einsum("amk,bmn->abkn", bases, bases).pow(2).sum((-1, -2)) / 4  # [head head]
    assert labels[3] == "L1H0" and (overlap - expected).abs().max() < 1e-12
