"""Training with progress callbacks, atomic checkpoints, and a server-wide queue.

``train`` is deterministic on the CPU for a given config and seed: the weights come from
``cfg.seed``, the batches from ``seed``. ``python -m mechlib.train NAME`` rebuilds a zoo model.
"""

import dataclasses
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mechlib import circuits, induction, io, zoo
from mechlib.config import ModelConfig
from mechlib.data import Data, Tokenizer, training_data
from mechlib.device import DEVICE, require_budget
from mechlib.loss import heldout_loss, next_token_loss
from mechlib.lstm import LSTM, LSTMConfig
from mechlib.model import Transformer

__all__ = ["Progress", "TrainResult", "train", "estimate_mb", "TrainingQueue", "QUEUE"]


@dataclass(frozen=True)
class Progress:
    step: int
    steps: int
    loss: float                 # training loss at this step, nats per token
    metrics: dict[str, float]   # induction.evaluate: repeat_loss, induction, prev_token
    elapsed_s: float


@dataclass
class TrainResult:
    model: Transformer
    history: list[dict[str, float]] = field(default_factory=list)  # one row per evaluation


def learning_rate(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to lr / 10."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(cfg: ModelConfig | LSTMConfig, data: Data, steps: int, *, lr: float = 1e-3, batch_size: int = 32, seed: int = 0,
          warmup: int = 50, weight_decay: float = 0.01, clip: float = 1.0, eval_every: int = 50,
          on_progress: Callable[[Progress], None] | None = None, on_step: Callable[[int], None] | None = None,
          checkpoint_every: int | None = None,
          checkpoint_dir: Path | None = None, tokenizer: Tokenizer | None = None) -> TrainResult:
    """Train a new model of ``cfg`` on ``data`` with AdamW (warm-up, cosine decay, gradient clipping).

    Every ``eval_every`` steps (and at the last) the repeat-sequence metrics are computed and passed to
    ``on_progress``; ``on_step(step)`` is called after every step (cheap; an app checks there whether
    its user left, so a stop takes effect within a step). Every ``checkpoint_every`` steps the model is
    written, atomically, to ``checkpoint_dir/step_NNNNN.safetensors`` (step 0 is the untrained model).
    """
    if steps < 1:
        raise ValueError(f"steps={steps}: train for at least one step")
    require_budget(estimate_mb(cfg, batch_size), f"training a model of {cfg.n_params():,} parameters")
    model = (LSTM if isinstance(cfg, LSTMConfig) else Transformer)(cfg).to(DEVICE)
    model.tokenizer = tokenizer
    generator = torch.Generator().manual_seed(seed)
    decay = [p for n, p in model.named_parameters() if n.rsplit(".", 1)[-1].startswith("W_")]
    no_decay = [p for n, p in model.named_parameters() if not n.rsplit(".", 1)[-1].startswith("W_")]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.99))
    result, start = TrainResult(model), time.perf_counter()

    def checkpoint(step: int) -> None:
        if checkpoint_every and checkpoint_dir is not None and step % checkpoint_every == 0:
            io.save(model, Path(checkpoint_dir) / f"step_{step:05d}.safetensors")

    checkpoint(0)
    for step in range(1, steps + 1):
        model.train()
        tokens = data.batch(generator, batch_size, cfg.n_ctx).to(DEVICE)          # [batch pos]
        logits = model(tokens)                                                     # [batch pos d_vocab]
        loss = next_token_loss(logits, tokens)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step - 1, steps, lr, warmup)
        optimizer.step()
        if on_step is not None:
            on_step(step)
        checkpoint(step)
        if step % eval_every == 0 or step == steps:
            model.eval()
            metrics = induction.evaluate(model)
            result.history.append({"step": step, "loss": loss.item(), **metrics})
            if on_progress is not None:
                on_progress(Progress(step, steps, loss.item(), metrics, time.perf_counter() - start))
    model.eval()
    return result


def estimate_mb(cfg: ModelConfig | LSTMConfig, batch_size: int) -> float:
    """Training memory in MB: weights, gradients and AdamW's two moments (4 × the weights), plus the
    activations of one batch about three times (kept for the backward pass, and their gradients)."""
    weights = cfg.n_params() * 4 / 1e6
    return 4 * weights + 3 * (cfg.estimate_mb(batch_size) - weights)


class TrainingQueue:
    """At most ``limit`` trainings at once, server-wide; the others wait in arrival order."""

    def __init__(self, limit: int):
        self.limit = limit
        self._condition = threading.Condition()
        self._running = 0
        self._waiting: list[object] = []

    @property
    def running(self) -> int:
        return self._running

    @contextmanager
    def slot(self, on_wait: Callable[[int], None], poll_s: float = 0.5) -> Iterator[None]:
        """Wait for a free slot, calling ``on_wait(position)`` (1 = next) meanwhile; free it on exit.

        If ``on_wait`` raises (the user left the page), the place in the queue is given up.
        """
        ticket = object()
        with self._condition:
            self._waiting.append(ticket)
        try:
            while True:
                with self._condition:
                    if self._running < self.limit and self._waiting[0] is ticket:
                        self._waiting.pop(0)
                        self._running += 1
                        break
                    position = self._waiting.index(ticket) + 1
                on_wait(position)
                with self._condition:
                    self._condition.wait(poll_s)
        finally:
            with self._condition:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                    self._condition.notify_all()
        try:
            yield
        finally:
            with self._condition:
                self._running -= 1
                self._condition.notify_all()


QUEUE = TrainingQueue(limit=2)


# ---------------------------------------------------------------------------------------------
# `python -m mechlib.train NAME`: rebuild a zoo model from scratch and print its figures.

def rebuild(name: str) -> TrainResult:
    """Train zoo model ``name`` from scratch, deterministically, and write it (and its snapshots)."""
    recipe = zoo.RECIPES[name]
    tokenizer, data = training_data(recipe.source, recipe.cfg.n_ctx, recipe.repeats, random_share=recipe.random_share)
    cfg = dataclasses.replace(recipe.cfg, d_vocab=tokenizer.d_vocab)
    every = recipe.steps // recipe.snapshots if recipe.snapshots else None

    def report(progress: Progress) -> None:
        print(f"step {progress.step:5d}/{progress.steps}  loss {progress.loss:.3f}  "
              + "  ".join(f"{k} {v:.3f}" for k, v in progress.metrics.items()) + f"  {progress.elapsed_s:.0f} s", flush=True)

    # Snapshots go to a new folder that replaces the old one only once training has finished, so an
    # interrupted rebuild leaves the shipped model, its snapshots and its history as they were.
    with tempfile.TemporaryDirectory(dir=zoo.CHECKPOINTS, prefix=f".{name}.") as building:
        result = train(cfg, data, recipe.steps, lr=recipe.lr, batch_size=recipe.batch_size, seed=recipe.seed,
                       weight_decay=recipe.weight_decay, eval_every=max(1, recipe.steps // 20), on_progress=report,
                       checkpoint_every=every, checkpoint_dir=Path(building) if every else None, tokenizer=tokenizer)
        if every:
            io.write_atomic(Path(building) / "history.json", json.dumps(result.history, indent=1).encode())
            folder = zoo.CHECKPOINTS / name
            if folder.exists():
                shutil.rmtree(folder)
            os.rename(building, folder)
            os.chmod(folder, 0o755)  # TemporaryDirectory made it private
            os.mkdir(building)  # for TemporaryDirectory to remove
        io.save(result.model, zoo.path(name))
    return result


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mechlib.train", description=__doc__)
    parser.add_argument("name", choices=zoo.names())
    name = parser.parse_args(argv).name
    torch.set_num_threads(1)  # bit for bit reproducible: float sums depend on how many threads split them
    result = rebuild(name)
    model = result.model.eval()
    print(f"\n{name}: {model.cfg.n_params():,} parameters, {zoo.path(name).stat().st_size / 1e6:.2f} MB")
    print(f"held-out loss {heldout_loss(model):.3f} nats/token")
    if isinstance(model, Transformer) and model.cfg.n_layers == 0:
        kl, entropy = circuits.bigram_kl(model)
        print(f"KL(corpus bigrams ‖ model) {kl:.3f} nats; corpus bigram entropy {entropy:.3f} nats")
    else:
        print("  ".join(f"{k} {v:.3f}" for k, v in induction.evaluate(model).items()))


if __name__ == "__main__":
    main()
