"""mechlib is the notebook library: importing it, and every module in it, loads no Streamlit and nothing of the
app's (classroom/: the store, the training queue and its workers, the glossary, the lesson path)."""

import subprocess
import sys

import torch

import mechlib


def test_every_mechlib_module_imports_without_the_app_or_streamlit():
    code = ("import sys, importlib, mechlib\n"
            "for name in mechlib.MODULES: importlib.import_module(f'mechlib.{name}')\n"
            "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('streamlit', 'classroom')}))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert found == "[]"
    assert not {"store", "workers", "glossary"} & set(mechlib.MODULES)


def test_a_notebook_builds_runs_and_trains_a_model_larger_than_the_apps_budget(monkeypatch):
    """The app's memory budget is the app's: under a budget of 1 MB, mechlib still builds, runs and trains a model
    of about 6 MB (its weights alone above it) and computes its composition scores."""
    from mechlib import circuits, train
    from mechlib.config import ModelConfig
    from mechlib.data import RandomTokens
    from mechlib.model import Transformer

    monkeypatch.setenv("MECHLIB_MEMORY_BUDGET_MB", "1")
    cfg = ModelConfig(n_layers=2, d_model=128, n_heads=4, d_vocab=5000, n_ctx=16)
    assert cfg.estimate_mb(batch=1) > 1 and cfg.n_params() * 4 / 1e6 > 5
    model = Transformer(cfg)
    assert model(torch.zeros(2, 16, dtype=torch.long)).shape == (2, 16, 5000)
    assert circuits.composition_scores(model, "K").shape == (2, 4, 2, 4)
    trained = train.train(cfg, RandomTokens(5000), 2, eval_every=2, batch_size=4)
    assert trained.history[-1]["step"] == 2
