"""A latent browser's computations: what one SAE latent reads and writes (Bricken et al. 2023's feature views).

- its **top-activating contexts**: the positions of the built-in held-out text where it fires hardest, each with a
  window of tokens around it and the latent's activation on every token of that window (for shading);
- its **effect on the logits**: its decoder direction (for an MLP's latent, that direction through W_out: what it
  writes into the residual stream) read straight out through the final LayerNorm, as direct logit attribution reads a
  component (centred, divided by the final scale, here its mean over the text, times w), then W_U: the tokens it
  promotes and suppresses most, a direct effect only (later layers are not run);
- **which heads write along it**: per head, the mean of (head output · unit decoder direction) over the positions
  where the latent fires, from every head at or before the hook's layer (``hook_result``).

And a verdict computed, not typed: whether some latents are **induction features**, the induction heads' output
read as features (Olsson et al. 2022). On repeated random sequences (<bos>, a random segment, the segment again) the
second copy's tokens are the first's, so a latent that fires far more there than on the same tokens in the first
copy responds to "this token came earlier", not to the token: counted where its mean activation in the second copy
is at least ``INDUCTION_RATIO`` times that in the first and it fires on at least ``INDUCTION_FIRING`` of the second
copy's positions. ``induction_control`` asks it of a zoo model's SAE and of an SAE trained the same way on a random
model of the same shape.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib.data import Tokenizer, builtin_text, eval_length, repeated_sequences
from mechlib.device import DEVICE, costs, to_numpy
from mechlib.model import Transformer
from mechlib.sae import SAE
from mechlib.sae_residual import CHUNK, RANDOM, base_model, hook_layer, train_mb, train_on_zoo

__all__ = ["BROWSE_WINDOWS", "CONTEXT", "INDUCTION_BATCH", "INDUCTION_FIRING", "INDUCTION_RATIO", "TOP", "TOP_TOKENS",
           "Context", "InductionControl", "InductionLatents", "LatentView", "browse", "browse_mb", "consecutive_windows",
           "induction_control", "induction_control_mb", "induction_latents", "induction_mb", "latent_direction"]

BROWSE_WINDOWS = 512   # windows of held-out text searched for a latent's top contexts (fewer where the text ends)
TOP = 10               # top-activating contexts shown
CONTEXT = (12, 4)      # tokens shown before and after each top position
TOP_TOKENS = 10        # promoted and suppressed tokens shown
INDUCTION_BATCH = 64   # repeated random sequences the induction verdict reads
INDUCTION_RATIO = 10.0  # second-copy mean activation ≥ this × the first copy's
INDUCTION_FIRING = 0.05  # and firing on at least this share of the second copy's positions


def consecutive_windows(tokenizer: Tokenizer, n_ctx: int, windows: int) -> Tensor:
    """[≤ windows, n_ctx]: the held-out built-in text cut into consecutive, non-overlapping windows of n_ctx − 1
    tokens, <bos> before each: no context shows twice among the top ones."""
    ids = torch.tensor(tokenizer.encode(builtin_text("heldout")))
    count = min(windows, len(ids) // (n_ctx - 1))
    body = ids[:count * (n_ctx - 1)].view(count, n_ctx - 1)                           # [window n_ctx − 1]
    return torch.cat([torch.full((count, 1), tokenizer.bos_id), body], dim=1)          # [window n_ctx]


def latent_direction(model: Transformer, sae: SAE, latent: int) -> Tensor:
    """What latent ``latent`` writes into the residual stream, unit length [d_model]: its decoder row, through the
    MLP's W_out when the SAE reads an MLP's neurons."""
    direction = sae.W_dec[latent]                                                     # [d_in]
    if ".mlp.hook_" in sae.cfg.hook_name:
        direction = direction @ model.blocks[hook_layer(sae.cfg.hook_name)].mlp.W_out  # [d_model]
    return direction / direction.norm()


@dataclass(frozen=True)
class Context:
    """One top-activating position and the window of text around it."""

    ids: tuple[int, ...]      # the window's token ids
    activations: np.ndarray   # [len(ids)] the latent's activation on each (0 at <bos>, which the SAE never reads)
    peak: int                 # index in ``ids`` of the top position


@dataclass(frozen=True)
class LatentView:
    """What latent ``latent`` of an SAE reads and writes, on the held-out text."""

    latent: int
    frequency: float            # share of the text's positions (<bos> aside) where it fires
    contexts: list[Context]     # its top-activating positions, highest first (fewer than TOP if it fires less)
    promoted: list[int]         # the TOP_TOKENS token ids its direction raises most, most first
    promoted_logits: np.ndarray  # [TOP_TOKENS] their direct logit change per unit of activation
    suppressed: list[int]       # the TOP_TOKENS it lowers most, most first
    suppressed_logits: np.ndarray  # [TOP_TOKENS]
    heads: list[str]            # "L0H0", …: every head at or before the hook's layer
    head_writes: np.ndarray     # [head] mean (head output · unit decoder direction) where the latent fires (0: never)

    @property
    def top_head(self) -> str:
        """The head that writes most along the latent's direction."""
        return self.heads[int(np.argmax(self.head_writes))]


def browse_mb(sae: SAE, latent: int = 0, *_) -> float:
    """One chunk's cache and latents [chunk pos d_sae], and the latent's activations over the text, in MB."""
    cfg = base_model(sae.cfg.model_name)[0].cfg
    return (cfg.activations_mb(CHUNK, cfg.n_ctx) + 4 * CHUNK * cfg.n_ctx * sae.cfg.d_sae / 1e6
            + 4 * BROWSE_WINDOWS * cfg.n_ctx / 1e6)


@torch.inference_mode()
@costs(browse_mb, "browsing a sparse autoencoder's latent")
def browse(sae: SAE, latent: int) -> LatentView:
    """Latent ``latent``'s view on ``BROWSE_WINDOWS`` consecutive windows of held-out text, through the model the SAE's
    config names (``sae_residual.base_model``)."""
    if not 0 <= latent < sae.cfg.d_sae:
        raise ValueError(f"the SAE has latents 0…{sae.cfg.d_sae - 1}, not {latent}")
    model, tokenizer = base_model(sae.cfg.model_name)
    tokens = consecutive_windows(tokenizer, model.cfg.n_ctx, BROWSE_WINDOWS)                  # [window pos]
    layer, direction = hook_layer(sae.cfg.hook_name), latent_direction(model, sae, latent)       # [d_model]
    heads = (layer + 1) * model.cfg.n_heads
    acts, scales, writes, fired = [], [], torch.zeros(heads, dtype=torch.float64), 0
    for start in range(0, len(tokens), CHUNK):
        cache: dict[str, Tensor] = {}
        model(tokens[start:start + CHUNK].to(DEVICE), cache=cache)
        f = sae.encode(cache[sae.cfg.hook_name])[..., latent]                                   # [batch pos]
        f[:, 0] = 0
        results = torch.cat([cache[f"blocks.{lay}.attn.hook_result"] for lay in range(layer + 1)], dim=2)
        along = (results @ direction).double()                                                 # [batch pos head]
        writes += (along * (f > 0)[..., None]).sum((0, 1))
        fired += int((f > 0).sum())
        acts.append(f.cpu())
        if model.cfg.normalization == "LN":
            scales.append(cache["ln_final.hook_scale"][:, 1:].flatten())
    acts = torch.cat(acts)                                                                     # [window pos]
    positions = acts[:, 1:].numel()
    logits = _logit_effect(model, direction, torch.cat(scales).mean() if scales else None)     # [d_vocab]
    return LatentView(latent, fired / positions, _contexts(tokens, acts),
                      logits.topk(TOP_TOKENS).indices.tolist(), to_numpy(logits.topk(TOP_TOKENS).values.double()),
                      (-logits).topk(TOP_TOKENS).indices.tolist(), to_numpy(-(-logits).topk(TOP_TOKENS).values.double()),
                      [f"L{lay}H{h}" for lay in range(layer + 1) for h in range(model.cfg.n_heads)], to_numpy(writes / max(fired, 1)))


def _logit_effect(model: Transformer, direction: Tensor, scale: Tensor | None) -> Tensor:  # [d_model] -> [d_vocab]
    """The direct change in every logit per unit along ``direction``: through the final LayerNorm as direct logit
    attribution takes a term (centred, / the scale, · w), then W_U."""
    if scale is not None:
        direction = (direction - direction.mean()) / scale * model.ln_final.w
    return direction @ model.unembed.W_U


def _contexts(tokens: Tensor, acts: Tensor) -> list[Context]:  # tokens, acts: [window pos]
    flat = acts.flatten()
    top = flat.topk(min(TOP, int((flat > 0).sum()))).indices.tolist()
    contexts = []
    for index in top:
        window, pos = divmod(index, acts.shape[1])
        first, last = max(0, pos - CONTEXT[0]), min(acts.shape[1], pos + CONTEXT[1] + 1)
        contexts.append(Context(tuple(tokens[window, first:last].tolist()), to_numpy(acts[window, first:last].double()),
                                pos - first))
    return contexts


@dataclass(frozen=True)
class InductionLatents:
    """Each latent on repeated random sequences: in the first copy, and on the same tokens in the second."""

    length: int                 # the segment's length
    first_mean: np.ndarray      # [d_sae] mean activation over the first copy's positions
    second_mean: np.ndarray     # [d_sae] over the second copy's
    second_firing: np.ndarray   # [d_sae] share of the second copy's positions where it fires
    found: list[int]            # latents with second_mean ≥ INDUCTION_RATIO · first_mean, firing ≥ INDUCTION_FIRING

    @property
    def count(self) -> int:
        return len(self.found)


def induction_mb(sae: SAE, *_) -> float:
    """The repeated sequences' cache and latents [batch pos d_sae], in MB."""
    model, _ = base_model(sae.cfg.model_name)
    positions = 1 + 2 * eval_length(model.cfg.n_ctx)
    return model.cfg.activations_mb(INDUCTION_BATCH, positions) + 4 * INDUCTION_BATCH * positions * sae.cfg.d_sae / 1e6


@torch.inference_mode()
@costs(induction_mb, "looking for induction features among an SAE's latents")
def induction_latents(sae: SAE, seed: int = 0) -> InductionLatents:
    """The latents of ``sae`` on ``INDUCTION_BATCH`` repeated random sequences from ``seed``, each segment
    ``data.eval_length`` long (the length the zoo's models never trained on), through the model its config names."""
    model, _ = base_model(sae.cfg.model_name)
    length = eval_length(model.cfg.n_ctx)
    tokens = repeated_sequences(model.cfg.d_vocab, length, INDUCTION_BATCH, seed).to(DEVICE)  # [batch 1 + 2·length]
    cache: dict[str, Tensor] = {}
    model(tokens, cache=cache, stop_at_layer=hook_layer(sae.cfg.hook_name) + 1)
    f = sae.encode(cache[sae.cfg.hook_name])                                                # [batch pos d_sae]
    first, second = f[:, 1:1 + length], f[:, 1 + length:]                                  # [batch length d_sae] each
    first_mean, second_mean = first.mean((0, 1)), second.mean((0, 1))                       # [d_sae] each
    firing = (second > 0).float().mean((0, 1))                                              # [d_sae]
    found = ((second_mean >= INDUCTION_RATIO * first_mean) & (second_mean > 0) & (firing >= INDUCTION_FIRING))
    return InductionLatents(length, to_numpy(first_mean.double()), to_numpy(second_mean.double()),
                            to_numpy(firing.double()), found.nonzero()[:, 0].tolist())


@dataclass(frozen=True)
class InductionControl:
    """The induction verdict on a zoo model's SAE and on one trained the same way on a random model of its shape."""

    trained: InductionLatents
    random: InductionLatents

    @property
    def found(self) -> bool:
        """Induction features in the trained model, none in the random one."""
        return self.trained.count > 0 and self.random.count == 0


def induction_control_mb(model_name: str, hook_name: str, d_sae: int, k: int, steps: int, windows: int, *_) -> float:
    """Two SAEs' trainings, one after the other (``train_mb``), and the verdict's sequences."""
    model, _ = base_model(model_name)
    return (train_mb(model_name, hook_name, d_sae, k, steps, windows)
            + model.cfg.activations_mb(INDUCTION_BATCH, 1 + 2 * eval_length(model.cfg.n_ctx)))


@costs(induction_control_mb, "training two sparse autoencoders to compare their induction features",
       trains=True)
def induction_control(model_name: str, hook_name: str, d_sae: int, k: int, steps: int, windows: int,
                      seed: int = 0) -> InductionControl:
    """``induction_latents`` of an SAE on zoo model ``model_name`` at ``hook_name`` and of one trained alike (same
    sizes, text, steps and seed) on random weights of its shape (``sae_residual.RANDOM``), both reading the zoo
    model's tokens."""
    trained, random = (train_on_zoo(name, hook_name, d_sae, k, steps, windows, seed=seed).model
                       for name in (model_name, RANDOM + model_name))
    return InductionControl(induction_latents(trained, seed), induction_latents(random, seed))
