"""mechlib.interop: a mechlib Transformer to TransformerLens's HookedTransformer and back.

TransformerLens is not a mechlib dependency, but requirements-test.txt installs it (3.9), so the README's
test command runs every test here. The tests that need it take the ``tl`` fixture, which fails, never skips,
where it is missing: a green run always includes them.
Logits agree under |a − b| ≤ tol · max(1, |reference|) with tol = checks.INTEROP_TOLERANCE, on random models
and on every transformer in the zoo.
"""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mechlib import LSTM, LSTMConfig, ModelConfig, Transformer, zoo
from mechlib.checks import INTEROP_TOLERANCE, compare
from mechlib.interop import from_transformer_lens, to_transformer_lens
from tests.unit.helpers import randomize, required

pytestmark = pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]
SIZES = dict(n_layers=2, d_model=32, n_heads=4, d_vocab=50, n_ctx=16)
TL_SIZES = dict(SIZES, d_head=8)
# The same model in both vocabularies: (mechlib's ModelConfig, TransformerLens's HookedTransformerConfig fields).
PAIRS = {
    "attn-only": (ModelConfig(**SIZES), dict(TL_SIZES, attn_only=True, normalization_type=None)),
    "attn-only shortformer LN": (ModelConfig(**SIZES, positional="shortformer", normalization="LN"),
                                 dict(TL_SIZES, attn_only=True, normalization_type="LN",
                                      positional_embedding_type="shortformer")),
    "GELU MLP LN": (ModelConfig(**SIZES, d_mlp=64, normalization="LN"),
                    dict(TL_SIZES, d_mlp=64, act_fn="gelu", normalization_type="LN")),
    "GPT-2's GELU MLP LN": (ModelConfig(**SIZES, d_mlp=64, normalization="LN", act_fn="gelu_new"),
                            dict(TL_SIZES, d_mlp=64, act_fn="gelu_new", normalization_type="LN")),
    "GELU MLP shortformer, d_head 6": (ModelConfig(**SIZES | {"d_head": 6}, d_mlp=64, positional="shortformer"),
                                       dict(TL_SIZES | {"d_head": 6}, d_mlp=64, act_fn="gelu", normalization_type=None,
                                            positional_embedding_type="shortformer")),
    "0 layers": (ModelConfig(**SIZES | {"n_layers": 0}), dict(TL_SIZES | {"n_layers": 0}, attn_only=True,
                                                              normalization_type=None)),
}


TRANSFORMERS = [name for name, recipe in zoo.RECIPES.items() if isinstance(recipe.cfg, ModelConfig)]  # no LSTMs


@pytest.fixture(scope="module")
def tl():
    return required("transformer_lens")


def tokens_for(d_vocab: int, n_ctx: int, seed: int = 1) -> torch.Tensor:
    """A batch of 4 random sequences: n_ctx tokens long for odd seeds, a random length in 1..n_ctx for even ones."""
    generator = torch.Generator().manual_seed(seed)
    length = n_ctx if seed % 2 else int(torch.randint(1, n_ctx + 1, (), generator=generator))
    return torch.randint(0, d_vocab, (4, length), generator=generator)


def interop_tolerance(model: Transformer) -> float:
    return INTEROP_TOLERANCE[str(model.embed.W_E.dtype).removeprefix("torch.")]


def same_logits(model: Transformer, hooked, seeds=(1,)) -> list:
    """The logit check of each seed's batch (``tokens_for``), mechlib's logits against TransformerLens's.
    INTEROP_TOLERANCE's measurement: ``max(c.max_scaled_diff for c in same_logits(model, hooked, range(200)))``."""
    with torch.inference_mode():
        return [compare(model(tokens), hooked(tokens), interop_tolerance(model))
                for tokens in (tokens_for(model.cfg.d_vocab, model.cfg.n_ctx, seed) for seed in seeds)]


def assert_same_logits(model: Transformer, hooked, seeds=(1,)) -> None:
    for check in same_logits(model, hooked, seeds):
        assert check.passed, check


# ---------------------------------------------------------------------------------------------
# Without TransformerLens

def test_missing_transformer_lens_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformer_lens", None)  # `import transformer_lens` now fails
    with pytest.raises(ImportError, match=r'mechlib\.interop needs TransformerLens.*pip install "transformer-lens<4"'):
        to_transformer_lens(Transformer(ModelConfig(**SIZES)))
    with pytest.raises(ImportError, match="mechlib does not install"):
        from_transformer_lens(object())


def test_an_lstm_is_refused_before_anything_is_imported():
    with pytest.raises(TypeError, match="takes a mechlib Transformer, got LSTM"):
        to_transformer_lens(LSTM(LSTMConfig(d_vocab=20, d_model=8, d_hidden=8, n_ctx=8)))


def test_importing_mechlib_does_not_import_transformer_lens():
    """Where TransformerLens is installed (the bench venv), importing mechlib.interop still leaves it unloaded, and
    Hugging Face's transformers and tokenizers too."""
    code = ("import sys, mechlib, mechlib.interop; "
            "print([name for name in ('transformer_lens', 'transformers', 'tokenizers') if name in sys.modules])")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# With TransformerLens

@pytest.mark.parametrize("name", PAIRS)
def test_config_translates_field_by_field(tl, name):
    ours, theirs = PAIRS[name]
    hooked = to_transformer_lens(Transformer(ours))
    assert {field: getattr(hooked.cfg, field) for field in theirs} == theirs
    assert hooked.cfg.default_prepend_bos is False and hooked.tokenizer is None
    assert from_transformer_lens(tl.HookedTransformer(tl.HookedTransformerConfig(**theirs))).cfg == ours


@pytest.mark.parametrize("name", PAIRS)
def test_mechlib_to_transformer_lens_gives_the_same_logits(tl, name):
    cfg = PAIRS[name][0]
    model = randomize(Transformer(cfg)).eval()
    assert_same_logits(model, to_transformer_lens(model))


@pytest.mark.parametrize("name", PAIRS)
def test_transformer_lens_to_mechlib_gives_the_same_logits(tl, name):
    hooked = randomize(tl.HookedTransformer(tl.HookedTransformerConfig(**PAIRS[name][1]))).eval()
    model = from_transformer_lens(hooked)
    assert_same_logits(model, hooked)


@pytest.mark.parametrize("name", PAIRS)
def test_round_trip_keeps_config_and_every_tensor(tl, name):
    model = randomize(Transformer(PAIRS[name][0]))
    back = from_transformer_lens(to_transformer_lens(model))
    assert back.cfg == model.cfg and back is not model
    ours, returned = model.state_dict(), back.state_dict()
    assert list(returned) == list(ours)
    assert all(torch.equal(returned[key], ours[key]) for key in ours)


def test_the_weights_are_copied_not_shared(tl):
    model = Transformer(ModelConfig(**SIZES))
    hooked = to_transformer_lens(model)
    with torch.no_grad():
        hooked.blocks[0].attn.W_Q.add_(1.0)
    assert not torch.equal(hooked.blocks[0].attn.W_Q, model.blocks[0].attn.W_Q)


def test_every_transformer_in_the_zoo_is_checked():
    assert set(TRANSFORMERS) == {"attn-only-0l", "attn-only-1l", "attn-only-2l", "gelu-2l", "copying-1l", "copying-2l"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", TRANSFORMERS)
def test_a_zoo_model_runs_the_same_in_transformer_lens(tl, name, dtype):
    shared = zoo.load(name)  # read-only: conversion only reads it
    model = shared if dtype == shared.embed.W_E.dtype else copy.deepcopy(shared).to(dtype)
    hooked = to_transformer_lens(model)
    assert_same_logits(model, hooked, seeds=range(4))
    assert from_transformer_lens(hooked).cfg == model.cfg
    if model.cfg.n_layers:
        tokens = tokens_for(model.cfg.d_vocab, model.cfg.n_ctx)
        _, theirs = hooked.run_with_cache(tokens)
        _, ours = model.run_with_cache(tokens)
        last = f"blocks.{model.cfg.n_layers - 1}.attn.hook_pattern"  # the same cache names, the same patterns
        assert compare(ours[last], theirs[last], interop_tolerance(model)).passed


def test_float64_stays_float64_both_ways(tl):
    model = randomize(Transformer(ModelConfig(**SIZES, d_mlp=64, normalization="LN"))).double()
    hooked = to_transformer_lens(model)
    assert hooked.cfg.dtype == torch.float64 and hooked.W_E.dtype == torch.float64
    assert from_transformer_lens(hooked).embed.W_E.dtype == torch.float64
    assert_same_logits(model, hooked)  # to 1e-10 in float64


ATTN_ONLY = dict(TL_SIZES, attn_only=True, normalization_type=None)
GELU = dict(TL_SIZES, d_mlp=64, act_fn="gelu", normalization_type=None)


@pytest.mark.parametrize("fields, named", [
    (GELU | {"act_fn": "relu"}, "act_fn='relu'"),
    (GELU | {"act_fn": "solu_ln"}, "act_fn='solu_ln'"),
    (GELU | {"normalization_type": "LNPre"}, "normalization_type='LNPre'"),
    (GELU | {"normalization_type": "RMS"}, "normalization_type='RMS'"),
    (ATTN_ONLY | {"positional_embedding_type": "rotary"}, "positional_embedding_type='rotary'"),
    (GELU | {"parallel_attn_mlp": True}, "parallel_attn_mlp=True"),
    (GELU | {"gated_mlp": True}, "gated_mlp=True"),
    (ATTN_ONLY | {"n_key_value_heads": 2}, "n_key_value_heads=2"),
    (ATTN_ONLY | {"use_attn_scale": False}, "use_attn_scale=False"),
    (ATTN_ONLY | {"d_vocab_out": 20}, "d_vocab_out=20"),
])
def test_what_mechlib_cannot_represent_is_refused_by_name(tl, fields, named):
    hooked = tl.HookedTransformer(tl.HookedTransformerConfig(**fields))
    with pytest.raises(ValueError, match=f"^{named} has no counterpart in mechlib"):
        from_transformer_lens(hooked)


@pytest.mark.parametrize("fields", [
    ATTN_ONLY | {"act_fn": "relu", "d_mlp": 999},             # no MLP: its activation and width do not matter
    GELU | {"use_attn_result": True, "default_prepend_bos": True, "model_name": "mine"},  # hooks and names
])
def test_settings_that_do_not_change_the_logits_are_accepted(tl, fields):
    """In float64: use_attn_result sums the heads' results in another order, which moves float32 logits."""
    hooked = randomize(tl.HookedTransformer(tl.HookedTransformerConfig(**fields, dtype=torch.float64))).eval()
    model = from_transformer_lens(hooked)
    assert_same_logits(model, hooked)
