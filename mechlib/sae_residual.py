"""Sparse autoencoders on the zoo's own activations: attn-only-2l's residual stream after each layer, gelu-2l's MLP
neurons (Bricken et al. 2023, "Towards Monosemanticity"; TopK latents as in Gao et al. 2024).

The activations are read at a TransformerLens hook over windows of the built-in text (the train split to learn the
dictionary, the held-out split to grade it), every position but <bos>'s: position 0 sees <bos> alone, so its
activation is one constant vector that would flatter every measure. Graded by the field's measures on held-out text:

- L0, the fraction of variance explained and the dead latents (``sae.sae_stats``);
- the **loss recovered**: the next-token loss with the SAE's reconstruction spliced in at the hook (``patch``: the
  model is never touched), against the clean loss and the loss with the hook's activations zeroed,

      loss recovered = (L_zero − L_sae) / (L_zero − L_clean)

  1 for a perfect reconstruction, 0 for one no better than zeros. The clean run passes through the same splice,
  with the activations themselves, so the three losses differ only in what is spliced.

``train_on_zoo`` is the training entry point a worker calls (``fn(**kwargs, on_progress=…, on_step=…)``, as the Train
page's): plain values in, ``SAETraining(model=the SAE, history)`` out.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from mechlib import zoo
from mechlib.data import TextData, Tokenizer, builtin_text
from mechlib.device import DEVICE, costs
from mechlib.loss import next_token_loss
from mechlib.model import Transformer
from mechlib.sae import SAE, SAEConfig, sae_mb, sae_stats, train_sae

__all__ = ["EVAL_WINDOWS", "GOALS", "HOOKS", "TRAIN_WINDOWS", "STEPS", "DECAY", "RANDOM", "SAEProgress", "SAEReport",
           "SAETraining", "activations", "base_model", "collect_mb", "evaluate", "evaluate_mb", "hook_layer",
           "hook_width",
           "loss_recovered", "spliced_losses", "text_windows", "train_mb", "train_on_activations", "train_on_zoo"]

HOOKS = {"attn-only-2l": ("blocks.0.hook_resid_post", "blocks.1.hook_resid_post"),
         "gelu-2l": ("blocks.0.mlp.hook_post", "blocks.1.mlp.hook_post")}
GOALS = {"variance_explained": 0.9, "l0": 20.0, "dead_fraction": 0.1, "loss_recovered": 0.9}  # ≥, ≤, ≤, ≥
TRAIN_WINDOWS = 2048  # windows of train text whose activations the SAE learns from (n_ctx − 1 positions each)
EVAL_WINDOWS = 256    # windows of held-out text it is graded on
CHUNK = 128           # windows per forward pass
TEXT_SEED = {"train": 0, "heldout": 4321}
STEPS = 800           # a training's steps: the defaults meet GOALS on attn-only-2l's residual stream
DECAY = 0.2           # the step size falls linearly to 0 over this last share of them
RANDOM = "random weights of "  # an SAE's model name for a random model of a zoo model's shape


def hook_layer(hook_name: str) -> int:
    """The block a hook belongs to: "blocks.1.hook_resid_post" -> 1."""
    parts = hook_name.split(".")
    if len(parts) < 3 or parts[0] != "blocks" or not parts[1].isdigit():
        raise ValueError(f"{hook_name!r} is not a block's hook (blocks.{{layer}}.…)")
    return int(parts[1])


def hook_width(model: Transformer, hook_name: str) -> int:
    """d_in of an SAE at the hook: d_mlp for an MLP's neurons, else d_model."""
    return model.cfg.d_mlp if ".mlp.hook_" in hook_name else model.cfg.d_model


def text_windows(tokenizer: Tokenizer, n_ctx: int, split: str, windows: int, seed: int | None = None) -> Tensor:
    """[windows n_ctx]: <bos> and n_ctx − 1 tokens of the built-in text's ``split``, at random places from ``seed``
    (by default the split's fixed seed, so every caller grades on the same windows)."""
    stream = TextData(torch.tensor(tokenizer.encode(builtin_text(split))))
    generator = torch.Generator().manual_seed(TEXT_SEED[split] if seed is None else seed)
    return stream.batch(generator, windows, n_ctx)


@torch.inference_mode()
def _at_hook(model: Transformer, hook_name: str, tokens: Tensor) -> Tensor:  # tokens [batch pos] -> [batch pos d_in]
    cache: dict[str, Tensor] = {}
    model(tokens.to(DEVICE), cache=cache, stop_at_layer=hook_layer(hook_name) + 1)
    if hook_name not in cache:
        raise ValueError(f"the model has no activation named {hook_name!r}")
    return cache[hook_name]


def activations(model: Transformer, hook_name: str, tokens: Tensor) -> Tensor:
    """The activations at ``hook_name`` on ``tokens`` [windows pos], <bos>'s position left out:
    [windows · (pos − 1), d_in], a plain tensor (not an inference tensor), so an SAE can train on it."""
    chunks = [_at_hook(model, hook_name, tokens[start:start + CHUNK])[:, 1:].flatten(0, 1)
              for start in range(0, len(tokens), CHUNK)]
    return torch.cat(chunks).clone()


def collect_mb(model: Transformer, hook_name: str, windows: int) -> float:
    """The activations kept, [windows · (n_ctx − 1), d_in] in float32, and one chunk's cache, in MB."""
    cfg = model.cfg
    return 4 * windows * (cfg.n_ctx - 1) * hook_width(model, hook_name) / 1e6 + cfg.activations_mb(CHUNK, cfg.n_ctx)


@dataclass(frozen=True)
class SAEProgress:
    """One evaluation during training, as ``train.Progress`` reports a model's."""

    step: int
    steps: int
    loss: float                 # the training batch's loss (TopK: squared error summed over d_in)
    metrics: dict[str, float]   # l0, variance_explained, dead_fraction on the held-out activations
    elapsed_s: float            # since the first step, evaluations included
    evaluation_s: float         # of which spent in evaluations


@dataclass
class SAETraining:
    model: SAE
    history: list[dict[str, float]] = field(default_factory=list)  # one row per evaluation: step, loss, metrics


def base_model(model_name: str) -> tuple[Transformer, Tokenizer]:
    """(the model an SAE's config names, the tokenizer its text is read with): a zoo model, or random weights of a zoo
    model's shape (``RANDOM`` + its name, ``zoo.random_model``), which reads the zoo model's tokens (a random model
    has no tokenizer of its own). Raises ``ValueError`` for a name that is neither."""
    zoo_name = model_name.removeprefix(RANDOM)
    if zoo_name not in HOOKS:
        raise ValueError(f"this SAE reads {model_name[:60]!r}; SAEs here read {', '.join(HOOKS)} or random weights of "
                         "their shapes")
    model = zoo.load(zoo_name)
    return (zoo.random_model(model.cfg) if model_name.startswith(RANDOM) else model), model.tokenizer


def train_on_activations(acts: Tensor, heldout: Tensor, cfg: SAEConfig, steps: int, *, batch_size: int, lr: float,
                         seed: int = 0, eval_every: int = 100,
                         on_progress: Callable[[SAEProgress], None] | None = None,
                         on_step: Callable[[int], None] | None = None) -> SAETraining:
    """``sae.train_sae``, its step size decayed over the last ``DECAY`` of the steps, with an evaluation every
    ``eval_every`` steps and at the last: the measures of ``sae_stats`` on ``heldout`` [n, d_in], kept in the history
    and passed to ``on_progress``. ``on_step(step)`` after every step (it may raise to stop the training).
    acts: [n, d_in]."""
    history, start, spent = [], time.perf_counter(), [0.0]

    def stepped(step: int, loss: float, sae: SAE) -> None:
        if on_step is not None:
            on_step(step)
        if step % eval_every == 0 or step == steps:
            began = time.perf_counter()
            stats = sae_stats(sae, heldout)
            metrics = {"l0": stats.l0, "variance_explained": stats.variance_explained,
                       "dead_fraction": stats.dead_fraction}
            spent[0] += time.perf_counter() - began
            history.append({"step": float(step), "loss": loss, **metrics})
            if on_progress is not None:
                on_progress(SAEProgress(step, steps, loss, metrics, time.perf_counter() - start, spent[0]))

    sae = train_sae(acts, cfg, steps, batch_size=batch_size, lr=lr, seed=seed, decay=DECAY, on_step=stepped)
    return SAETraining(sae, history)


def train_mb(model_name: str, hook_name: str, d_sae: int = 512, k: int = 16, steps: int = 0,
             windows: int = TRAIN_WINDOWS, batch_size: int = 512, *_, **__) -> float:
    """What ``train_on_zoo`` holds: both sets of activations and the SAE's training (``sae.sae_mb``)."""
    model, _ = base_model(model_name)
    return (collect_mb(model, hook_name, windows) + collect_mb(model, hook_name, EVAL_WINDOWS)
            + sae_mb(SAEConfig(hook_width(model, hook_name), d_sae, k=k), batch_size))


@costs(train_mb, "training a sparse autoencoder on a zoo model's activations")
def train_on_zoo(model_name: str, hook_name: str, d_sae: int = 512, k: int = 16, steps: int = STEPS,
                 windows: int = TRAIN_WINDOWS, batch_size: int = 512, lr: float = 3e-3, seed: int = 0,
                 eval_every: int = 100, on_progress: Callable[[SAEProgress], None] | None = None,
                 on_step: Callable[[int], None] | None = None) -> SAETraining:
    """The worker's entry point: a TopK SAE of ``d_sae`` latents on the activations at ``hook_name`` (one of
    ``HOOKS[zoo model]``) of ``model_name`` (a zoo model, or ``RANDOM`` + one: ``base_model``), learnt from
    ``windows`` windows of train text, evaluated on ``EVAL_WINDOWS`` of held-out text as it trains
    (``train_on_activations``). Its config names the model and the hook. The defaults meet ``GOALS`` on
    attn-only-2l's residual stream (``bench/sae_residual.py``)."""
    model, tokenizer = base_model(model_name)
    if hook_name not in HOOKS[model_name.removeprefix(RANDOM)]:
        raise ValueError(f"SAEs train on {', '.join(f'{m}: {h}' for m, hs in HOOKS.items() for h in hs)}; "
                         f"not {model_name}'s {hook_name!r}")
    acts = activations(model, hook_name, text_windows(tokenizer, model.cfg.n_ctx, "train", windows, seed))  # [n d_in]
    heldout = activations(model, hook_name, text_windows(tokenizer, model.cfg.n_ctx, "heldout", EVAL_WINDOWS))
    cfg = SAEConfig(acts.shape[1], d_sae, k=k, hook_name=hook_name, model_name=model_name)
    return train_on_activations(acts, heldout, cfg, steps, batch_size=batch_size, lr=lr, seed=seed,
                                eval_every=eval_every, on_progress=on_progress, on_step=on_step)


@torch.inference_mode()
def spliced_losses(model: Transformer, hook_name: str, tokens: Tensor,
                   reconstruct: Callable[[Tensor], Tensor]) -> tuple[float, float, float]:
    """(L_clean, L_sae, L_zero): the mean next-token loss on ``tokens`` [windows pos] with the activations at
    ``hook_name`` replaced, at every position but <bos>'s, by themselves, by ``reconstruct(activations)`` and by
    zeros."""
    totals = torch.zeros(3, dtype=torch.float64)
    for start in range(0, len(tokens), CHUNK):
        chunk = tokens[start:start + CHUNK].to(DEVICE)                                       # [batch pos]
        acts = _at_hook(model, hook_name, chunk)                                             # [batch pos d_in]
        where = torch.arange(chunk.shape[1], device=chunk.device)[:, None] > 0               # [pos 1]: not <bos>
        for i, values in enumerate((acts, reconstruct(acts), torch.zeros_like(acts))):
            logits = model(chunk, patch={hook_name: (where, values)})                         # [batch pos d_vocab]
            totals[i] += float(next_token_loss(logits, chunk)) * len(chunk)
    clean, sae, zero = (totals / len(tokens)).tolist()
    return clean, sae, zero


def loss_recovered(clean: float, sae: float, zero: float) -> float:
    """(L_zero − L_sae) / (L_zero − L_clean): 1 when the splice costs nothing, 0 when it is as bad as zeros."""
    return (zero - sae) / (zero - clean)


@dataclass(frozen=True)
class SAEReport:
    """An SAE graded on held-out text by the field's measures, with a verdict against each of ``GOALS``."""

    hook_name: str
    d_sae: int
    l0: float                   # mean latents active per activation
    variance_explained: float   # 1 − Σ‖x − x̂‖² / Σ‖x − mean x‖²
    dead_fraction: float        # share of latents firing on none of the held-out activations
    loss_clean: float           # nats per token
    loss_sae: float             # with the reconstruction spliced in
    loss_zero: float            # with the activations zeroed
    loss_recovered: float       # (L_zero − L_sae) / (L_zero − L_clean)
    activations: int            # held-out activations it was graded on

    @property
    def verdicts(self) -> dict[str, bool]:
        """Each goal met: variance explained and loss recovered at least, L0 and dead latents at most, ``GOALS``'."""
        return {"variance_explained": self.variance_explained >= GOALS["variance_explained"],
                "l0": self.l0 <= GOALS["l0"], "dead_fraction": self.dead_fraction <= GOALS["dead_fraction"],
                "loss_recovered": self.loss_recovered >= GOALS["loss_recovered"]}

    @property
    def passed(self) -> bool:
        return all(self.verdicts.values())


def evaluate_mb(sae: SAE, windows: int = EVAL_WINDOWS) -> float:
    """The held-out activations and one chunk's cache and logits, in MB."""
    model, _ = base_model(sae.cfg.model_name)
    return collect_mb(model, sae.cfg.hook_name, windows) + 4 * CHUNK * model.cfg.n_ctx * model.cfg.d_vocab / 1e6


@costs(evaluate_mb, "grading a sparse autoencoder on held-out text")
def evaluate(sae: SAE, windows: int = EVAL_WINDOWS) -> SAEReport:
    """``sae`` graded on ``windows`` windows of held-out text, at the hook of the model its config names
    (``base_model``)."""
    model, tokenizer = base_model(sae.cfg.model_name)
    tokens = text_windows(tokenizer, model.cfg.n_ctx, "heldout", windows)
    stats = sae_stats(sae, activations(model, sae.cfg.hook_name, tokens))
    clean, spliced, zero = spliced_losses(model, sae.cfg.hook_name, tokens, sae)
    return SAEReport(sae.cfg.hook_name, sae.cfg.d_sae, stats.l0, stats.variance_explained, stats.dead_fraction,
                     clean, spliced, zero, loss_recovered(clean, spliced, zero), windows * (model.cfg.n_ctx - 1))
