"""ModelConfig: defaults, and messages that name the field, the value and what is allowed."""

import re

import pytest

from mechlib.config import ModelConfig, divisors
from mechlib.model import Transformer

BASE = {"n_layers": 1, "d_model": 64, "n_heads": 4, "d_vocab": 100, "n_ctx": 16}


def test_d_head_defaults_to_d_model_over_n_heads():
    assert ModelConfig(**BASE).d_head == 16
    assert ModelConfig(**{**BASE, "d_head": 5}).d_head == 5


def test_indivisible_heads_name_the_allowed_values():
    with pytest.raises(ValueError) as error:
        ModelConfig(**{**BASE, "d_model": 1000, "n_heads": 16})
    assert str(error.value).startswith("d_model=1000 is not divisible by n_heads=16; choose n_heads in {1, 2, 4, 5, 8, 10, 20,")


@pytest.mark.parametrize("field, value, message", [
    ("n_layers", -1, "n_layers=-1 is out of range; choose n_layers between 0 and 48"),
    ("d_model", 0, "d_model=0 is out of range; choose d_model between 1 and 8192"),
    ("d_vocab", 1, "d_vocab=1 is out of range; choose d_vocab between 2 and 200000"),
    ("n_ctx", 2.5, "n_ctx=2.5 must be a whole number"),
    ("n_heads", True, "n_heads=True must be a whole number"),
    ("d_mlp", 0, "d_mlp=0 is out of range"),
    ("normalization", "RMS", "normalization='RMS' is not known; choose 'LN' or None"),
    ("positional", "rotary", "positional='rotary' is not known; choose 'standard' or 'shortformer'"),
    ("seed", -3, "seed=-3 is out of range; choose seed between 0 and 9223372036854775807"),
    ("seed", 2**64, "seed=18446744073709551616 is out of range; choose seed between 0 and 9223372036854775807"),
    ("d_model", "x" * 5000, "d_model='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… must be a whole number"),
])
def test_bad_fields_are_named(field, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ModelConfig(**{**BASE, field: value})


def test_a_number_of_absurd_length_is_refused_with_our_own_sentence():
    text = ModelConfig(**BASE).to_json().replace('"seed": 0', '"seed": ' + "9" * 5000)
    with pytest.raises(ValueError, match="^the config holds a number of 5,000 digits; sizes have at most 30$"):
        ModelConfig.from_json(text)


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(7) == [1, 7]


def test_parameter_count_matches_the_model():
    for cfg in [ModelConfig(**BASE), ModelConfig(**{**BASE, "n_layers": 2, "d_mlp": 32, "normalization": "LN"})]:
        model = Transformer(cfg)
        assert cfg.n_params() == sum(p.numel() for p in model.parameters())


def test_json_round_trip():
    cfg = ModelConfig(**{**BASE, "d_mlp": 32, "normalization": "LN", "positional": "shortformer", "seed": 9})
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match="unknown fields: colour"):
        ModelConfig.from_json('{"colour": 1}')


