"""Training with progress callbacks and atomic checkpoints.

``train`` is deterministic on the CPU for a given config and seed: the weights come from
``cfg.seed``, the batches from ``seed``. ``python -m mechlib.train NAME`` rebuilds a zoo model.
"""

import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from mechlib import bigrams, copying, induction, io, zoo
from mechlib.checks import PREV_TOKEN_MIN
from mechlib.config import ModelConfig
from mechlib.data import (
    Copies,
    CopyingTask,
    Data,
    Tokenizer,
    eval_length,
    repeated_sequences,
    training_data,
)
from mechlib.device import DEVICE
from mechlib.loss import heldout_loss, next_token_loss
from mechlib.lstm import LSTM, LSTMConfig
from mechlib.model import Transformer

__all__ = ["Progress", "TrainResult", "train", "train_step", "adamw", "held_out_repeats", "watch_sequence", "Preset",
           "INDUCTION_PRESET", "estimate_mb"]

EVAL_BATCH, EVAL_SEED = 32, 1234  # the fixed batch a model in training is scored on: of its copying task, or repeats
WATCH_SEED = 99                   # the repeated sequence a preset's heads are drawn on while they form


@dataclass(frozen=True)
class Progress:
    step: int
    steps: int
    loss: float                 # training loss at this step, nats per token
    metrics: dict[str, float]   # copying.metrics: repeat_loss, induction, prev_token
    elapsed_s: float            # since the first step, evaluations included
    evaluation_s: float         # of which spent in evaluations
    patterns: np.ndarray | None = None  # [layer head query_pos key_pos]: every head's attention on the watched sequence
    watched: tuple[int, ...] = ()       # that sequence's ids (``watch_sequence``); empty when nothing is watched


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


def train_step(model: Transformer | LSTM, optimizer: torch.optim.Optimizer, tokens: Tensor, mask: Tensor | None = None,
               clip: float | None = 1.0) -> Tensor:
    """One step: forward, the (masked) next-token loss, backward, gradient-norm clipping, the optimiser's step.
    Returns the loss, detached."""
    loss = next_token_loss(model(tokens), tokens, mask=mask)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.detach()


def adamw(model: Transformer | LSTM, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW, β = (0.9, 0.99), weight decay on the weight matrices W_* only; one fused kernel for all parameters."""
    decay = [p for n, p in model.named_parameters() if n.rsplit(".", 1)[-1].startswith("W_")]
    no_decay = [p for n, p in model.named_parameters() if not n.rsplit(".", 1)[-1].startswith("W_")]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.99), fused=True)


def watch_sequence(d_vocab: int, length: int) -> Tensor:
    """One fixed sequence to draw heads on as they form, [1 1 + 2·length]: <bos>, a random segment, the segment
    again. A previous-token head lights the diagonal just below the main one, an induction head a stripe
    ``length`` − 1 below the main one, in the second copy."""
    return repeated_sequences(d_vocab, length, 1, WATCH_SEED)


def held_out_repeats(cfg: ModelConfig | LSTMConfig) -> Copies:
    """EVAL_BATCH repeated random sequences from EVAL_SEED at ``eval_length``, the segment length training avoids:
    what a model trained on other data than the copying task is scored on (``copying.metrics``)."""
    length = eval_length(cfg.n_ctx)
    return Copies.repeats(repeated_sequences(cfg.d_vocab, length, EVAL_BATCH, EVAL_SEED), length)


def train(cfg: ModelConfig | LSTMConfig, data: Data, steps: int, *, lr: float = 1e-3, batch_size: int = 32, seed: int = 0,
          warmup: int = 50, weight_decay: float = 0.01, clip: float | None = 1.0, eval_every: int = 50,
          on_progress: Callable[[Progress], None] | None = None, on_step: Callable[[int], None] | None = None,
          until: Callable[[Progress], bool] | None = None, watch: int | None = None, checkpoint_every: int | None = None,
          checkpoint_dir: Path | None = None, tokenizer: Tokenizer | None = None) -> TrainResult:
    """Train a new model of ``cfg`` on ``data`` with AdamW (warm-up, cosine decay, gradient clipping).

    Every ``eval_every`` steps (and at the last) the model is scored (``copying.metrics``: the loss on the predictable
    positions, the best induction and previous-token scores) and the metrics passed to ``on_progress``: on a fixed
    batch of the copying task when that is ``data`` (``CopyingTask``), else on repeated random sequences
    (``held_out_repeats``). With ``watch`` (a segment length; a transformer with layers), every evaluation also
    records every head's attention pattern on ``watch_sequence(d_vocab, watch)``, to draw heads forming live. Training stops early
    after an evaluation for which ``until(progress)`` is True.
    ``on_step(step)`` is called after every step (cheap; an app checks there whether its user left, so a stop
    takes effect within a step). Every ``checkpoint_every`` steps the model is written, atomically, to
    ``checkpoint_dir/step_NNNNN.safetensors`` (step 0 is the untrained model).
    """
    if steps < 1:
        raise ValueError(f"steps={steps}: train for at least one step")
    model = (LSTM if isinstance(cfg, LSTMConfig) else Transformer)(cfg).to(DEVICE)
    model.tokenizer = tokenizer
    generator = torch.Generator().manual_seed(seed)
    optimizer = adamw(model, lr, weight_decay)
    held = (data.sample(torch.Generator().manual_seed(EVAL_SEED), EVAL_BATCH, cfg.n_ctx) if isinstance(data, CopyingTask)
            else held_out_repeats(cfg))
    result, start, evaluation_s = TrainResult(model), time.perf_counter(), 0.0
    watched = None if watch is None else watch_sequence(cfg.d_vocab, watch)                # [1 1 + 2·watch]
    watched_ids = () if watched is None else tuple(watched[0].tolist())

    def checkpoint(step: int) -> None:
        if checkpoint_every and checkpoint_dir is not None and step % checkpoint_every == 0:
            io.save(model, Path(checkpoint_dir) / f"step_{step:05d}.safetensors")

    checkpoint(0)
    model.train()
    for step in range(1, steps + 1):
        if isinstance(data, CopyingTask):
            copies = data.sample(generator, batch_size, cfg.n_ctx)
            tokens, mask = copies.tokens.to(DEVICE), copies.predictable.to(DEVICE)   # [batch pos], [batch pos − 1]
        else:
            tokens, mask = data.batch(generator, batch_size, cfg.n_ctx).to(DEVICE), None
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step - 1, steps, lr, warmup)
        loss = train_step(model, optimizer, tokens, mask, clip)
        if on_step is not None:
            on_step(step)
        checkpoint(step)
        if step % eval_every == 0 or step == steps:
            began = time.perf_counter()
            model.eval()
            metrics = copying.metrics(model, held)
            patterns = None if watched is None else induction.patterns_on(model, watched)
            model.train()
            evaluation_s += time.perf_counter() - began
            result.history.append({"step": step, "loss": loss.item(), **metrics})
            progress = Progress(step, steps, loss.item(), metrics, time.perf_counter() - start, evaluation_s, patterns,
                                watched_ids)
            if on_progress is not None:
                on_progress(progress)
            if until is not None and until(progress):
                break
    model.eval()
    return result


@dataclass(frozen=True)
class Preset:
    """A named training recipe, for one click on the Train page: the model, the task, the optimiser's settings."""

    name: str
    description: str
    cfg: ModelConfig
    data: CopyingTask
    steps: int            # at most; ``until`` may stop it sooner
    usual_steps: int      # where it usually stops: the median stopping step over seeds 0–4
    lr: float
    batch_size: int
    warmup: int
    weight_decay: float
    clip: float | None
    eval_every: int

    induction_target: float  # training stops once the best induction score reaches this, beside a previous-token head

    def formed(self, progress: Progress) -> bool:
        """The circuit has formed: induction score ≥ ``induction_target`` and a previous-token head ≥ PREV_TOKEN_MIN."""
        return progress.metrics["induction"] >= self.induction_target and progress.metrics["prev_token"] >= PREV_TOKEN_MIN

    def train(self, seed: int = 0, **callbacks) -> TrainResult:
        """Train this recipe's model from ``seed`` (its weights and its batches) until it has ``formed`` the circuit or
        run ``steps``, recording patterns on the repeated sequence of its longest segment; ``callbacks`` as ``train``'s."""
        return train(dataclasses.replace(self.cfg, seed=seed), self.data, self.steps, lr=self.lr,
                     batch_size=self.batch_size, seed=seed, warmup=self.warmup, weight_decay=self.weight_decay,
                     clip=self.clip, eval_every=self.eval_every, until=self.formed, watch=self.data.length, **callbacks)


# From a sweep on 2 CPU cores (steps to an induction score of 0.9, 3–5 seeds each): context 33 (the longest
# segment fits twice) reached it in 350–425 steps at lr 1e-2 against 650–900 at 5e-3 with context 40; lr 2e-2
# diverged on some seeds; one head and batch 64 took 225–275 steps, with shortformer positions 200. Seeds 0–4 of
# the preset as it stands stop at steps 225, 200, 200, 200, 200 (``Preset.formed``; bench.induction_speed).
INDUCTION_PRESET = Preset(
    name="watch an induction head form",
    description="two attention-only layers of one head (d_model 64, shortformer positions, no LayerNorm) on the "
                "copying task: random ids from 512, a segment of 8–16 of them after a random prefix, then the same "
                "segment again; the loss counts the copy only",
    cfg=ModelConfig(n_layers=2, d_model=64, n_heads=1, d_vocab=512, n_ctx=33, positional="shortformer"),
    data=CopyingTask(d_vocab=512, length=16), steps=3000, usual_steps=200, lr=1e-2, batch_size=64, warmup=0, weight_decay=0.0,
    clip=None, eval_every=25, induction_target=0.9)


def estimate_mb(cfg: ModelConfig | LSTMConfig, batch_size: int) -> float:
    """Training memory in MB: weights, gradients and AdamW's two moments (4 × the weights), plus the
    activations of one batch about three times (kept for the backward pass, and their gradients)."""
    weights = cfg.n_params() * 4 / 1e6
    return 4 * weights + 3 * (cfg.estimate_mb(batch_size) - weights)


# ---------------------------------------------------------------------------------------------
# `python -m mechlib.train NAME`: rebuild a zoo model from scratch and print its figures.

def fit_zero_layer(cfg: ModelConfig, tokens: Tensor, recipe: zoo.Recipe, tokenizer: Tokenizer) -> TrainResult:
    """A zero-layer model trained full-batch on a token stream [n_tokens]: its next-token objective is the
    cross-entropy of the training windows' bigram table (``bigrams.training_table``), so fitting W_E, W_U, b_U to
    that table (``bigrams.fit``, the recipe's steps and lr) is training on every window at once."""
    table = bigrams.training_table(tokens, cfg.d_vocab, cfg.n_ctx)          # [d_vocab d_vocab]
    model = Transformer(cfg)
    with torch.no_grad():
        for param, value in zip((model.embed.W_E, model.unembed.W_U, model.unembed.b_U),
                                bigrams.fit(table, cfg.d_model, recipe.seed, recipe.steps, recipe.lr)):
            param.copy_(value)
    model.tokenizer = tokenizer
    return TrainResult(model.eval())


def recipe_data(recipe: zoo.Recipe) -> tuple[Tokenizer | None, Data]:
    """A recipe's tokenizer and batches: its built-in text (``data.training_data``), or for source "copying" the
    copying task with the longest segment that fits twice in the context (random ids: no tokenizer)."""
    if recipe.source == "copying":
        return None, CopyingTask(recipe.cfg.d_vocab, (recipe.cfg.n_ctx - 1) // 2)
    return training_data(recipe.source, recipe.cfg.n_ctx, recipe.repeats, random_share=recipe.random_share)


def train_recipe(name: str, **callbacks) -> TrainResult:
    """Train zoo model ``name`` from scratch by its recipe, without writing it (deterministic for a given number of
    threads; ``main`` sets one);
    ``callbacks`` as ``train``'s. A zero-layer model is fitted full-batch to the bigram table of its text
    (``fit_zero_layer``), with no steps to report on."""
    recipe = zoo.RECIPES[name]
    tokenizer, data = recipe_data(recipe)
    cfg = recipe.cfg if tokenizer is None else dataclasses.replace(recipe.cfg, d_vocab=tokenizer.d_vocab)
    if isinstance(cfg, ModelConfig) and not cfg.n_layers:
        return fit_zero_layer(cfg, data.tokens, recipe, tokenizer)
    return train(cfg, data, recipe.steps, lr=recipe.lr, batch_size=recipe.batch_size, seed=recipe.seed,
                 warmup=recipe.warmup, weight_decay=recipe.weight_decay, clip=recipe.clip,
                 eval_every=max(1, recipe.steps // 20), tokenizer=tokenizer, **callbacks)


def rebuild(name: str) -> TrainResult:
    """Train zoo model ``name`` from scratch (``train_recipe``) and write it (and its snapshots)."""
    recipe = zoo.RECIPES[name]
    every = recipe.steps // recipe.snapshots if recipe.snapshots else None

    def report(progress: Progress) -> None:
        print(f"step {progress.step:5d}/{progress.steps}  loss {progress.loss:.3f}  "
              + "  ".join(f"{k} {v:.3f}" for k, v in progress.metrics.items()) + f"  {progress.elapsed_s:.0f} s", flush=True)

    # Snapshots go to a new folder that replaces the old one only once training has finished, so an
    # interrupted rebuild leaves the shipped model, its snapshots and its history as they were.
    with tempfile.TemporaryDirectory(dir=zoo.CHECKPOINTS, prefix=f".{name}.") as building:
        result = train_recipe(name, on_progress=report, checkpoint_every=every,
                              checkpoint_dir=Path(building) if every else None)
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
    if model.tokenizer is not None:  # trained on text; the copying task's models read random ids
        print(f"held-out loss {heldout_loss(model):.3f} nats/token")
    if isinstance(model, Transformer) and model.cfg.n_layers == 0:
        c = bigrams.ceiling(model)
        print(f"KL(corpus bigrams ‖ model) {c.model_kl:.2e} nats; the best rank-{model.cfg.d_model} fit's {c.best_fit_kl:.2e}; "
              f"the unigram baseline's {c.unigram_kl:.3f}; corpus bigram entropy {c.entropy:.3f} nats")
    else:
        print("  ".join(f"{k} {v:.3f}" for k, v in copying.metrics(model, held_out_repeats(model.cfg)).items()))


if __name__ == "__main__":
    main()
