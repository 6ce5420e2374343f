"""The zero-layer ceiling: the full-batch bigram fit reaches known answers, and the four figures are what they say."""

import math
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from mechlib import bigrams, circuits
from mechlib.config import ModelConfig
from mechlib.data import CharTokenizer, builtin_text
from mechlib.loss import next_token_loss
from mechlib.model import Transformer


def low_rank_table(d_vocab: int, rank: int, seed: int) -> torch.Tensor:
    """A [current next] table that is exactly softmax of a rank-``rank`` matrix, with random row weights."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(d_vocab, rank, generator=g, dtype=torch.float64)             # [current rank]
    B = torch.randn(rank, d_vocab, generator=g, dtype=torch.float64)             # [rank next]
    logits = A @ B
    return torch.rand(d_vocab, 1, generator=g, dtype=torch.float64) * logits.softmax(-1)


def fitted_kl(table: torch.Tensor, d_model: int) -> float:
    W_E, W_U, b_U = bigrams.fit(table, d_model)
    assert W_E.shape == (table.shape[0], d_model) and W_U.shape == (d_model, table.shape[0])
    return bigrams.kl(table, W_E @ W_U + b_U)


def test_the_fit_reaches_a_table_of_its_rank_and_no_further_below_it():
    table = low_rank_table(30, 3, seed=1)
    assert fitted_kl(table, 3) < 1e-4 and fitted_kl(table, 4) < 1e-4
    assert fitted_kl(table, 2) > 1e-2  # measured 0.093: one dimension short, the table is out of reach


def test_the_fit_is_deterministic_for_its_seed():
    table = low_rank_table(12, 2, seed=2)
    first, again = bigrams.fit(table, 2, steps=50), bigrams.fit(table, 2, steps=50)
    other = bigrams.fit(table, 2, seed=1, steps=50)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])


def test_kl_is_zero_for_the_table_itself_and_counts_only_where_the_table_has_weight():
    table = torch.tensor([[3.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 2.0]])  # row 1 never occurs
    logits = torch.where(table > 0, table.log(), -30.0)
    logits[1] = torch.tensor([5.0, -5.0, 0.0])                                  # whatever the model says there
    assert bigrams.kl(table, logits) == pytest.approx(0.0, abs=1e-12)
    uniform = torch.zeros(3, 3)
    expected = 4 / 8 * (0.75 * math.log(0.75 * 3) + 0.25 * math.log(0.25 * 3)) + 4 / 8 * (
        2 * 0.25 * math.log(0.25 * 3) + 0.5 * math.log(0.5 * 3))
    assert bigrams.kl(table, uniform) == pytest.approx(expected, rel=1e-12)


def test_unigram_kl_and_entropy_of_a_two_token_table_by_hand():
    """p(current) = (½, ½), P(next | current) = (¾, ¼) and (¼, ¾), p(next) = (½, ½)."""
    table = torch.tensor([[3.0, 1.0], [1.0, 3.0]])
    entropy = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))                  # 0.5623
    assert bigrams.entropy(table) == pytest.approx(entropy, rel=1e-12)
    assert bigrams.unigram_kl(table) == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), rel=1e-12)  # 0.1308
    assert bigrams.unigram_kl(table) == pytest.approx(math.log(2) - entropy, rel=1e-12)  # H(next) − H(next | current)


def test_a_table_whose_next_token_ignores_the_current_one_has_no_unigram_gap():
    table = torch.tensor([[2.0, 6.0], [1.0, 3.0]])  # both rows (¼, ¾)
    assert bigrams.unigram_kl(table) == pytest.approx(0.0, abs=1e-12)
    assert bigrams.entropy(table) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), rel=1e-12)


def test_the_training_table_is_the_mean_next_token_loss_over_every_window():
    """Σ table · −log softmax(W_E W_U + b_U) equals the loss averaged over every training window (<bos>, then
    n_ctx − 1 tokens of the stream), up to the stream's edges; without the <bos> row it does not."""
    d_vocab, n_ctx = 10, 8
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(2, d_vocab, (3000,), generator=g)
    model = Transformer(ModelConfig(n_layers=0, d_model=4, n_heads=1, d_vocab=d_vocab, n_ctx=n_ctx,
                                    positional="shortformer"))
    starts = range(len(tokens) - n_ctx + 2)
    windows = torch.stack([torch.cat([torch.zeros(1, dtype=torch.long), tokens[s : s + n_ctx - 1]]) for s in starts])
    with torch.no_grad():
        every_window = float(next_token_loss(model(windows), windows))
        log_Q = (model.embed.W_E @ model.unembed.W_U + model.unembed.b_U).double().log_softmax(-1)
    tables = {True: bigrams.training_table(tokens, d_vocab, n_ctx), False: bigrams.corpus_table(tokens, d_vocab)}
    for close, table in tables.items():
        assert float(table.sum()) == pytest.approx(1.0)
        assert (float(-(table * log_Q).sum()) == pytest.approx(every_window, rel=1e-3)) is close


@pytest.fixture(scope="module")
def char_model() -> Transformer:
    tokenizer = CharTokenizer.fit(builtin_text())
    model = Transformer(ModelConfig(n_layers=0, d_model=8, n_heads=1, d_vocab=tokenizer.d_vocab, n_ctx=16,
                                    positional="shortformer"))
    model.tokenizer = tokenizer
    return model


def test_the_four_figures_of_a_random_zero_layer_model(char_model):
    c = bigrams.ceiling(char_model)
    p_current, P = circuits.corpus_bigrams(char_model)                         # [V], [V V], by another route
    log_P = torch.where(P > 0, P.log(), 0.0)
    log_Q = (char_model.embed.W_E @ char_model.unembed.W_U + char_model.unembed.b_U).detach().double().log_softmax(-1)
    kl, entropy = (p_current[:, None] * P * (log_P - log_Q)).sum(), -(p_current[:, None] * P * log_P).sum()
    assert c.model_kl == pytest.approx(float(kl), rel=1e-9) and c.entropy == pytest.approx(float(entropy), rel=1e-9)
    assert 0 < c.best_fit_kl < c.unigram_kl < c.model_kl  # random weights are worse than ignoring the current token


def test_a_model_carrying_the_best_fit_has_the_best_fits_kl(char_model):
    tokenizer = char_model.tokenizer
    table = bigrams.corpus_table(torch.tensor(tokenizer.encode(builtin_text())), tokenizer.d_vocab)
    fitted = Transformer(char_model.cfg)
    fitted.tokenizer = tokenizer
    with torch.no_grad():
        for param, value in zip((fitted.embed.W_E, fitted.unembed.W_U, fitted.unembed.b_U), bigrams.fit(table, 8)):
            param.copy_(value)
    c = bigrams.ceiling(fitted)
    assert c.model_kl == pytest.approx(c.best_fit_kl, rel=1e-6)
    assert c.best_fit_kl == pytest.approx(bigrams.best_fit_kl(tokenizer.to_json(), 8), rel=1e-12)
    assert c.best_fit_kl < c.unigram_kl


def test_the_figures_need_a_zero_layer_model_with_a_tokenizer(char_model):
    without = Transformer(char_model.cfg)
    with pytest.raises(ValueError, match="need the model's tokenizer"):
        bigrams.ceiling(without)
    one_layer = Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=1, d_vocab=char_model.cfg.d_vocab, n_ctx=16,
                                        positional="shortformer"))
    one_layer.tokenizer = char_model.tokenizer
    with pytest.raises(ValueError, match="only for a zero-layer shortformer model"):
        bigrams.ceiling(one_layer)


def test_concurrent_requests_for_the_best_fit_compute_it_once(monkeypatch):
    """A class opens the zero-layer section at once: one fit runs, the other requests wait for it and read it."""
    tokenizer, calls = CharTokenizer.fit(builtin_text()), []

    def slow_fit(table, d_model, steps):
        calls.append(d_model)
        time.sleep(0.3)
        V = table.shape[0]
        return torch.zeros(V, d_model), torch.zeros(d_model, V), torch.zeros(V)

    monkeypatch.setattr(bigrams, "fit", slow_fit)
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: bigrams.best_fit_kl(tokenizer.to_json(), 5), range(6)))
    assert calls == [5] and len(set(results)) == 1 and results[0] > 0  # uniform logits: KL > 0, the same for all


def test_a_fit_for_another_model_does_not_wait_for_a_slow_one(monkeypatch):
    """One lock per fit, not one for the process: a vocabulary's slow fit held every other zero-layer section."""
    tokenizer, started = CharTokenizer.fit(builtin_text()), {}

    def fit(table, d_model, steps):
        started[d_model] = time.monotonic()
        time.sleep(2.0 if d_model == 6 else 0.0)
        V = table.shape[0]
        return torch.zeros(V, d_model), torch.zeros(d_model, V), torch.zeros(V)

    monkeypatch.setattr(bigrams, "fit", fit)
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(bigrams.best_fit_kl, tokenizer.to_json(), 6)
        time.sleep(0.3)
        quick = pool.submit(bigrams.best_fit_kl, tokenizer.to_json(), 7)
        quick.result(timeout=1.5)  # done while the slow fit still sleeps
        assert not slow.done()
        slow.result()


def test_the_zero_layer_cost_is_stated_from_the_vocabulary_and_the_fit_is_capped_in_time():
    assert bigrams.estimate_mb(1000) == 100.0 and bigrams.estimate_mb(6000) == 3600.0  # over a 1,024 MB budget
    assert bigrams.fit_steps(1000, 128) == bigrams.FIT_STEPS  # the zoo's model: the whole fit, ~10 s on 2 cores
    per_step = 6 * 6000**2 * 64 + 15 * 6000**2
    assert bigrams.fit_steps(6000, 64) == int(bigrams.FIT_SECONDS * bigrams.FIT_FLOPS / per_step) == 69
