"""One training step of mechlib's Transformer beside a plain-PyTorch transformer of the same sizes, in one run.

Run from the repository root: .venv/bin/python -m bench.train_step [--steps 200]
Both models: 2 layers, d_model 64, 2 heads, vocab 512, no LayerNorm, no MLP; batch 32 × context 48;
2 torch threads. A step is forward, next-token loss, backward and an AdamW step. The reference is
written here as one would write it by hand: nn.Embedding, a fused nn.Linear for Q/K/V,
scaled_dot_product_attention, nn.Linear out, the residual stream. Every model takes the same step,
``mechlib.train.train_step`` on a copying-task batch (masked loss, no clipping, as the induction preset).
The reference and "mechlib" use torch.optim.AdamW as one writes it by hand; "mechlib, train.adamw" uses the
optimiser ``train.train`` builds (AdamW's fused kernel), and "reference, fused AdamW" is its like for the reference.
mechlib has 20 parameter tensors where the reference has 12 (TransformerLens's names keep W_Q, W_K, W_V and their
biases apart), and AdamW's step costs per tensor. The models alternate step by step (so machine
noise hits them alike); the script prints the median of each and its ratio to the reference.
The goal: mechlib ≤ 1.0× the reference.
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mechlib import train
from mechlib.config import ModelConfig
from mechlib.data import CopyingTask
from mechlib.model import Transformer

LAYERS, D_MODEL, HEADS, VOCAB, BATCH, N_CTX, THREADS = 2, 64, 2, 512, 32, 48, 2


class Reference(nn.Module):
    """An attention-only transformer in plain PyTorch: the speed to match."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Parameter(torch.randn(N_CTX, D_MODEL) * 0.1)
        self.qkv = nn.ModuleList(nn.Linear(D_MODEL, 3 * D_MODEL) for _ in range(LAYERS))
        self.out = nn.ModuleList(nn.Linear(D_MODEL, D_MODEL) for _ in range(LAYERS))
        self.unembed = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: Tensor) -> Tensor:
        batch, pos = tokens.shape
        x = self.embed(tokens) + self.pos[:pos]                                          # [batch pos d_model]
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).view(batch, pos, 3, HEADS, -1).permute(2, 0, 3, 1, 4)      # [batch head pos d_head]
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)                 # [batch head pos d_head]
            x = x + out(z.transpose(1, 2).reshape(batch, pos, D_MODEL))
        return self.unembed(x)                                                           # [batch pos d_vocab]


def timed_step(model: nn.Module, optimizer: torch.optim.Optimizer, tokens: Tensor, mask: Tensor | None) -> float:
    start = time.perf_counter()
    train.train_step(model, optimizer, tokens, mask, clip=None)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    steps = parser.parse_args().steps
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=LAYERS, d_model=D_MODEL, n_heads=HEADS, d_vocab=VOCAB, n_ctx=N_CTX)
    models = {"reference": Reference(), "mechlib": Transformer(cfg), "reference, fused AdamW": Reference(),
              "mechlib, train.adamw": Transformer(cfg)}
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0,
                                          fused="fused" in name) for name, model in models.items()}
    optimizers["mechlib, train.adamw"] = train.adamw(models["mechlib, train.adamw"], lr=1e-3, weight_decay=0.0)
    task, generator = CopyingTask(VOCAB, 16), torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {name: [] for name in models}
    for i in range(steps + 20):  # the first 20 warm up
        copies = task.sample(generator, BATCH, N_CTX)
        for name, model in models.items():
            seconds = timed_step(model, optimizers[name], copies.tokens, copies.predictable)
            if i >= 20:
                times[name].append(seconds)
    median = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(f"$ .venv/bin/python -m bench.train_step {' '.join(sys.argv[1:])}".rstrip())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {LAYERS} layers, d_model {D_MODEL}, "
          f"{HEADS} heads, vocab {VOCAB}, batch {BATCH} × {N_CTX}, the copying task's masked loss; forward + backward "
          f"+ AdamW, median of {steps} interleaved steps")
    for name, ms in median.items():
        print(f"{name:22s} {ms:6.2f} ms   {ms / median['reference']:.2f}× the reference")
    print("goal: mechlib ≤ 1.0× the reference")


if __name__ == "__main__":
    main()
