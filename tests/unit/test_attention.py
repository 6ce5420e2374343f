"""The three readings of one attention layer agree; patterns are causal distributions."""

import pytest
import torch

from mechlib import attention

GRID = [(1, 1, 4, 1), (2, 5, 16, 4), (3, 20, 64, 8), (1, 33, 96, 12), (2, 7, 30, 5)]  # batch, pos, d_model, heads


def random_layer(batch, pos, d_model, heads, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    d_head = d_model // heads
    x = torch.randn(batch, pos, d_model, generator=g, dtype=dtype)
    W_Q, W_K, W_V = (torch.randn(heads, d_model, d_head, generator=g, dtype=dtype) / d_model**0.5 for _ in range(3))
    W_O = torch.randn(heads, d_head, d_model, generator=g, dtype=dtype) / d_model**0.5
    b_V = torch.randn(heads, d_head, generator=g, dtype=dtype)
    return x, W_Q, W_K, W_V, W_O, b_V


def three_readings(x, W_Q, W_K, W_V, W_O, b_V):
    q, k, v = attention.qkv(x, W_Q), attention.qkv(x, W_K), attention.qkv(x, W_V, b_V)
    pattern = attention.attention_pattern(attention.attention_scores(q, k))
    z = attention.mix_values(pattern, v)
    concat = attention.concat_then_project(z, W_O)
    per_head = attention.per_head_results(z, W_O).sum(-2)
    messages = attention.pattern_times_messages(pattern, x, W_V, W_O, b_V).sum(-2)
    return concat, per_head, messages, pattern


@pytest.mark.parametrize("sizes", GRID)
def test_readings_agree_float64(sizes):
    concat, per_head, messages, _ = three_readings(*random_layer(*sizes, torch.float64))
    assert (concat - per_head).abs().max() <= 1e-10
    assert (concat - messages).abs().max() <= 1e-10


@pytest.mark.parametrize("sizes", GRID)
def test_readings_agree_float32_within_documented_bound(sizes):
    concat, per_head, messages, _ = three_readings(*random_layer(*sizes, torch.float32))
    bound = 1e-5 * concat.abs().clamp(min=1.0)
    assert ((concat - per_head).abs() <= bound).all()
    assert ((concat - messages).abs() <= bound).all()


def test_readings_differ_when_a_head_is_dropped():
    """The checks can fail: leaving one head out of the sum breaks the identity."""
    x, W_Q, W_K, W_V, W_O, b_V = random_layer(2, 6, 16, 4, torch.float64)
    q, k, v = attention.qkv(x, W_Q), attention.qkv(x, W_K), attention.qkv(x, W_V)
    z = attention.mix_values(attention.attention_pattern(attention.attention_scores(q, k)), v)
    partial = attention.per_head_results(z, W_O)[..., :-1, :].sum(-2)
    assert (attention.concat_then_project(z, W_O) - partial).abs().max() > 1e-3


def test_pattern_rows_sum_to_one_with_zeros_above_diagonal():
    *_, pattern = three_readings(*random_layer(3, 9, 24, 3, torch.float64))
    assert pattern.shape == (3, 3, 9, 9)
    assert (pattern.sum(-1) - 1).abs().max() <= 1e-12
    assert torch.all(pattern.triu(1) == 0)
    assert torch.all(pattern[..., torch.ones(9, 9, dtype=torch.bool).tril()] > 0)
    assert torch.all(pattern[..., 0, 0] == 1)  # the first token can only attend to itself


def test_W_QK_and_W_OV_have_rank_at_most_d_head():
    _, W_Q, W_K, W_V, W_O, _ = random_layer(1, 1, 32, 4, torch.float64)
    for matrix in (attention.W_QK(W_Q, W_K), attention.W_OV(W_V, W_O)):
        assert matrix.shape == (4, 32, 32)
        assert all(int(r) == 8 for r in torch.linalg.matrix_rank(matrix))


def test_scores_are_q_dot_k_over_sqrt_d_head():
    q = torch.tensor([[[[1.0, 2.0]]], [[[3.0, 0.0]]]]).reshape(1, 2, 1, 2)  # [batch pos head d_head]
    k = torch.tensor([[[[1.0, 1.0]]], [[[0.0, 2.0]]]]).reshape(1, 2, 1, 2)
    scores = attention.attention_scores(q, k)[0, 0]  # [query_pos key_pos]
    assert scores[0, 0] == pytest.approx(3 / 2**0.5)
    assert scores[0, 1] == float("-inf")
    assert scores[1, 0] == pytest.approx(3 / 2**0.5)
    assert scores[1, 1] == pytest.approx(0.0)
