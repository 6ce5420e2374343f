"""Induction and previous-token scores: known answers on hand-built patterns."""

import dataclasses

import pytest
import torch

from mechlib import data, induction
from mechlib.config import ModelConfig
from mechlib.model import Transformer


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
    tokens = data.repeated_sequences(d_vocab=1000, length=10, batch=8, seed=0)
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


def test_duplicate_token_head_scores_one():
    tokens = data.repeated_sequences(d_vocab=1000, length=8, batch=4, seed=2)
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
    tokens = data.repeated_sequences(model.cfg.d_vocab, data.eval_length(model.cfg.n_ctx), 32, seed=99)
    for ablation in ({(0, prev_head): torch.zeros(model.cfg.d_head)}, induction.mean_ablation(model, tokens, [(0, prev_head)])):
        ablated = induction.head_scores(model, ablate=ablation)
        assert ablated["induction"][1, ind_head] < 0.5 * clean["induction"][1, ind_head]
    assert not model.training and model.read_only  # the shared model was not touched


def test_in_context_learning_score_is_negative_with_an_induction_head():
    from mechlib import zoo

    model = zoo.load("attn-only-2l")
    tokens = data.repeated_sequences(model.cfg.d_vocab, data.eval_length(model.cfg.n_ctx), 16, seed=3)
    assert induction.in_context_learning_score(model, tokens) < -1.0  # nats: the second repeat is predicted


def hand_built_circuit(n_layers: int = 2, previous: int = 0, later: int = 1, by_position: bool = False,
                       copies: bool = True):
    """A float64 shortformer model with one head per layer, zero elsewhere. Layer ``previous``: a previous-token
    head copying the previous token into its own subspace. Layer ``later``: an induction head whose keys read that
    subspace and whose queries read the current token; or, ``by_position``, a head that attends to q − L + 1 by
    position alone, which scores as an induction head at the scored length L but reads nothing the first wrote.
    The later head's OV circuit copies the token it attends to (W_U reads the token subspace), or, without
    ``copies``, lowers it."""
    from mechlib.config import ModelConfig
    from mechlib.model import Transformer

    V, n = 12, 16                                   # vocabulary, positions
    tok, pos, prev = slice(0, V), slice(V, V + n), slice(V + n, 2 * V + n)
    cfg = ModelConfig(n_layers=n_layers, d_model=2 * V + n, n_heads=1, d_head=n, d_vocab=V, n_ctx=n,
                      positional="shortformer")
    model = Transformer(cfg).double()
    big, shift = 40.0, data.eval_length(n) - 1
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.embed.W_E[:, tok] = torch.eye(V)
        model.pos_embed.W_pos[:, pos] = torch.eye(n)
        a, b = model.blocks[previous].attn, model.blocks[later].attn
        a.W_Q[0, pos, :] = big * torch.eye(n)                    # query at p asks for p − 1 …
        a.W_K[0, pos, :] = torch.eye(n).roll(1, dims=1)           # … key at p' answers as p' + 1
        a.W_V[0, tok, :V] = torch.eye(V)                          # move the token …
        a.W_O[0, :V, prev] = torch.eye(V)                         # … into the "previous token" subspace
        if by_position:
            b.W_Q[0, pos, :] = big * torch.eye(n)                 # query at p asks for p − L + 1
            b.W_K[0, pos, :] = torch.eye(n).roll(shift, dims=1)
        else:
            b.W_Q[0, tok, :V] = big * torch.eye(V)                # query: my current token
            b.W_K[0, prev, :V] = torch.eye(V)                     # key: my previous token
        b.W_V[0, tok, :V] = torch.eye(V)
        b.W_O[0, :V, tok] = torch.eye(V) if copies else -torch.eye(V)
        model.unembed.W_U[tok, :] = torch.eye(V)
    return model


@pytest.mark.parametrize("n_layers, previous, later", [(2, 0, 1), (3, 0, 2), (3, 1, 2)])
def test_the_hand_built_circuit_is_found_in_whichever_layers_it_sits(n_layers, previous, later):
    from mechlib import checks, circuits

    circuit = induction.induction_circuit(hand_built_circuit(n_layers, previous, later))
    assert (circuit.previous, circuit.induction) == (f"L{previous}H0", f"L{later}H0")
    assert circuit.found and circuit.missing == []
    assert circuit.has_previous and circuit.previous_score > 0.99 >= checks.PREV_TOKEN_MIN
    assert circuit.has_induction and circuit.induction_score > 0.99
    # two aligned identities of rank V = 12 compose at 1/√12, their ceiling, far above random factors
    assert circuit.composes and circuit.k_composition == pytest.approx(12**-0.5) == pytest.approx(circuit.k_ceiling)
    chance = circuits.random_composition(40, 16)
    assert circuit.baseline == chance.mean and circuit.threshold == chance.bar(1)           # one pair tested
    assert circuit.baseline < circuit.threshold < 0.2
    assert circuit.copies and circuit.copying == pytest.approx(1.0)
    assert circuit.copying_bar == circuits.random_copying(12, 40, 16).bar(1) and 0.1 < circuit.copying_bar < 0.9
    assert circuit.depends and circuit.ablated_score < 0.2 and circuit.drop == pytest.approx(1 - circuit.ablated_score / circuit.induction_score)
    # every head after the previous-token head's layer is asked; only the induction head breaks
    assert list(circuit.ablation) == [f"L{layer}H0" for layer in range(previous + 1, n_layers)]
    assert circuit.ablation[circuit.induction] == (circuit.induction_score, circuit.ablated_score)
    assert circuit.broken == (circuit.induction,)


def test_the_ablation_is_functional_and_reaches_only_later_layers():
    model = hand_built_circuit(n_layers=3, previous=1, later=2)
    before = induction.head_scores(model)["induction"]
    ablated = induction.ablated_induction_scores(model, (1, 0))                     # [layer head]
    assert torch.equal(ablated[:2], before[:2]) and before[2, 0] > 0.99 and ablated[2, 0] < 0.2
    assert torch.equal(induction.head_scores(model)["induction"], before)           # the model is untouched


def test_a_positional_copy_of_an_induction_head_is_not_an_induction_circuit():
    """Attending to q − L + 1 by position scores as induction at the scored length, but its keys read nothing the
    previous-token head wrote: no K-composition, and ablating the previous-token head changes nothing."""
    from mechlib import circuits

    circuit = induction.induction_circuit(hand_built_circuit(by_position=True))
    assert circuit.has_previous and circuit.has_induction and circuit.copies
    assert not circuit.composes and circuit.k_composition == 0.0
    assert not circuit.depends and abs(circuit.drop) < 1e-9 and circuit.broken == ()  # nothing breaks
    assert not circuit.found and len(circuit.missing) == 2
    chance = circuits.random_composition(40, 16)
    assert circuit.missing[0] == (f"no K-composition: L0H0 → L1H0 scores 0.000, not above random (random heads score "
                                  f"{chance.mean:.3f} ± {chance.sd:.3f}; one pair tested, the bar is {circuit.threshold:.3f})")
    # an induction head is there, so the ablation is tested, and fails
    assert circuit.missing[1].startswith("L1H0 does not depend on L0H0: ablating L0H0 moves its induction score")


def test_an_induction_head_whose_ov_circuit_does_not_copy_is_not_an_induction_circuit():
    """The same attention, but the later head's OV circuit lowers the token it finds: every other part passes, and
    the missing part says so."""
    from mechlib import circuits

    circuit = induction.induction_circuit(hand_built_circuit(copies=False))
    assert circuit.has_previous and circuit.has_induction and circuit.composes and circuit.depends
    assert not circuit.copies and circuit.copying == pytest.approx(-1.0) and not circuit.found
    bar = circuits.random_copying(12, 40, 16).bar(1)
    assert circuit.missing == [f"L1H0's OV circuit does not copy: its copying score -1.00 is not above what a random "
                               f"head reaches, {bar:.2f}"]


def test_the_shipped_models_circuit_is_found_in_attn_only_2l_and_not_in_gelu_2l():
    from mechlib import zoo

    found = induction.induction_circuit(zoo.load("attn-only-2l"))
    assert found.found and (found.previous, found.induction) == ("L0H1", "L1H1")
    assert found.previous_score > 0.95 and found.induction_score > 0.9 and found.drop > 0.9
    assert found.threshold < found.k_composition < found.k_ceiling
    # gelu-2l's best pair K-composes above the random mean but not above the 95th percentile: chance, not a circuit.
    missing = induction.induction_circuit(zoo.load("gelu-2l"))
    assert not missing.found and not missing.has_previous and not missing.has_induction and not missing.depends
    assert missing.missing[0] == (f"no previous-token head before layer 1: the best, {missing.previous}, scores "
                                  f"{missing.previous_score:.2f} < 0.5")
    assert missing.previous_score < 0.2 and missing.missing[1].startswith("no induction head: the best, L1H")
    assert missing.baseline < missing.k_composition <= missing.threshold and not missing.composes
    # with no induction head the ablation means nothing: it is not tested, rather than reported as a drop
    assert missing.missing[-1] == "the ablation is not tested: no induction head found"
    assert not any("ablating" in line for line in missing.missing)
    with pytest.raises(ValueError, match="two layers or more"):
        induction.induction_circuit(zoo.load("attn-only-1l"))


def test_two_layers_puts_the_composition_and_the_circuit_side_by_side():
    from mechlib import zoo

    t = induction.two_layers(zoo.load("attn-only-2l"), seed=3)
    assert t.heads == [f"L{l}H{h}" for l in range(2) for h in range(4)] and t.patterns.shape == (2, 4, 41, 41)
    first, second = t.patterns[1, 1, 21:, 2:22], t.patterns[1, 1, 21:, 1:21]           # after the earlier copy, on it
    assert first.diagonal().mean() > 0.8 > second.diagonal().mean()                      # L1H1 on the example, as scored
    writer, reader = t.composition.writers.index(t.circuit.previous), t.composition.readers.index(t.circuit.induction)
    assert t.composition.scores["K"][writer, reader] == pytest.approx(t.circuit.k_composition, abs=1e-6)
    assert t.scores["induction"][1, 1] == pytest.approx(t.circuit.induction_score)
    assert t.composition.chance.mean == t.circuit.baseline and t.composition.chance.bar(1) == t.circuit.threshold
    assert t.circuit.copies and t.circuit.copying > 0.9 > 0.1 > t.circuit.copying_bar         # L1H1 copies
    assert t.previous_token_heads == ["L0H1"] and t.scores["prev_token"][0, 1] >= 0.5 > t.scores["prev_token"][0, 0]
    assert set(t.circuit.ablation) == {f"L1H{h}" for h in range(4)}
    assert t.circuit.broken == ("L1H1", "L1H2", "L1H3")  # every induction head that falls by half: three here


@pytest.mark.parametrize("n_ctx, d_vocab", [(2, 3), (6, 1000), (64, 21), (64, 2)])
def test_sizes_too_small_to_score_induction_are_refused_with_what_is_needed(n_ctx, d_vocab):
    """A segment shorter than 3 puts the induction target on the query or the previous token; fewer ordinary tokens
    than the segment is long leaves few tokens with one earlier copy (none at d_vocab 3: the old crash)."""
    from mechlib.config import ModelConfig
    from mechlib.model import Transformer

    model = Transformer(ModelConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=d_vocab, n_ctx=n_ctx))
    assert not induction.scorable(model.cfg)
    for experiment in (lambda m: induction.two_layers(m, 0), induction.induction_circuit):
        with pytest.raises(ValueError, match=rf"need a context of 7 tokens or more.*n_ctx = {n_ctx} .*d_vocab = {d_vocab}"):
            experiment(model)


@pytest.mark.parametrize("n_ctx, d_vocab", [(7, 5), (16, 9), (64, 22)])
def test_the_smallest_scorable_sizes_are_scored(n_ctx, d_vocab):
    from mechlib.config import ModelConfig
    from mechlib.model import Transformer

    cfg = ModelConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=d_vocab, n_ctx=n_ctx)
    assert induction.scorable(cfg) and d_vocab - 2 == data.eval_length(n_ctx) >= induction.MIN_LENGTH
    assert not induction.scorable(ModelConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=d_vocab - 1, n_ctx=n_ctx))
    t = induction.two_layers(Transformer(cfg), 0)
    assert t.patterns.shape[-1] == 1 + 2 * data.eval_length(n_ctx) and t.circuit.missing


def test_every_scorable_size_has_second_repeat_tokens_to_score():
    """At the fewest tokens allowed, for every context length, the scoring data has queries with one earlier copy."""
    for n_ctx in range(7, 2 * data.EVAL_LENGTH + 8):
        length = data.eval_length(n_ctx)
        tokens = data.repeated_sequences(length + 2, length, 32, 1234)          # head_scores' data
        uniform = torch.ones(1, 32, 1, tokens.shape[1], tokens.shape[1])
        assert induction.induction_scores(uniform, tokens, length).shape == (1, 1)


def test_the_phase_change_is_read_from_the_shipped_checkpoints():
    from mechlib import zoo

    replay = induction.phase_change("attn-only-2l")
    assert replay.steps == zoo.snapshot_steps("attn-only-2l") and len(replay.steps) == len(replay.induction) == len(replay.icl)
    assert replay.induction[0] < 0.3 and replay.induction[-1] >= 0.9 and replay.icl[-1] < -1 < replay.icl[0]
    first = replay.steps.index(replay.formed_at)
    assert replay.induction[first] >= 0.5 > max(replay.induction[:first])
    early, late = (induction.snapshot(zoo.load_snapshot("attn-only-2l", step), 0) for step in (replay.steps[0], replay.steps[-1]))
    assert early.best_induction[1] < 0.3 and late.best_induction == ("L1H1", pytest.approx(replay.induction[-1]))
    assert late.best_previous[0] == "L0H1" and late.patterns.shape == (2, 4, 41, 41)
    assert replay.jump == (replay.steps[first - 1], replay.formed_at)    # the largest rise is where the head forms


def test_the_jump_is_the_largest_rise_between_consecutive_checkpoints():
    replay = induction.PhaseChange([0, 10, 20, 30, 40], [0.1, 0.3, 0.35, 0.8, 0.2], [0.0] * 5, 30)
    assert replay.jump == (20, 30)                                      # +0.45, more than +0.2 and the fall of 0.6


def test_the_phase_changes_bins_share_no_checkpoint_and_the_jump_lies_in_one():
    shipped = induction.phase_change("attn-only-2l")
    bins = shipped.bins(5)
    inside = [[step for step in shipped.steps if first <= step <= last] for first, last in bins]
    assert sum(inside, []) == shipped.steps  # every checkpoint in exactly one bin, in order
    assert bins[shipped.jump_bin(5)] == (0, 1_200) and shipped.jump == (900, 1_200) == (900, shipped.formed_at)
    late = dataclasses.replace(shipped, induction=[0.05] * 16 + [0.9] * 5)
    assert late.jump == (4_500, 4_800) and late.bins(5)[late.jump_bin(5)] == (3_900, 4_800)


def test_scores_run_in_chunks_equal_one_batch(monkeypatch):
    """A model whose 32 scored sequences do not fit SCORE_CHUNK_MB is run a chunk at a time (GPT-2 small: 4 at
    once); every head's scores are those of the whole batch at once, float64 to 1e-12."""
    model = Transformer(ModelConfig(n_layers=2, d_model=32, n_heads=4, d_vocab=50, n_ctx=24, d_mlp=64,
                                    normalization="LN")).double()
    whole = induction.head_scores(model)
    one = model.cfg.activations_mb(1, 1 + 2 * data.eval_length(24))
    monkeypatch.setattr(induction, "SCORE_CHUNK_MB", 1.5 * one)
    assert induction.score_chunk(model.cfg) == 1
    for name, scores in induction.head_scores(model).items():
        assert (scores - whole[name]).abs().max() < 1e-12, name
