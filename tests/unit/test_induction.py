"""Induction and previous-token scores: known answers on hand-built patterns."""

import pytest
import torch

from mechlib import induction


def hand_built(tokens: torch.Tensor, length: int) -> torch.Tensor:
    """[layer=2 batch head=1 q k]: layer 0 attends to q−1; layer 1 to the token after the earlier copy."""
    batch, n = tokens.shape
    prev = torch.zeros(batch, 1, n, n)
    prev[:, 0, 0, 0] = 1
    prev[:, 0, torch.arange(1, n), torch.arange(0, n - 1)] = 1
    ind = torch.zeros(batch, 1, n, n)
    ind[:, 0, :, 0] = 1  # rest on <bos> …
    q = torch.arange(length + 1, 2 * length + 1)
    ind[:, 0, q, 0] = 0
    ind[:, 0, q, q - length + 1] = 1  # … except from second-repeat tokens
    return torch.stack([prev, ind])


def test_perfect_heads_score_one_and_zero_elsewhere():
    tokens = induction.repeated_sequences(d_vocab=1000, length=10, batch=8, seed=0)
    patterns = hand_built(tokens, 10)
    prev, ind = induction.previous_token_scores(patterns), induction.induction_scores(patterns, tokens, 10)
    assert prev[0, 0] == pytest.approx(1.0) and prev[1, 0] < 0.2
    assert ind[1, 0] == pytest.approx(1.0) and ind[0, 0] == pytest.approx(0.0)


def test_only_queries_with_a_unique_earlier_copy_count():
    tokens = torch.tensor([[0, 5, 5, 7, 5, 5, 7]])  # segment [5, 5, 7]: the 5s are ambiguous
    patterns = hand_built(tokens, 3)
    # Only the query at position 6 (token 7) is valid; a perfect head still scores 1 on it.
    assert induction.induction_scores(patterns, tokens, 3)[1, 0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no second-repeat token has a unique earlier copy"):
        induction.induction_scores(patterns, torch.tensor([[0, 5, 5, 5, 5, 5, 5]]), 3)


def test_second_half_loss_is_zero_for_a_perfect_copier_and_log_vocab_for_uniform():
    tokens = induction.repeated_sequences(d_vocab=50, length=6, batch=4, seed=1)
    uniform = torch.zeros(4, 13, 50)
    assert induction.second_half_loss(uniform, tokens, 6) == pytest.approx(torch.log(torch.tensor(50.0)).item())
    perfect = torch.full((4, 13, 50), -1e9)
    perfect.scatter_(-1, tokens.roll(-1, dims=1)[..., None], 0.0)
    assert induction.second_half_loss(perfect, tokens, 6) == pytest.approx(0.0)


def test_duplicate_token_head_scores_one():
    tokens = induction.repeated_sequences(d_vocab=1000, length=8, batch=4, seed=2)
    n = tokens.shape[1]
    duplicate = torch.zeros(4, 1, n, n)
    duplicate[:, 0, torch.arange(n), torch.arange(n)] = 1
    q = torch.arange(9, 17)
    duplicate[:, 0, q, q] = 0
    duplicate[:, 0, q, q - 8] = 1
    scores = induction.duplicate_token_scores(duplicate[None], tokens, 8)
    assert scores[0, 0] == pytest.approx(1.0)


def test_ablating_the_previous_token_head_breaks_the_induction_head():
    """The shipped attn-only-2l: knock out its layer-0 previous-token head and the layer-1 induction head fails."""
    from mechlib import zoo

    model = zoo.load("attn-only-2l")
    clean = induction.head_scores(model)
    prev_head = int(clean["prev_token"][0].argmax())
    ind_head = int(clean["induction"][1].argmax())
    assert clean["induction"][1, ind_head] >= 0.9
    tokens = induction.repeated_sequences(model.cfg.d_vocab, induction.eval_length(model.cfg.n_ctx), 32, seed=99)
    for ablation in ({(0, prev_head): torch.zeros(model.cfg.d_head)}, induction.mean_ablation(model, tokens, [(0, prev_head)])):
        ablated = induction.head_scores(model, ablate=ablation)
        assert ablated["induction"][1, ind_head] < 0.5 * clean["induction"][1, ind_head]
    assert not model.training and model.read_only  # the shared model was not touched


def test_in_context_learning_score_is_negative_with_an_induction_head():
    from mechlib import zoo

    model = zoo.load("attn-only-2l")
    tokens = induction.repeated_sequences(model.cfg.d_vocab, induction.eval_length(model.cfg.n_ctx), 16, seed=3)
    assert induction.in_context_learning_score(model, tokens) < -1.0  # nats: the second repeat is predicted
