"""The experiments that load or build their own models (the Equivalence and LSTM pages', the phase change's)
declare the memory they hold, from the arguments the pages call them with: a server states it and holds it under
its budget before running them."""

import pytest

from mechlib import (
    analogy,
    circuits,
    copying,
    data,
    equivalence,
    induction,
    loss,
    patterns,
    residual,
    zoo,
)
from mechlib.config import ModelConfig
from mechlib.device import experiment_mb


def both(batch: int) -> float:
    return sum(zoo.load(name).cfg.estimate_mb(batch) for name in (analogy.RNN, analogy.TRANSFORMER))


def test_the_equivalence_run_declares_its_layer_and_its_larger_one_hot_check():
    assert experiment_mb(equivalence.run, 2, 16, 100, 64, 4, 0, "float32", 3) == equivalence.peak_mb(2, 16, 100, 64, 4)
    assert experiment_mb(equivalence.run, 1, 20, 50_000, 64, 8, 0, "float64", 0) > experiment_mb(
        equivalence.run, 1, 20, 100, 64, 8, 0, "float64", 0)  # the vocabulary's one-hot check


def test_the_lstm_pages_experiments_declare_both_models_at_their_batch():
    assert experiment_mb(analogy.side_by_side, (1, 2, 3)) == both(1)
    assert experiment_mb(analogy.separating_test, 5, 0) == both(analogy.TEST_BATCH)
    assert experiment_mb(analogy.heldout) == both(loss.HELDOUT_BATCH)
    assert experiment_mb(analogy.pair) == 0.0  # the two models' configs only
    assert experiment_mb(copying.controls, 0) == sum(zoo.load(name).cfg.estimate_mb(copying.CONTROL_BATCH)
                                                     for name in copying.CONTROLS.values())


def test_the_phase_change_declares_one_checkpoint_at_a_time():
    cfg = zoo.load("attn-only-2l").cfg
    assert experiment_mb(induction.phase_change, "attn-only-2l") == cfg.estimate_mb(induction.SCORE_BATCH)
    assert experiment_mb(induction.snapshot_at, "attn-only-2l", 0, 0) == cfg.estimate_mb(induction.SCORE_BATCH)


def test_composition_declares_its_pair_tables_and_the_equivalence_run_its_checks_within_the_memory_given():
    model = zoo.load("attn-only-2l")
    assert experiment_mb(circuits.composition, model) == circuits.composition_mb(model)
    # 206.3 MB base (W_E's table); within 215 MB the float32 check (4.0 MB) runs and the float64 one (33.6 MB) not
    assert experiment_mb(equivalence.run, 1, 20, 50_000, 64, 8, 0, "float32", 0, 215) == equivalence.peak_mb(
        1, 20, 50_000, 64, 8, 215) == equivalence.estimate_mb(1, 20, 50_000, 64, 8) + equivalence.lookup_mb(
        1, 20, 50_000, 64, "float32")


def test_the_two_layer_part_declares_the_larger_of_its_scoring_batch_and_its_composition_tables():
    model = zoo.load("attn-only-2l")
    assert experiment_mb(induction.two_layers, model, 0) == max(induction.scoring_mb(model.cfg),
                                                                circuits.composition_mb(model))
    positions = 1 + 2 * data.eval_length(model.cfg.n_ctx)  # the whole batch at once: a small model's fits
    assert induction.score_chunk(model.cfg) >= induction.SCORE_BATCH
    assert induction.scoring_mb(model.cfg) == model.cfg.activations_mb(induction.SCORE_BATCH, positions) + 4 * (
        model.cfg.n_layers * induction.SCORE_BATCH * model.cfg.n_heads * positions**2) / 1e6


def test_an_experiment_on_a_models_input_declares_its_activations_not_the_weights_already_held():
    """GPT-2 small's shape: its 163 million parameters (652 MB) are held once, by the model cache; a page's
    experiment on 13 tokens adds what one forward of those 13 keeps, and scoring runs in chunks."""
    cfg = ModelConfig(n_layers=12, d_model=768, n_heads=12, d_vocab=50_257, n_ctx=1024, d_mlp=3072,
                      normalization="LN", act_fn="gelu_new")
    assert cfg.estimate_mb(batch=2) == pytest.approx((cfg.n_params() * 4 + 12 * 1024**2) / 1e6
                                                     + cfg.activations_mb(2, 1024))
    assert cfg.activations_mb(1, 13) < 20 < 650 < cfg.n_params() * 4 / 1e6
    model = type("Shape", (), {"cfg": cfg})()  # experiment_mb reads the config alone
    assert experiment_mb(patterns.scores, model, tuple(range(13)), 0, 0) == cfg.activations_mb(1, 13)
    assert experiment_mb(patterns.ranks, model, 0, 0) < 30 and experiment_mb(residual.subspaces, model) < 200
    assert induction.score_chunk(cfg) < induction.SCORE_BATCH and induction.scoring_mb(cfg) < 300
