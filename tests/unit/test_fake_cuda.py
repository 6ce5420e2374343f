"""The GPU path without a GPU: every page experiment run with the model's weights on a stand-in CUDA device.

``FakeCuda`` is a torch function mode that keeps every tensor's data on the CPU but reports the tensors it
marks as ``cuda:0`` and enforces CUDA's rules on them: an op that mixes a CUDA tensor with a CPU tensor of
one element or more raises (0-dim CPU scalars and CPU indices of ``cuda_tensor[index]`` are allowed, as on CUDA),
a CPU generator cannot fill a CUDA tensor, and ``.numpy()`` of a CUDA tensor raises. Values are the CPU's, so
each experiment's result must equal the plain CPU run's.

Why not ``torch._subclasses.fake_tensor.FakeTensorMode``: on a CPU-only torch build (2.13) a fake ``cuda``
tensor cannot be indexed (``a[:2]`` raises "PyTorch is not linked with support for cuda devices", from the
device guard of Python indexing), and every forward pass stops at its first data-dependent step (the token-id
range check, ``low < 0``, raises DataDependentOutputException), so no experiment gets past its first line.
"""

import weakref

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from mechlib import circuits, induction, patterns, residual
from mechlib.config import ModelConfig
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
        source, rest = args[0], [*args[1:], *kwargs.values()]
        if func is torch.Tensor.cpu:
            target = CPU
        elif func is torch.Tensor.cuda:
            target = CUDA
        else:
            named = [a for a in rest if isinstance(a, (str, torch.device)) or isinstance(a, torch.Tensor)]
            target = (self.__torch_function__(torch.Tensor.device.__get__, (), (named[0],)) if named and isinstance(named[0], torch.Tensor)
                      else torch.device(named[0]) if named else (CUDA if self.on_cuda(source) else CPU))
        plain = [a for a in args[1:] if not isinstance(a, (str, torch.device, torch.Tensor))]
        keep = {k: v for k, v in kwargs.items() if k != "device"}
        out = source.to(*plain, **keep) if func is torch.Tensor.to else source
        out = out.clone() if out is source and self.on_cuda(source) != (target.type == "cuda") else out
        return self.mark(out) if target.type == "cuda" else out


@pytest.fixture
def fake_cuda():
    with FakeCuda() as mode:
        yield mode


CFG = ModelConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=20, n_ctx=12, normalization="LN")


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


IDS = (0, 3, 7, 5, 3, 7, 5, 9)
EXPERIMENTS = {
    "patterns.regrouping": lambda m: patterns.regrouping(m, IDS, 1, 1).check,
    "patterns.ranks": lambda m: patterns.ranks(m, 1, 0),
    "patterns.non_uniqueness": lambda m: patterns.non_uniqueness(m, IDS, 1, 0, seed=3),
    "patterns.scores": lambda m: patterns.scores(m, IDS, 1, 1),
    "patterns.messages": lambda m: patterns.messages(m, IDS, 1, 0, dest=5),
    "residual.ledger_at": lambda m: residual.ledger_at(m, IDS, 4),
    "residual.depth": lambda m: residual.depth(m, IDS),
    "residual.lens": lambda m: residual.lens(m, IDS, 4),
    "residual.subspaces": lambda m: residual.subspaces(m),
    "circuits.composition": lambda m: circuits.composition(m),
    "induction.two_layers": lambda m: induction.two_layers(m, seed=2),
    "induction.induction_circuit": lambda m: induction.induction_circuit(m),
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


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_page_experiments_run_on_cuda_weights_and_match_the_cpu(name):
    model = randomised(CFG).requires_grad_(False)
    on_cpu = EXPERIMENTS[name](model)
    with FakeCuda() as mode:
        on_cuda = EXPERIMENTS[name](mode.put(model))
    assert same(on_cuda, on_cpu)
