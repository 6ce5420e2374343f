"""Circuits: factored circuits equal dense ones; composition and copying scores have known answers."""

import copy
import dataclasses
import itertools

import numpy as np
import pytest
import torch

from mechlib import attention, circuits, data
from mechlib.config import ModelConfig
from mechlib.factored import FactoredMatrix
from mechlib.model import Transformer

CFG = ModelConfig(n_layers=3, d_model=32, n_heads=4, d_vocab=40, n_ctx=12, seed=2)


def dense_composition(model: Transformer, mode: str) -> torch.Tensor:
    """The paper's definition (``composition_score_reference``, every d_model × d_model matrix formed), for every pair."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = torch.zeros(L, H, L, H, dtype=torch.float64)
    for (la, ha), (lb, hb) in itertools.product(itertools.product(range(L), range(H)), repeat=2):
        if la < lb:
            out[la, ha, lb, hb] = circuits.composition_score_reference(model, mode, (la, ha), (lb, hb))
    return out


@pytest.mark.parametrize("mode", ["Q", "K", "V"])
def test_the_reference_is_the_papers_definition_written_out(mode):
    """‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F), W_A = W_OV of the writer; W_B = W_QK, W_QKᵀ or W_OV of the reader, from
    ``mechlib.attention``'s stacked W_QK and W_OV: the reference reads the right matrices in the right order."""
    model = Transformer(CFG).double()
    a, b = model.blocks[0].attn, model.blocks[2].attn
    W_A = attention.W_OV(a.W_V, a.W_O)[1]
    W_B = {"Q": attention.W_QK(b.W_Q, b.W_K)[3], "K": attention.W_QK(b.W_Q, b.W_K)[3].T, "V": attention.W_OV(b.W_V, b.W_O)[3]}[mode]
    expected = torch.linalg.matrix_norm(W_A @ W_B) / (torch.linalg.matrix_norm(W_A) * torch.linalg.matrix_norm(W_B))
    assert circuits.composition_score_reference(model, mode, (0, 1), (2, 3)) == pytest.approx(expected.item(), abs=1e-12)
    with pytest.raises(ValueError, match="must sit in an earlier layer"):
        circuits.composition_score_reference(model, mode, (1, 0), (1, 2))
    with pytest.raises(ValueError, match="choose 'Q', 'K' or 'V'"):
        circuits.composition_score_reference(model, "X", (0, 0), (1, 0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fast_scores_equal_the_reference_on_small_random_models(seed):
    """Every mode, every earlier → later pair, float64: the fast path (Cholesky factors, Gram blocks) to 1e-10."""
    model = Transformer(ModelConfig(n_layers=3, d_model=24, n_heads=3, d_vocab=10, n_ctx=4, seed=seed)).double()
    for mode in "QKV":
        fast = circuits.composition_scores(model, mode)
        for (la, ha), (lb, hb) in itertools.product(itertools.product(range(3), range(3)), repeat=2):
            if la < lb:
                reference = circuits.composition_score_reference(model, mode, (la, ha), (lb, hb))
                assert abs(fast[la, ha, lb, hb].item() - reference) <= 1e-10


@pytest.mark.parametrize("mode", ["Q", "K", "V"])
def test_composition_scores_equal_the_dense_definition(mode):
    model = Transformer(CFG).double()
    mine = circuits.composition_scores(model, mode)
    assert mine.shape == (3, 4, 3, 4) and mine.dtype == torch.float64
    assert (mine - dense_composition(model, mode)).abs().max() <= 1e-10
    assert torch.all(mine[1, :, 0] == 0) and torch.all(mine[2, :, 2] == 0)  # only earlier → later
    in_float32 = circuits.composition_scores(Transformer(CFG), mode)         # scores lie in [0, 1]
    assert (in_float32.double() - mine).abs().max() <= 1e-5


@pytest.mark.parametrize("mode", ["Q", "K", "V"])
def test_composition_through_several_gram_blocks_equals_the_dense_definition(mode):
    """d_model 300 is cut into Gram blocks of 128, 128 and 44 columns: off-diagonal blocks must count twice."""
    model = Transformer(ModelConfig(n_layers=2, d_model=300, n_heads=3, d_vocab=10, n_ctx=4, seed=5)).double()
    assert 2 * circuits.GRAM_BLOCK < 300 and 300 % circuits.GRAM_BLOCK
    assert (circuits.composition_scores(model, mode) - dense_composition(model, mode)).abs().max() <= 1e-10


@pytest.mark.parametrize("cfg", [
    ModelConfig(n_layers=4, d_model=64, n_heads=16, d_vocab=10, n_ctx=4, seed=3),       # 2 d_head² ≤ d_model: products
    ModelConfig(n_layers=3, d_model=8, n_heads=2, d_head=9, d_vocab=10, n_ctx=4, seed=4),  # d_head > d_model: rank 8
    ModelConfig(n_layers=5, d_model=24, n_heads=1, d_vocab=10, n_ctx=4, seed=5)])
def test_composition_equals_the_dense_definition_on_every_route(cfg):
    model = Transformer(cfg).double()
    for mode in "QKV":
        exact = dense_composition(model, mode)
        assert (circuits.composition_scores(model, mode) - exact).abs().max() <= 1e-10
        assert (circuits.composition_scores(Transformer(cfg), mode).double() - exact).abs().max() <= 1e-5


def test_float32_scores_of_wide_heads_keep_their_relative_accuracy():
    """One head of d_head 512: a norm sums 262,144 squares, where a plain float32 reduction loses 5e-6."""
    model = Transformer(ModelConfig(n_layers=2, d_model=512, n_heads=1, d_vocab=5, n_ctx=4, seed=1))
    for mode in "QKV":
        exact = circuits.composition_scores(copy.deepcopy(model).double(), mode)
        assert exact[0, 0, 1, 0] > 0.01
        assert ((circuits.composition_scores(model, mode).double() - exact).abs() <= 1e-6 * exact).all()


def test_float32_scores_keep_their_stated_accuracy_where_the_true_score_is_zero():
    """Layer 0 writes into one half of a random basis, layer 1's keys read the other half: K-composition is 0.

    The Gram inner products cancel there (about 2e-5 in float32 and 3e-9 in float64): such scores are
    recomputed from the product itself, so float32 keeps its 1e-6 and float64 its 1e-10 here too.
    """
    model = Transformer(ModelConfig(n_layers=2, d_model=256, n_heads=4, d_vocab=10, n_ctx=4, seed=1)).double()
    basis = torch.linalg.qr(torch.randn(256, 256, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))[0]
    written, read = basis[:, :128] @ basis[:, :128].T, basis[:, 128:] @ basis[:, 128:].T    # projections
    with torch.no_grad():
        model.blocks[0].attn.W_O.copy_(model.blocks[0].attn.W_O @ written)
        model.blocks[1].attn.W_K.copy_(read @ model.blocks[1].attn.W_K)
    exact = {mode: circuits.composition_scores(model, mode) for mode in "QKV"}
    in_float32 = {mode: circuits.composition_scores(model.float(), mode).double() for mode in "QKV"}
    assert exact["K"].max() <= 1e-10
    assert max((in_float32[m] - exact[m]).abs().max() for m in "QKV") <= 1e-6


@pytest.mark.parametrize("mode", ["Q", "K", "V"])
def test_no_score_exceeds_its_ceiling_computed_from_the_dense_spectra(mode):
    model = Transformer(CFG).double()
    ceiling, scores = circuits.composition_ceiling(model, mode), circuits.composition_scores(model, mode)
    assert torch.all(scores <= ceiling + 1e-12) and torch.all((ceiling > 0) == (scores > 0))
    a, b = model.blocks[0].attn, model.blocks[2].attn                         # L0H2 → L2H1, dense
    sigma = torch.linalg.svdvals(a.W_V[2] @ a.W_O[2])[:CFG.d_head]
    tau = torch.linalg.svdvals(b.W_V[1] @ b.W_O[1] if mode == "V" else b.W_Q[1] @ b.W_K[1].T)[:CFG.d_head]
    expected = (sigma.pow(2) * tau.pow(2)).sum().sqrt() / (sigma.norm() * tau.norm())
    assert ceiling[0, 2, 2, 1].item() == pytest.approx(expected.item(), abs=1e-10)
    shallow = Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=5, n_ctx=4))
    assert circuits.composition_ceiling(shallow, mode).shape == circuits.composition_scores(shallow, mode).shape == (1, 2, 1, 2)


def test_the_ceiling_is_reached_when_the_spectra_line_up_in_order():
    """W_OV^A = diag(σ) and W_QKᵀ of B = diag(τ) on the same four directions: the K-composition is
    √(Σ σ_i² τ_i²) / (‖σ‖ ‖τ‖) with τ in σ's order (the ceiling), and less with τ reversed."""
    sigma, tau = torch.tensor([4.0, 2.0, 1.0, 0.5], dtype=torch.float64), torch.tensor([3.0, 1.5, 1.0, 0.2], dtype=torch.float64)
    model = Transformer(ModelConfig(n_layers=2, d_model=8, n_heads=1, d_head=4, d_vocab=5, n_ctx=4)).double()
    first_four = torch.eye(8, dtype=torch.float64)[:, :4]                     # [d_model 4]
    scores = []
    for reader in (tau, tau.flip(0)):
        with torch.no_grad():
            model.blocks[0].attn.W_V[0] = first_four
            model.blocks[0].attn.W_O[0] = torch.diag(sigma) @ first_four.T
            model.blocks[1].attn.W_K[0] = first_four @ torch.diag(reader)
            model.blocks[1].attn.W_Q[0] = first_four
        scores.append(circuits.composition_scores(model, "K")[0, 0, 1, 0].item())
    ceiling = circuits.composition_ceiling(model, "K")[0, 0, 1, 0].item()     # the same for both orders
    assert ceiling == pytest.approx(((sigma * tau).norm() / (sigma.norm() * tau.norm())).item(), abs=1e-12)
    assert scores[0] == pytest.approx(ceiling, abs=1e-12) and scores[1] < ceiling - 0.1


def test_random_composition_is_about_one_over_sqrt_d_model():
    model = Transformer(ModelConfig(n_layers=2, d_model=256, n_heads=8, d_vocab=10, n_ctx=4))
    scores = circuits.composition_scores(model, "K")[0, :, 1]
    assert scores.mean() == pytest.approx(circuits.random_baseline(256), rel=0.25)
    assert circuits.random_composition(256, 32, samples=50).mean == pytest.approx(scores.mean().item(), rel=0.25)
    with pytest.raises(ValueError, match="choose 'Q', 'K' or 'V'"):
        circuits.composition_scores(model, "X")


def test_a_head_that_writes_what_another_reads_composes_fully():
    cfg = ModelConfig(n_layers=2, d_model=8, n_heads=1, d_vocab=10, n_ctx=4)
    model = Transformer(cfg)
    with torch.no_grad():
        for b in model.blocks:
            for name in ("W_Q", "W_K", "W_V"):
                getattr(b.attn, name).zero_()
            b.attn.W_O.zero_()
        model.blocks[0].attn.W_V[0, 0, :] = 1.0   # head A reads dim 0 …
        model.blocks[0].attn.W_O[0, :, 3] = 1.0   # … and writes dim 3
        model.blocks[1].attn.W_K[0, 3, :] = 1.0   # head B's keys read dim 3
        model.blocks[1].attn.W_Q[0, 5, :] = 1.0
    scores = {mode: circuits.composition_scores(model, mode)[0, 0, 1, 0].item() for mode in "QKV"}
    assert scores["K"] == pytest.approx(1.0)
    assert scores["Q"] == pytest.approx(0.0, abs=1e-12)
    assert scores["V"] == 0.0  # head B's W_OV is zero: it composes with nothing


def test_circuits_equal_their_dense_products():
    model = Transformer(CFG).double()
    attn = model.blocks[1].attn
    dense_qk = model.embed.W_E @ attn.W_Q[2] @ attn.W_K[2].T @ model.embed.W_E.T
    dense_ov = model.embed.W_E @ attn.W_V[2] @ attn.W_O[2] @ model.unembed.W_U
    dense_pos = model.pos_embed.W_pos @ attn.W_Q[2] @ attn.W_K[2].T @ model.pos_embed.W_pos.T
    assert (circuits.qk_circuit(model, 1, 2).dense() - dense_qk).abs().max() <= 1e-10
    assert (circuits.ov_circuit(model, 1, 2).dense() - dense_ov).abs().max() <= 1e-10
    assert (circuits.positional_qk_circuit(model, 1, 2).dense() - dense_pos).abs().max() <= 1e-10


def copier_and_opposite() -> Transformer:
    """One layer of two heads of d_head 8 on one-hot embeddings: head 0 copies (token i raises token i), head 1 lowers it."""
    model = Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=16, n_ctx=4))
    with torch.no_grad():
        model.embed.W_E.copy_(torch.eye(16))
        model.unembed.W_U.copy_(torch.eye(16))
        model.blocks[0].attn.W_V.copy_(torch.eye(16)[:, :8].expand(2, 16, 8))
        model.blocks[0].attn.W_O[0] = torch.eye(16)[:8]
        model.blocks[0].attn.W_O[1] = -torch.eye(16)[:8]
    return model


def test_copying_score_is_one_for_a_copier_and_minus_one_for_its_opposite():
    scores = circuits.copying_scores(copier_and_opposite())
    assert scores[0, 0] == pytest.approx(1.0) and scores[0, 1] == pytest.approx(-1.0)
    silent = copier_and_opposite()
    with torch.no_grad():
        silent.blocks[0].attn.W_O.zero_()
    assert torch.equal(circuits.copying_scores(silent), torch.zeros(1, 2, dtype=torch.float64))  # moves nothing: 0, not NaN


def direct_copying_scores(d_vocab: int, d_model: int, d_head: int, samples: int) -> torch.Tensor:
    """Copying scores of heads of random models drawn in full: W_E, W_V, W_O, W_U Gaussian, eigenvalues of W_O W_U W_E W_V."""
    g = torch.Generator().manual_seed(7)
    W_E, W_U, W_V, W_O = (torch.randn(samples, *shape, generator=g, dtype=torch.float64) for shape in
                          ((d_vocab, d_model), (d_model, d_vocab), (d_model, d_head), (d_head, d_model)))
    return circuits.copying_score(torch.linalg.eigvals(W_O @ W_U @ W_E @ W_V))


@pytest.mark.parametrize("sizes", [(50, 64, 16), (12, 8, 4), (20, 4, 6), (3, 8, 4)])  # d_head > d_model; d_vocab < d_head
def test_random_copying_matches_random_models_drawn_in_full(sizes):
    """``random_copying`` draws only r × r matrices (Bartlett R factors); its mean and sd agree with 3,000 heads of
    random models drawn in full, within sampling error (the mean's standard error is sd / √200 for random_copying)."""
    direct, chance = direct_copying_scores(*sizes, samples=3000), circuits.random_copying(*sizes)
    assert abs(chance.mean - float(direct.mean())) <= 4 * float(direct.std()) / 200**0.5
    assert chance.sd == pytest.approx(float(direct.std()), rel=0.15)
    assert circuits.random_copying(*sizes) is chance                                      # cached per size


def test_random_copying_of_one_dimensional_heads_is_plus_or_minus_one_so_no_head_can_pass():
    """With d_head = 1 the OV circuit has one eigenvalue: a random head scores +1 or −1, half and half, and the
    bar for even one head lies above 1."""
    chance = circuits.random_copying(50, 16, 1)
    assert abs(chance.mean) < 0.2 and chance.sd == pytest.approx(1.0, abs=0.01) and chance.bar(1) > 1


@torch.inference_mode()
def test_path_expansion_sums_to_the_logits():
    from tests.unit.helpers import randomised

    for cfg in (ModelConfig(n_layers=1, d_model=16, n_heads=4, d_vocab=20, n_ctx=6, positional="shortformer"),
                ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=20, n_ctx=6)):
        model = randomised(cfg)
        logits, cache = model.run_with_cache(torch.randint(0, 20, (2, 6)))
        labels, paths = circuits.path_expansion(model, cache)
        assert labels[0] == "direct: embed" and labels[-1] == "b_U" and "L0H1" in labels
        assert (paths.sum(0) - logits).abs().max() <= 1e-10
    with pytest.raises(ValueError, match="only without LayerNorm"):
        circuits.path_expansion(Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=5, n_ctx=4, normalization="LN")), {})


@torch.inference_mode()
def test_skip_trigrams_match_the_dense_circuits():
    model = Transformer(CFG).double()
    vocabulary = list(range(2, 30))
    triples = circuits.skip_trigrams(model, 1, 2, destinations=[5, 7], vocabulary=vocabulary, per_destination=2)
    qk, ov = circuits.qk_circuit(model, 1, 2).dense(), circuits.ov_circuit(model, 1, 2).dense()
    assert len(triples) == 4 and triples[0][3] >= triples[-1][3]
    for source, destination, output, qk_score, ov_score in triples:
        best = [vocabulary[i] for i in qk[destination, vocabulary].topk(2).indices.tolist()]
        assert source in best and qk_score == pytest.approx(float(qk[destination, source]))
        assert output == vocabulary[int(ov[source, vocabulary].argmax())]
        assert ov_score == pytest.approx(float(ov[source, vocabulary].max()))


@torch.inference_mode()
def test_virtual_head_is_the_product_of_the_two_ov_circuits():
    model = Transformer(CFG).double()
    a, b = model.blocks[0].attn, model.blocks[2].attn
    dense = (a.W_V[1] @ a.W_O[1]) @ (b.W_V[3] @ b.W_O[3])
    virtual = circuits.virtual_ov(model, (0, 1), (2, 3))
    assert virtual.rank_bound == CFG.d_head and (virtual.dense() - dense).abs().max() <= 1e-10


@torch.inference_mode()
def test_a_hand_built_induction_circuit_scores_one_and_composes_by_k():
    """Layer 0: a previous-token head copying the previous token into its own subspace. Layer 1: an induction
    head whose keys read that subspace and whose queries read the current token. Both score ≈ 1, and the
    layer-1 head composes with the layer-0 head through its keys only, as much as its spectrum allows."""
    from mechlib import induction

    V, n = 12, 16                                   # vocabulary, positions
    tok, pos, prev = slice(0, V), slice(V, V + n), slice(V + n, 2 * V + n)
    cfg = ModelConfig(n_layers=2, d_model=2 * V + n, n_heads=1, d_head=n, d_vocab=V, n_ctx=n, positional="shortformer")
    model = Transformer(cfg).double()
    big = 40.0
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.embed.W_E[:, tok] = torch.eye(V)
        model.pos_embed.W_pos[:, pos] = torch.eye(n)
        a, b = model.blocks[0].attn, model.blocks[1].attn
        a.W_Q[0, pos, :] = big * torch.eye(n)                    # query at p asks for p − 1 …
        a.W_K[0, pos, :] = torch.eye(n).roll(1, dims=1)           # … key at p' answers as p' + 1
        a.W_V[0, tok, :V] = torch.eye(V)                          # move the token …
        a.W_O[0, :V, prev] = torch.eye(V)                         # … into the "previous token" subspace
        b.W_Q[0, tok, :V] = big * torch.eye(V)                    # query: my current token
        b.W_K[0, prev, :V] = torch.eye(V)                         # key: my previous token
        b.W_V[0, tok, :V] = torch.eye(V)
        b.W_O[0, :V, tok] = torch.eye(V)
    tokens = torch.stack([torch.randperm(V - 2)[:7] + 2 for _ in range(8)])            # distinct tokens per row
    tokens = torch.cat([torch.zeros(8, 1, dtype=torch.long), tokens, tokens], dim=1)  # <bos>, segment, segment
    _, cache = model.run_with_cache(tokens)
    patterns = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"] for l in range(2)])
    assert induction.previous_token_scores(patterns)[0, 0] > 0.99
    assert induction.induction_scores(patterns, tokens, 7)[1, 0] > 0.99
    scores = {mode: circuits.composition_scores(model, mode)[0, 0, 1, 0].item() for mode in "QKV"}
    # Two aligned identity maps of rank V: ‖I_V I_V‖ / (‖I_V‖ ‖I_V‖) = 1/√V, the most a writer with V equal
    # singular values can score (‖AB‖_F ≤ ‖A‖_2 ‖B‖_F and ‖A‖_2 = ‖A‖_F / √V).
    assert scores["K"] == pytest.approx(V**-0.5) and scores["Q"] == 0 and scores["V"] == 0
    assert circuits.composition_ceiling(model, "K")[0, 0, 1, 0].item() == pytest.approx(scores["K"])  # it is reached


def test_the_bigram_verdict_holds_for_the_trained_zero_layer_model_and_fails_for_random_weights():
    """KL(corpus ‖ model) ≤ BIGRAM_KL_SHARE × the corpus's conditional bigram entropy, and within BIGRAM_GAP_MAX of
    the best rank-d_model fit: the shipped attn-only-0l passes both; the same architecture and tokenizer with random
    weights neither."""
    from mechlib import checks, zoo

    trained = zoo.load("attn-only-0l")
    random = Transformer(trained.cfg)
    random.tokenizer = trained.tokenizer
    learned, unlearned = circuits.zero_layer(trained), circuits.zero_layer(random)
    for z in (learned, unlearned):
        c = z.ceiling
        assert z.bound == pytest.approx(checks.BIGRAM_KL_SHARE * c.entropy) and 2.5 < c.entropy < 3.5
        assert z.learned == (c.model_kl <= z.bound)
        assert z.at_best == (c.model_kl <= c.best_fit_kl + checks.BIGRAM_GAP_MAX)
        assert 0 <= c.best_fit_kl < 0.01 < c.unigram_kl < c.entropy
    assert learned.learned and learned.at_best and learned.ceiling.model_kl < 0.01
    assert not unlearned.learned and not unlearned.at_best and unlearned.ceiling.model_kl > 1.0
    assert unlearned.ceiling.entropy == learned.ceiling.entropy  # the same corpus and tokenizer


def test_the_zero_layer_tables_are_the_models_and_the_corpus_bigrams():
    from mechlib import zoo

    model = zoo.load("attn-only-0l")
    z = circuits.zero_layer(model)
    p_current, P = circuits.corpus_bigrams(model)
    assert z.ids == circuits.frequent_tokens(model, circuits.CHOOSABLE_TOKENS) and min(z.ids) >= 2
    assert p_current[z.ids[0]] >= p_current[z.ids[1]] >= p_current[z.ids[-1]]           # most frequent first
    table = z.ids[: circuits.TABLE_TOKENS]
    probs = (model.embed.W_E @ model.unembed.W_U + model.unembed.b_U).double().softmax(-1)  # [current next]
    assert np.allclose(z.model_table, probs[table][:, table].numpy(), atol=1e-12)
    assert np.allclose(z.corpus_table, P[table][:, table].numpy(), atol=1e-12)
    row = z.next_tokens[3]                                                                  # the 4th most frequent
    assert row["model's next token"][0] == model.tokenizer.labels([int(probs[z.ids[3]].argmax())])[0]
    assert row["corpus probability"][0] == pytest.approx(P[z.ids[3]].max().item())
    assert len(row["model probability"]) == circuits.TOP_NEXT and row["model probability"] == sorted(row["model probability"], reverse=True)
    with pytest.raises(ValueError, match="only for a zero-layer shortformer model"):
        circuits.zero_layer(zoo.load("attn-only-1l"))


def test_the_zero_layer_section_opens_on_the_most_frequent_word_whose_bigram_the_model_learned():
    """attn-only-0l: "of" → "the". Its likeliest next token is the same under W_E W_U + b_U and in the corpus, both
    are words, and every more frequent word fails the rule ("the" → '"', "is" → <unk>)."""
    from mechlib import zoo

    model = zoo.load("attn-only-0l")
    z = circuits.zero_layer(model)
    probs = (model.embed.W_E @ model.unembed.W_U + model.unembed.b_U).softmax(-1)     # [current next]
    _, P = circuits.corpus_bigrams(model)
    words = set(data.word_ids(model.tokenizer, range(model.cfg.d_vocab)))
    rule = [i for i in z.ids if i in words and int(probs[i].argmax()) == int(P[i].argmax()) and int(P[i].argmax()) in words]
    assert z.example == rule[0] and model.tokenizer.labels([z.example]) == ["of"]
    assert model.tokenizer.labels([int(probs[z.example].argmax())]) == ["the"]
    assert z.ids.index(z.example) > 0                                                  # not "-", the most frequent


def test_the_bigram_example_falls_back_to_a_learned_bigram_then_to_the_most_frequent_token():
    tokenizer = data.WordTokenizer(["<bos>", "<unk>", "-", "(", "of", "the"])
    # "-" learned, "of" learned but followed by "(", "the" not learned: no word with a word after it
    assert circuits.bigram_example(tokenizer, [2, 4, 5], [3, 3, 4], [3, 3, 2]) == 2
    assert circuits.bigram_example(tokenizer, [2, 4, 5], [3, 5, 4], [3, 5, 2]) == 4      # "of" → "the" learned
    assert circuits.bigram_example(tokenizer, [2, 4, 5], [3, 5, 4], [2, 4, 2]) == 2      # nothing learned


def test_a_vocabulary_smaller_than_top_next_lists_every_next_token():
    """With d_vocab < TOP_NEXT each row lists the whole vocabulary, most likely first, so its probabilities sum to 1."""
    from mechlib.data import WordTokenizer, builtin_text

    tokenizer = WordTokenizer.fit(builtin_text(), circuits.TOP_NEXT - 2)
    model = Transformer(ModelConfig(n_layers=0, d_model=4, n_heads=1, d_vocab=tokenizer.d_vocab, n_ctx=4,
                                    positional="shortformer"))
    model.tokenizer = tokenizer
    z = circuits.zero_layer(model)
    assert sorted(z.ids) == list(range(2, tokenizer.d_vocab))                       # every token but <bos>, <unk>
    for row in z.next_tokens:
        assert sorted(row["model's next token"]) == sorted(tokenizer.labels(range(tokenizer.d_vocab)))
        assert row["model probability"] == sorted(row["model probability"], reverse=True)
        assert sum(row["model probability"]) == pytest.approx(1.0, abs=1e-12)
        assert sum(row["corpus probability"]) == pytest.approx(1.0, abs=1e-12)


def test_one_layer_checks_the_path_expansion_at_the_models_own_tolerance():
    from mechlib import checks, zoo

    model = zoo.load("attn-only-1l")
    ids = (0, *model.tokenizer.encode("the class of an object is its type"))
    o = circuits.one_layer(model, ids)
    assert o.path_check.tolerance == checks.model_tolerance(model) == 1e-5 and o.path_check.passed
    assert o.path_labels[0] == "direct: embed" and len(o.path_labels) == len(o.path_norms) == 4 + 3   # no W_pos path
    assert o.copying_bar == circuits.random_copying(1000, 128, 32).bar(4) and o.copying.min() > o.copying_bar
    assert o.copiers == 4 and list(o.eigenvalues) == ["L0H0", "L0H1", "L0H2", "L0H3"]
    in_float64 = circuits.one_layer(copy.deepcopy(model).double(), ids)
    assert in_float64.path_check.tolerance == 1e-10 and in_float64.path_check.passed
    with_ln = circuits.one_layer(Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=9, n_ctx=4,
                                                         normalization="LN")), (0, 3, 4))
    assert with_ln.path_check is None and with_ln.path_labels == [] and with_ln.path_norms is None


@torch.inference_mode()
@pytest.mark.parametrize("rows", [circuits.RANK_ELEMENTS, 3 * 40])  # one block, and blocks of 3 rows of 40
def test_copy_ranks_count_the_outputs_each_token_raises_above_its_own(rows, monkeypatch):
    monkeypatch.setattr(circuits, "RANK_ELEMENTS", rows)
    model = Transformer(CFG).double()
    ov, ids = circuits.ov_circuit(model, 1, 2).dense(), [5, 2, 39, 7, 11, 3, 20]
    own, ranks = circuits.copy_ranks(model, 1, 2, ids)
    assert torch.allclose(own, ov[ids, ids], rtol=0, atol=1e-12)
    assert ranks.tolist() == [int((ov[t] > ov[t, t]).sum()) for t in ids]
    own, ranks = circuits.copy_ranks(copier_and_opposite(), 0, 0, list(range(2, 16)))   # W_OV = I: copies all
    assert ranks.tolist() == [0] * 14 and (circuits.copy_ranks(copier_and_opposite(), 0, 1, [2])[1] == 15).all()


def test_words_only_tables_show_the_copying_diagonal_of_the_one_layer_model():
    """attn-only-1l, every head: the tables' tokens are words; attending to each raises its own logit among the top
    20 of 1,000 outputs where a head that does not copy would reach about the top 66, and in the OV table the
    diagonal is its row's largest entry in at least 15 of 20 rows; the skip-trigrams read only words too."""
    from mechlib import zoo

    model = zoo.load("attn-only-1l")
    words = set(data.word_ids(model.tokenizer, range(model.cfg.d_vocab)))
    for head in range(model.cfg.n_heads):
        t = circuits.token_tables(model, 0, head, words_only=True)
        ids = [model.tokenizer.index[label] for label in t.labels]
        assert set(ids) <= words and len(ids) == circuits.TABLE_TOKENS and t.candidates == circuits.TRIGRAM_VOCABULARY
        assert t.chance_rank == pytest.approx(20 / 301 * 1000) and max(t.copy_ranks) < 20 < t.chance_rank / 3
        assert t.copy_ranks == sorted(t.copy_ranks) and t.copy_ranks == circuits.copy_ranks(model, 0, head, ids)[1].tolist()
        assert (t.ov.argmax(1) == np.arange(20)).sum() >= 15 and (np.diag(t.ov) > 0).all()
        assert np.allclose(t.ov, circuits.ov_circuit(model, 0, head).dense()[ids][:, ids].numpy(), rtol=1e-5, atol=1e-4)
        assert np.allclose(t.qk, circuits.qk_circuit(model, 0, head).dense()[ids][:, ids].numpy(), rtol=1e-5, atol=1e-4)
        assert len(t.trigrams) == circuits.TRIGRAMS and all(
            model.tokenizer.index[token] in words for trigram in t.trigrams for token in trigram[:3])
        assert [q for *_, q, _ in t.trigrams] == sorted((q for *_, q, _ in t.trigrams), reverse=True)
    every = circuits.token_tables(model, 0, 0, words_only=False)                      # punctuation comes back
    assert not {model.tokenizer.index[label] for label in every.labels} <= words


def test_a_head_that_does_not_copy_reaches_the_chance_rank_and_ids_without_text_are_no_words():
    """Random heads: the worst of the TABLE_TOKENS best copy ranks averages k / (n + 1) · d_vocab (32 heads, within
    15 %; the standard error is about 5 %). A model without a tokenizer has no words to offer."""
    cfg = ModelConfig(n_layers=1, d_model=64, n_heads=4, d_vocab=500, n_ctx=8)
    tables = [circuits.token_tables(Transformer(dataclasses.replace(cfg, seed=seed)), 0, head, False)
              for seed in range(8) for head in range(4)]
    chance = circuits.TABLE_TOKENS / (circuits.TRIGRAM_VOCABULARY + 1) * 500
    assert all(t.chance_rank == pytest.approx(chance) for t in tables) and tables[0].labels[0].isdigit()
    assert np.mean([max(t.copy_ranks) for t in tables]) == pytest.approx(chance, rel=0.15)
    with pytest.raises(ValueError, match="no tokenizer"):
        circuits.token_tables(Transformer(cfg), 0, 0, True)


def test_one_layer_counts_only_copying_heads():
    o = circuits.one_layer(copier_and_opposite(), (0, 2, 3))
    assert o.copiers == 1 and o.copying[0] == pytest.approx(1.0) and o.copying[0] > o.copying_bar
    assert o.copying_bar == circuits.random_copying(16, 16, 8).bar(2) and 0.2 < o.copying_bar < 0.7


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_heads_of_a_random_model_do_not_count_as_copying(seed):
    """Half of a random model's heads score above 0: a positive copying score is no evidence. None passes the bar."""
    o = circuits.one_layer(Transformer(ModelConfig(n_layers=1, d_model=64, n_heads=4, d_vocab=50, n_ctx=8, seed=seed)), (0, 2))
    assert (o.copying > 0).any() and o.copiers == 0 and o.copying.max() < o.copying_bar


def test_one_dimensional_heads_never_count_as_copying_though_half_score_one():
    o = circuits.one_layer(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=16, d_vocab=50, n_ctx=8)), (0, 2))
    assert np.allclose(np.abs(o.copying), 1.0) and (o.copying > 0).sum() >= 4 and o.copiers == 0 and o.copying_bar > 1


def test_one_layer_finds_each_heads_ov_eigenvalues_once(monkeypatch):
    calls = []
    monkeypatch.setattr(circuits, "ov_eigenvalues", lambda model, layer, head: calls.append(head) or
                        circuits.FactoredMatrix.eigenvalues(circuits.ov_circuit(model, layer, head)).cdouble())
    o = circuits.one_layer(copier_and_opposite(), (0, 2, 3))
    assert sorted(calls) == [0, 1] and list(o.eigenvalues) == ["L0H0", "L0H1"]
    assert np.allclose(o.copying, circuits.copying_scores(copier_and_opposite())[0].numpy(), atol=1e-12)


def test_composition_tables_cover_every_earlier_later_pair_and_only_those():
    model = Transformer(CFG)                                                       # 3 layers, 4 heads
    comp = circuits.composition(model)
    assert comp.writers[:2] == ["L0H0", "L0H1"] and comp.readers[-1] == "L2H3" and len(comp.writers) == len(comp.readers) == 8
    for mode in "QKV":
        full = circuits.composition_scores(model, mode).numpy()                    # [L H L H]
        assert comp.scores[mode].shape == (8, 8)
        assert np.isnan(comp.scores[mode][4:, :4]).all()                           # L1 writers cannot meet L1 readers
        assert comp.scores[mode][5, 6] == full[1, 1, 2, 2] and comp.scores[mode][0, 7] == full[0, 0, 2, 3]
    best = max((comp.scores[m][a, b], m) for m in "QKV" for a in range(8) for b in range(8) if a < 4 or b >= 4)
    assert comp.strongest[0][3] == best[0] and comp.strongest[0][0] == best[1] and len(comp.strongest) == 3
    assert comp.random == circuits.random_baseline(32)
    assert [v.v_composition for v in comp.virtual] == sorted((v.v_composition for v in comp.virtual), reverse=True)
    with pytest.raises(ValueError, match="two layers or more"):
        circuits.composition(Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=5, n_ctx=4)))


def test_virtual_heads_are_flagged_above_random_only_when_they_v_compose():
    """The shipped attn-only-2l's best V-composition (0.086) is below random factors' mean 0.088 and the bar for its
    16 pairs, 0.095: no virtual head is claimed. A head whose values read exactly what an earlier head writes is above random."""
    from mechlib import zoo

    shipped = circuits.composition(zoo.load("attn-only-2l"))
    assert not shipped.any_virtual_above_random and not any(v.above_random for v in shipped.virtual)
    assert shipped.tested == 16 and shipped.bar == shipped.chance.bar(16) == pytest.approx(0.095, abs=0.002)
    assert all(v.v_composition <= shipped.chance.mean < shipped.bar for v in shipped.virtual)
    model = Transformer(ModelConfig(n_layers=2, d_model=8, n_heads=1, d_vocab=10, n_ctx=4))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.W_V.zero_()
            block.attn.W_O.zero_()
        model.blocks[0].attn.W_V[0, 0, :] = 1.0   # head A reads dim 0 and writes dim 3 …
        model.blocks[0].attn.W_O[0, :, 3] = 1.0
        model.blocks[1].attn.W_V[0, 3, :] = 1.0   # … head B's values read dim 3 and write dim 5
        model.blocks[1].attn.W_O[0, :, 5] = 1.0
    built = circuits.composition(model)
    (virtual,) = built.virtual
    assert virtual.v_composition == pytest.approx(1.0) and virtual.above_random and built.any_virtual_above_random
    assert (virtual.writer, virtual.reader) == ("L0H0", "L1H0")
    assert virtual.norm == pytest.approx(circuits.virtual_ov(model, (0, 0), (1, 0)).norm().item())


def test_random_composition_gives_the_mean_and_a_bar_that_rises_with_the_pairs_tested():
    """Fresh random heads pass the one-test bar about 5 % of the time; the best of 16 passes it most of the time, and
    passes the bar for 16 tests at most about 5 % of the time (Bonferroni)."""
    chance = circuits.random_composition(64, 16)
    assert chance is circuits.random_composition(64, 16)                                  # cached per size
    assert chance.mean == pytest.approx(circuits.random_baseline(64), rel=0.02) and 0 < chance.sd < 0.1 * chance.mean
    assert chance.bar(1) == pytest.approx(chance.mean + 1.645 * chance.sd, rel=1e-4) and chance.bar(1) < chance.bar(16)
    g = torch.Generator().manual_seed(99)
    A, B = (FactoredMatrix(torch.randn(3200, 64, 16, generator=g, dtype=torch.float64),
                           torch.randn(3200, 16, 64, generator=g, dtype=torch.float64)) for _ in range(2))
    scores = (A @ B).norm() / (A.norm() * B.norm())                                       # [3200]
    best = scores.reshape(200, 16).max(-1).values                                         # 200 families of 16 pairs
    assert 0.03 < float((scores > chance.bar(1)).double().mean()) < 0.08
    assert 0.35 < float((scores > chance.mean).double().mean()) < 0.65
    assert float((best > chance.bar(1)).double().mean()) > 0.4                           # the old per-pair bar
    assert float((best > chance.bar(16)).double().mean()) < 0.09
    with pytest.raises(ValueError, match="one test or more"):
        chance.bar(0)


@pytest.mark.parametrize("seed", [1, 4, 5, 6])
def test_a_random_model_has_no_virtual_head_above_random_and_a_planted_pair_is_flagged(seed):
    """3 layers of 8 heads: 192 V-composition pairs. The best of them passes the one-pair 95 % bar on these random
    models, but not the bar for 192 pairs. Plant one pair whose reader's values read what its writer writes: only it is flagged."""
    model = Transformer(ModelConfig(n_layers=3, d_model=64, n_heads=8, d_vocab=20, n_ctx=8, seed=seed))
    comp = circuits.composition(model)
    assert comp.tested == 192 and comp.bar == comp.chance.bar(192)
    assert comp.virtual[0].v_composition > comp.chance.bar(1)                            # flagged by a per-pair bar
    assert not comp.any_virtual_above_random and not any(v.above_random for v in comp.virtual)
    writer, reader = model.blocks[0].attn, model.blocks[2].attn
    with torch.no_grad():
        reader.W_V[5] = writer.W_O[3].T                                                   # L2H5's values read L0H3's output
    planted = circuits.composition(model)
    assert planted.virtual[0].writer == "L0H3" and planted.virtual[0].reader == "L2H5"
    assert planted.virtual[0].above_random and planted.virtual[0].v_composition > planted.bar + 10 * planted.chance.sd
    assert [v.above_random for v in planted.virtual[1:]] == [False] * 3
