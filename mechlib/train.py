"""Training with progress callbacks, atomic checkpoints, and a server-wide queue.

``train`` is deterministic on the CPU for a given config and seed: the weights come from
``cfg.seed``, the batches from ``seed``. ``python -m mechlib.train NAME`` rebuilds a zoo model.
"""

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mechlib import induction, io
from mechlib.config import ModelConfig
from mechlib.data import Data, Tokenizer
from mechlib.device import DEVICE
from mechlib.model import Transformer

__all__ = ["Progress", "TrainResult", "train", "TrainingQueue", "QUEUE"]


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


def train(cfg: ModelConfig, data: Data, steps: int, *, lr: float = 1e-3, batch_size: int = 32, seed: int = 0,
          warmup: int = 50, weight_decay: float = 0.01, clip: float = 1.0, eval_every: int = 50,
          on_progress: Callable[[Progress], None] | None = None, checkpoint_every: int | None = None,
          checkpoint_dir: Path | None = None, tokenizer: Tokenizer | None = None) -> TrainResult:
    """Train a new model of ``cfg`` on ``data`` with AdamW (warm-up, cosine decay, gradient clipping).

    Every ``eval_every`` steps (and at the last) the repeat-sequence metrics are computed and passed to
    ``on_progress``; every ``checkpoint_every`` steps the model is written, atomically, to
    ``checkpoint_dir/step_NNNNN.safetensors`` (step 0 is the untrained model).
    """
    if steps < 1:
        raise ValueError(f"steps={steps}: train for at least one step")
    model = Transformer(cfg).to(DEVICE)
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
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step - 1, steps, lr, warmup)
        optimizer.step()
        checkpoint(step)
        if step % eval_every == 0 or step == steps:
            model.eval()
            metrics = induction.evaluate(model)
            result.history.append({"step": step, "loss": float(loss), **metrics})
            if on_progress is not None:
                on_progress(Progress(step, steps, float(loss), metrics, time.perf_counter() - start))
    model.eval()
    return result


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
