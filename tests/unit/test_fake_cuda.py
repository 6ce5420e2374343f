"""The GPU path without a GPU: every page experiment run with the model's weights on a stand-in CUDA device.

``FakeCuda`` is a torch function mode that keeps every tensor's data on the CPU but reports the tensors it
marks as ``cuda:0`` and enforces CUDA's rules on them: an op that mixes a CUDA tensor with a CPU tensor of
one element or more raises (0-dim CPU scalars and CPU indices of ``cuda_tensor[index]`` are allowed, as on CUDA),
a CPU generator cannot fill a CUDA tensor, and ``.numpy()`` of a CUDA tensor raises. Values are the CPU's, so
each experiment's result must equal the plain CPU run's. ``Module.to("cuda")`` marks a module's parameters and a
gradient is on its parameter's device, so weights reach the stand-in as they reach a GPU: page sections get the
sidebar's model put there, and the experiments that draw, train or load their own weights (Equivalence, the Train
page, the LSTM page's zoo models, the phase change) run with mechlib's ``DEVICE`` set to it. Training runs in a
worker process on the Train page (``workers.run``), which no mode reaches: ``train.train`` itself is run here.

Why not ``torch._subclasses.fake_tensor.FakeTensorMode``: on a CPU-only torch build (2.13) a fake ``cuda``
tensor cannot be indexed (``a[:2]`` raises "PyTorch is not linked with support for cuda devices", from the
device guard of Python indexing), and every forward pass stops at its first data-dependent step (the token-id
range check, ``low < 0``, raises DataDependentOutputException), so no experiment gets past its first line.
"""

import dataclasses
import functools
import weakref

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from mechlib import (analogy, circuits, copying, data, device, equivalence, induction, io, patching, patterns, residual,
                     train, zoo)
from mechlib.bounded import Bounded
from mechlib.config import ModelConfig
from mechlib.data import WordTokenizer, builtin_text
from mechlib.device import to_numpy
from mechlib.model import Transformer
from tests.unit.helpers import randomised

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")
MOVES = {torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda}
TO_HOST = {torch.Tensor.numpy, torch.Tensor.__array__}
INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__}


class FakeCuda(TorchFunctionMode):
    """Tensors marked here behave as CUDA tensors; unmarked ones are CPU tensors."""

    def __init__(self):
        super().__init__()
        self.marked: dict[int, weakref.ref] = {}

    def on_cuda(self, t: object) -> bool:
        ref = self.marked.get(id(t))
        return ref is not None and ref() is t

    def mark(self, t):
        if isinstance(t, torch.Tensor):
            self.marked[id(t)] = weakref.ref(t)
        return t

    def put(self, module: torch.nn.Module) -> torch.nn.Module:
        for t in (*module.parameters(), *module.buffers()):
            self.mark(t)
        return module

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == torch.Tensor.device.__get__:
            return CUDA if self.on_cuda(args[0]) else CPU
        if func == torch.Tensor.is_cuda.__get__:
            return self.on_cuda(args[0])
        if func in TO_HOST and self.on_cuda(args[0]):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
        if func in MOVES:
            return self.move(func, args, kwargs)
        if func is torch._has_compatible_shallow_copy_type:  # a type query Module.to makes across devices
            return func(*args, **kwargs)
        if func == torch.Tensor.data.__set__:  # Module.to swaps a parameter's data: it is then where that data is
            func(*args)
            if self.on_cuda(args[1]):
                self.mark(args[0])
            else:
                self.marked.pop(id(args[0]), None)
            return None
        if func == torch.Tensor.grad.__get__:  # a gradient is on its tensor's device
            grad = func(*args)
            return self.mark(grad) if self.on_cuda(args[0]) else grad
        target = kwargs.get("device")
        if target is not None:  # a factory: made on the CPU, marked when asked for CUDA
            kwargs = {**kwargs, "device": CPU}
            generator = kwargs.get("generator")
            if torch.device(target).type == "cuda" and generator is not None and generator.device.type == "cpu":
                raise RuntimeError("Expected a 'cuda' device type for generator but found 'cpu'")
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        cuda = [t for t in tensors if self.on_cuda(t)]
        cpu = [t for t in tensors if not self.on_cuda(t) and t.dim() > 0]
        if func in INDEXING and self.on_cuda(args[0]):
            cpu = [t for t in cpu if t is args[0]]
        if cuda and cpu:
            raise RuntimeError(f"{getattr(func, '__name__', func)}: Expected all tensors to be on the same device, "
                               "but found at least two devices, cuda:0 and cpu!")
        if "generator" in kwargs and cuda and kwargs["generator"].device.type == "cpu":
            raise RuntimeError("Expected a 'cuda' device type for generator but found 'cpu'")
        out = func(*args, **kwargs)
        if cuda or (target is not None and torch.device(target).type == "cuda"):
            tree_map(self.mark, out)
        return out

    def move(self, func, args, kwargs):
        """``.to``, ``.cpu``, ``.cuda``: the CPU's copy (or the tensor itself), marked when it goes to CUDA."""
        source = args[0]
        named = [a for a in (*args[1:], kwargs.get("device")) if isinstance(a, (str, torch.device, torch.Tensor))]
        if func is torch.Tensor.cpu or func is torch.Tensor.cuda:
            target, out = (CPU if func is torch.Tensor.cpu else CUDA), source
        else:
            target = (CUDA if self.on_cuda(named[0]) else CPU) if named and isinstance(named[0], torch.Tensor) \
                else torch.device(named[0]) if named else (CUDA if self.on_cuda(source) else CPU)
            on_cpu = [a.dtype if isinstance(a, torch.Tensor) else CPU if isinstance(a, (str, torch.device)) else a
                      for a in args[1:]]                                   # the same call, every device the CPU
            out = source.to(*on_cpu, **{k: CPU if k == "device" else v for k, v in kwargs.items()})
        out = out.clone() if out is source and self.on_cuda(source) != (target.type == "cuda") else out
        return self.mark(out) if target.type == "cuda" else out


@pytest.fixture
def fake_cuda():
    with FakeCuda() as mode:
        yield mode


CFG = ModelConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=20, n_ctx=12, normalization="LN")
ATTN_ONLY = dataclasses.replace(CFG, normalization=None)                            # path expansion needs no LayerNorm
ZERO_LAYER = dataclasses.replace(CFG, n_layers=0, normalization=None, positional="shortformer")  # the bigram path
IDS = (0, 3, 7, 5, 3, 7, 5, 9)


@functools.lru_cache
def words(d_vocab: int) -> WordTokenizer:
    return WordTokenizer.fit(builtin_text(), d_vocab)


def model_of(cfg: ModelConfig) -> Transformer:
    """A float64 model of ``cfg`` with a word tokenizer, so the experiments that read the corpus take that path."""
    model = randomised(cfg).requires_grad_(False)
    model.tokenizer = words(cfg.d_vocab)
    return model


def test_the_stand_in_enforces_cudas_rules(fake_cuda):
    model = fake_cuda.put(randomised(CFG).requires_grad_(False))
    W_E = model.embed.W_E
    assert W_E.device == CUDA and W_E.is_cuda and (W_E * 2).device == CUDA and W_E[torch.tensor([1, 2])].device == CUDA
    with pytest.raises(RuntimeError, match="two devices"):
        torch.randn(3, CFG.d_vocab, dtype=torch.float64) @ W_E
    with pytest.raises(TypeError, match="cuda:0 device type tensor to numpy"):
        W_E.numpy()
    with pytest.raises(RuntimeError, match="generator"):
        torch.randn(3, device=W_E.device, generator=torch.Generator())
    moved = W_E.to("cpu")
    assert moved.device == CPU and np.array_equal(moved.numpy(), W_E.cpu().numpy())
    assert (W_E + torch.tensor(1.0)).device == CUDA  # a 0-dim CPU scalar is allowed, as on CUDA


def test_a_module_moved_to_the_stand_in_trains_there(fake_cuda):
    """``Module.to(cuda)`` marks every parameter, gradients are on their parameter's device, and ``.to(cpu)``
    brings the module back: the paths by which training and the zoo put weights on the device."""
    model = randomised(CFG).to(CUDA)
    assert all(p.device == CUDA for p in model.parameters())
    model(torch.tensor([IDS])).sum().backward()
    assert all(p.grad.device == CUDA for p in model.parameters())
    with pytest.raises(RuntimeError, match="two devices"):
        model.embed.W_E.grad + torch.ones(CFG.d_vocab, CFG.d_model, dtype=torch.float64)
    assert all(p.device == CPU for p in model.to(CPU).parameters())


PHASE_MODEL = "attn-only-2l"  # Circuits: the phase change: the zoo model whose training snapshots ship

# Page sections on the sidebar's model: name -> (the model's config, experiment(model)).
ON_A_MODEL = {
    "patterns.regrouping": (CFG, lambda m: patterns.regrouping(m, IDS, 1, 1).check),
    "patterns.ranks": (CFG, lambda m: patterns.ranks(m, 1, 0)),
    "patterns.non_uniqueness": (CFG, lambda m: patterns.non_uniqueness(m, IDS, 1, 0, seed=3)),
    "patterns.scores": (CFG, lambda m: patterns.scores(m, IDS, 1, 1)),
    "patterns.messages": (CFG, lambda m: patterns.messages(m, IDS, 1, 0, dest=5)),
    "residual.ledger_at": (CFG, lambda m: residual.ledger_at(m, IDS, 4)),
    "residual.depth": (CFG, lambda m: residual.depth(m, IDS)),
    "residual.lens": (CFG, lambda m: residual.lens(m, IDS, 4)),
    "residual.attribution": (CFG, lambda m: residual.attribution(m, IDS, 4, 7)),
    "residual.attribution against another token": (CFG, lambda m: residual.attribution(m, IDS, 4, 7, 3)),
    "residual.subspaces": (CFG, lambda m: residual.subspaces(m)),
    "circuits.zero_layer": (ZERO_LAYER, lambda m: circuits.zero_layer(m)),
    "circuits.one_layer": (ATTN_ONLY, lambda m: circuits.one_layer(m, IDS)),
    "circuits.token_tables": (ATTN_ONLY, lambda m: circuits.token_tables(m, 0, 1, False)),
    "circuits.composition": (CFG, lambda m: circuits.composition(m)),
    "induction.two_layers": (CFG, lambda m: induction.two_layers(m, seed=2)),
    "induction.induction_circuit": (CFG, lambda m: induction.induction_circuit(m)),
    "patching.patching": (CFG, lambda m: patching.patching(m, seed=2)),
}


def trained(result: train.TrainResult) -> tuple[list[dict[str, float]], dict[str, np.ndarray]]:
    """A training's evaluations and final weights."""
    return result.history, {name: to_numpy(t) for name, t in result.model.state_dict().items()}


def preset_then_circuit():
    """The Train page's preset (two steps), then its study step: the checkpoint shared through the zoo, and the
    induction circuit read from it."""
    result = dataclasses.replace(train.INDUCTION_PRESET, steps=2, eval_every=1).train(seed=1)
    _, shared = zoo.from_checkpoint(io.to_bytes(result.model))
    return trained(result), induction.induction_circuit(shared)


# Experiments that make their own weights on mechlib's DEVICE, train them, or load zoo models: name -> experiment().
ON_THEIR_OWN_WEIGHTS = {
    "equivalence.run": lambda: equivalence.run(2, 6, 50, 16, 4, seed=3, dtype="float64", position=2),
    "equivalence.run in float32": lambda: equivalence.run(1, 5, 40, 8, 2, seed=4, dtype="float32", position=4),
    "circuits.one_layer on attn-only-1l": lambda: circuits.one_layer(zoo.load("attn-only-1l"), IDS),
    "circuits.token_tables on attn-only-1l": lambda: circuits.token_tables(zoo.load("attn-only-1l"), 0, 2, True),
    "induction.phase_change": lambda: induction.phase_change(PHASE_MODEL),
    "induction.snapshot": lambda: induction.snapshot(zoo.load_snapshot(PHASE_MODEL, zoo.snapshot_steps(PHASE_MODEL)[-1]), 2),
    "analogy.pair": lambda: analogy.pair(),
    "analogy.prompt": lambda: analogy.prompt("def f(x): return x"),
    "analogy.repeated_ids": lambda: analogy.repeated_ids(6, 3),
    "analogy.side_by_side": lambda: analogy.side_by_side(analogy.repeated_ids(6, 3)),
    "analogy.separating_test": lambda: analogy.separating_test(6, 3),
    "analogy.heldout": lambda: analogy.heldout(),
    "copying.controls": lambda: copying.controls(3),
    "train.train": lambda: trained(train.train(dataclasses.replace(ATTN_ONLY, d_vocab=data.RANDOM_VOCAB, n_ctx=13),
                                               data.training_data("random", 13, 1.0)[1], 3, lr=1e-2, batch_size=8,
                                               eval_every=2, watch=6)),
    "train.INDUCTION_PRESET.train, then induction.induction_circuit": preset_then_circuit,
}


def same(a, b) -> bool:
    """Equal results: dataclasses field by field, arrays exactly (NaN where NaN)."""
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__ if f != "time_ms")
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    return a == b or (a != a and b != b)


@pytest.mark.parametrize("name", ON_A_MODEL)
def test_page_experiments_run_on_cuda_weights_and_match_the_cpu(name):
    cfg, experiment = ON_A_MODEL[name]
    model = model_of(cfg)
    on_cpu = experiment(model)
    with FakeCuda() as mode:
        on_cuda = experiment(mode.put(model))
    assert same(on_cuda, on_cpu)


@pytest.mark.parametrize("name", ON_THEIR_OWN_WEIGHTS)
def test_experiments_on_their_own_weights_run_on_cuda_and_match_the_cpu(name, monkeypatch):
    """mechlib's DEVICE set to the stand-in: weights are drawn, trained and loaded from the zoo onto it, through a
    zoo cache of this test's own (the stand-in's models never reach the process-wide one)."""
    on_cpu = ON_THEIR_OWN_WEIGHTS[name]()
    for module in (device, equivalence, train, zoo):
        monkeypatch.setattr(module, "DEVICE", CUDA)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)  # device.median_ms waits for the GPU
    monkeypatch.setattr(zoo, "_models", Bounded())
    with FakeCuda() as mode:
        on_cuda = ON_THEIR_OWN_WEIGHTS[name]()
    assert mode.marked, "nothing was made on the stand-in: the experiment did not take the device path"
    assert same(on_cuda, on_cpu)
