"""One shared-model behaviour for both architectures: a shared model refuses mutation, its deep copy is free."""

import copy
import re

import pytest
import torch

from mechlib import zoo
from mechlib.config import ModelConfig
from mechlib.lstm import LSTM, LSTMConfig
from mechlib.model import Transformer
from mechlib.shared import Shareable

MUTATIONS = {".train()": lambda m: m.train(), "requires_grad_(True)": lambda m: m.requires_grad_(True),
             "load_state_dict": lambda m: m.load_state_dict(m.state_dict())}
FRESH = {"transformer": lambda: Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=10, n_ctx=4)),
         "lstm": lambda: LSTM(LSTMConfig(d_vocab=10, d_model=4, d_hidden=6))}


@pytest.mark.parametrize("name", ["attn-only-2l", "lstm"])
@pytest.mark.parametrize("what", MUTATIONS)
def test_a_shared_zoo_model_refuses_every_mutation_with_the_way_out(name, what):
    shared = zoo.load(name)
    assert isinstance(shared, Shareable) and shared.read_only
    message = f"shared read-only between sessions, so {what} is refused; work on a copy: copy.deepcopy(model)"
    with pytest.raises(RuntimeError, match=re.escape(message)):
        MUTATIONS[what](shared)
    assert not shared.training and not any(p.requires_grad for p in shared.parameters())


@pytest.mark.parametrize("kind", FRESH)
def test_the_same_mutations_pass_on_a_model_that_is_not_shared_and_fail_once_it_is(kind):
    model = FRESH[kind]()
    for mutate in MUTATIONS.values():
        mutate(model)
    assert model.training and all(p.requires_grad for p in model.parameters())
    model.share()
    assert model.read_only and not model.training and not any(p.requires_grad for p in model.parameters())
    for mutate in MUTATIONS.values():
        with pytest.raises(RuntimeError, match="shared read-only"):
            mutate(model)


@pytest.mark.parametrize("name", ["attn-only-2l", "lstm"])
def test_a_deep_copy_of_a_shared_zoo_model_is_writable_trainable_and_independent(name):
    shared = zoo.load(name)
    before = {k: v.clone() for k, v in shared.state_dict().items()}
    own = copy.deepcopy(shared)
    assert type(own) is type(shared) and not own.read_only and own.tokenizer is not shared.tokenizer
    own.train()
    assert own.training and all(p.requires_grad for p in own.parameters())
    own.load_state_dict(own.state_dict())
    with torch.no_grad():
        for p in own.parameters():
            p.add_(1.0)
    assert all(torch.equal(v, before[k]) for k, v in shared.state_dict().items())  # the shared one is untouched
    assert shared.read_only and not shared.training and not any(p.requires_grad for p in shared.parameters())
    assert zoo.load(name) is shared
