"""The shipped zoo: files within their size limits, loadable, and meeting the score bounds."""

import dataclasses

import pytest
import torch

from mechlib import bigrams, copying, data, induction, train, zoo

MB = 1e6


def test_every_zoo_model_is_shipped_small():
    sizes = {name: zoo.path(name).stat().st_size for name in zoo.names()}
    assert all(size <= 5 * MB for size in sizes.values()), sizes
    everything = sum(p.stat().st_size for p in zoo.CHECKPOINTS.rglob("*") if p.is_file())
    assert everything <= 30 * MB, everything


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_model_loads_read_only_with_its_tokenizer(name):
    model = zoo.load(name)
    recipe = zoo.RECIPES[name]
    assert model.cfg.n_layers == recipe.cfg.n_layers and model.cfg.d_model == recipe.cfg.d_model
    if recipe.source == "copying":  # random ids: nothing to tokenize
        assert model.tokenizer is None
    else:
        assert model.tokenizer is not None and model.tokenizer.d_vocab == model.cfg.d_vocab
    assert model.read_only and zoo.load(name) is model
    with pytest.raises(RuntimeError, match="read-only"):
        model.train()


def test_zero_layer_model_is_at_the_bigram_fit_its_width_allows():
    """Fitted full-batch to its text's bigram table (mechlib.bigrams.fit): KL ≤ 0.01 nats (SGD training gave 0.048)."""
    model = zoo.load("attn-only-0l")
    table = bigrams.corpus_table(torch.tensor(model.tokenizer.encode(data.builtin_text())), model.cfg.d_vocab)
    assert 2.5 < bigrams.entropy(table) < 3.5  # nats: the corpus's conditional bigram entropy at 1,000 words
    assert bigrams.kl(table, bigrams.zero_layer_logits(model)) <= 0.01


def test_two_layer_model_has_a_previous_token_head_in_layer_0_and_an_induction_head_in_layer_1():
    model = zoo.load("attn-only-2l")
    length = data.eval_length(model.cfg.n_ctx)
    tokens = data.repeated_sequences(model.cfg.d_vocab, length, 32, seed=1234)
    _, cache = model.run_with_cache(tokens)
    patterns = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"].cpu() for l in range(2)])
    prev, ind = induction.previous_token_scores(patterns), induction.induction_scores(patterns, tokens, length)
    assert prev[0].max() >= 0.9, prev
    assert ind[1].max() >= 0.9, ind


def scores(model) -> dict[str, float]:
    """What training reports (``copying.metrics``) on its repeated random sequences."""
    return copying.metrics(model, train.held_out_repeats(model.cfg))


def test_one_layer_model_has_no_induction_head():
    assert scores(zoo.load("attn-only-1l"))["induction"] < 0.3


def test_two_layer_training_snapshots_and_history_replay_the_phase_change():
    steps = zoo.snapshot_steps("attn-only-2l")
    assert 18 <= len(steps) <= 22 and steps[0] == 0
    history = zoo.history("attn-only-2l")
    assert history[-1]["step"] == steps[-1]
    first, last = zoo.load_snapshot("attn-only-2l", steps[0]), zoo.load_snapshot("attn-only-2l", steps[-1])
    assert scores(first)["induction"] < 0.3 <= 0.9 <= scores(last)["induction"]
    assert last.tokenizer is not None


def test_the_lstm_cannot_copy_a_random_segment_that_the_transformer_can():
    """The separating test: second-repeat loss at a segment length neither model trained on."""
    tokens = data.repeated_sequences(105, data.EVAL_LENGTH, 16, seed=11)
    losses = {name: induction.loss_by_position(zoo.load(name), tokens)[data.EVAL_LENGTH + 1:].mean().item()
              for name in ("attn-only-2l", "lstm")}
    assert losses["attn-only-2l"] < 0.5 and losses["lstm"] > 4.0  # nats; ln(103) ≈ 4.63 is a guess


def test_readme_states_how_many_snapshots_ship():
    """The README said 20 snapshots while 21 shipped (step 0 and every 300 steps to 6,000)."""
    readme = (zoo.CHECKPOINTS.parents[1] / "README.md").read_text()
    steps = zoo.snapshot_steps("attn-only-2l")
    assert steps[0] == 0 and f"{len(steps)} snapshots" in readme


def test_the_copying_controls_share_the_presets_recipe_and_step_budget():
    """Same task, optimiser settings, batch and number of steps; the preset's two-layer model, a one-layer model of
    its width, an LSTM within 5 % of its parameter count."""
    preset, recipes = train.INDUCTION_PRESET, {role: zoo.RECIPES[name] for role, name in copying.CONTROLS.items()}
    for recipe in recipes.values():
        assert train.recipe_data(recipe) == (None, preset.data)
        assert (recipe.lr, recipe.batch_size, recipe.weight_decay, recipe.warmup, recipe.clip) == (
            preset.lr, preset.batch_size, preset.weight_decay, preset.warmup, preset.clip)
        assert recipe.steps == recipes["two layers"].steps
    assert recipes["two layers"].cfg == dataclasses.replace(preset.cfg, seed=0)
    assert recipes["one layer"].cfg == dataclasses.replace(preset.cfg, n_layers=1, seed=0)
    two, lstm = recipes["two layers"].cfg.n_params(), recipes["LSTM"].cfg.n_params()
    assert (two, lstm) == (101_440, 99_328) and abs(lstm / two - 1) < 0.05


def test_a_copying_recipe_trains_deterministically(monkeypatch):
    """``python -m mechlib.train NAME``'s training on the copying task, shortened to 5 steps: twice the same weights.
    With one thread, as the command runs it (with two, the LSTM's embedding gradient sums in a varying order)."""
    short = dataclasses.replace(zoo.RECIPES["copying-lstm"], steps=5)
    monkeypatch.setitem(zoo.RECIPES, "copying-lstm", short)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first, second = (train.train_recipe("copying-lstm").model for _ in range(2))
    finally:
        torch.set_num_threads(threads)
    assert first.tokenizer is None and first.cfg == short.cfg
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    assert not torch.equal(first.W_U, zoo.load("copying-lstm").W_U.cpu())  # 5 steps are not the shipped 2,000


def test_the_shipped_copying_two_layer_model_has_the_circuit_and_the_one_layer_model_none():
    twos, ones = (scores(zoo.load(name)) for name in ("copying-2l", "copying-1l"))
    assert twos["induction"] >= 0.9 and twos["prev_token"] >= 0.5
    assert ones["induction"] < 0.3
