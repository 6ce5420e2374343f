"""Activation patching (Meng et al. 2022; Wang et al. 2022) on the induction task, by noising: one activation of a
clean run takes its value on a corrupted input, everything else stays clean, and a logit difference shows how much
of the model's prediction that activation carried.

The clean input is <bos>, a random segment r of length L, r again (``data.repeated_sequences``); the corrupted
input has its first copy replaced by another random segment c, so the second copy's tokens are the same but nothing
earlier says what follows them. The metric is the logit difference at the second copy's positions L+1 … 2L−1: the
logit of the clean answer (the token after the earlier copy of the current token) minus the logit of the corrupted
input's token at that place, averaged. A patch's effect is (clean − patched) / (clean − corrupted): 1 when that
activation alone, corrupted, breaks the prediction as much as the corrupted input does; 0 when it changes nothing.

Patched, each in its own run: the residual stream entering each layer at each position; each head's output z
(every position); each head's queries, keys and values; and K-composition by path patching: a later head's keys
computed from the clean residual stream with one earlier head's result replaced by its corrupted value, nothing
else changed (the direct path only: what the earlier head changes in the layers between does not reach the keys).
Every run is functional (``Transformer.forward``'s ``patch``): the shared model is not touched.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechlib import attention
from mechlib.checks import LOGIT_GAP_MIN, PATCH_EFFECT_MIN
from mechlib.circuits import head_label
from mechlib.data import eval_length, repeated_sequences
from mechlib.device import costs, to_numpy
from mechlib.induction import _require_scorable
from mechlib.model import Cache, Transformer

__all__ = ["BATCH", "Patching", "corrupted_pair", "inputs_by_row", "key_paths_grid", "logit_difference", "patching", "patching_mb"]

BATCH = 8  # repeated sequences each patch is measured on


def corrupted_pair(d_vocab: int, length: int, batch: int, seed: int) -> tuple[Tensor, Tensor]:
    """(clean, corrupted), [batch 1+2L] each: <bos> r r, and <bos> c r with c another random segment."""
    clean = repeated_sequences(d_vocab, length, batch, seed)
    corrupted = clean.clone()
    corrupted[:, 1 : length + 1] = repeated_sequences(d_vocab, length, batch, seed + 1)[:, 1 : length + 1]
    return clean, corrupted


def logit_difference(logits: Tensor, clean: Tensor, corrupted: Tensor, length: int) -> Tensor:
    """The metric of each block of ``clean``'s batch in ``logits`` [blocks·batch pos d_vocab]: at positions
    q = L+1 … 2L−1, logit(clean[q − L + 1]) − logit(corrupted[q − L + 1]), averaged over q and the batch. [blocks]"""
    batch = clean.shape[0]
    queries = torch.arange(length + 1, 2 * length)                                      # [q]
    answers, others = (tokens[:, queries - length + 1].to(logits.device) for tokens in (clean, corrupted))  # [batch q]
    logits = logits.reshape(-1, batch, *logits.shape[1:])[:, :, queries.to(logits.device)]  # [blocks batch q d_vocab]
    picked = (logits.gather(-1, answers[None, :, :, None].expand(logits.shape[0], -1, -1, 1))
              - logits.gather(-1, others[None, :, :, None].expand(logits.shape[0], -1, -1, 1)))
    return picked.mean(dim=(1, 2, 3))


def _blocks(tokens: Tensor, n: int) -> Tensor:
    """``tokens`` [batch pos] repeated for n patches: [n·batch pos], block i holding patch i."""
    return tokens.repeat(n, 1)


def _one_per_block(n: int, batch: int, axis_size: int, device) -> Tensor:
    """where [n·batch axis_size]: block i true at index i of the patched axis."""
    return torch.eye(n, axis_size, dtype=torch.bool, device=device).repeat_interleave(batch, dim=0)


def _effects(model: Transformer, clean: Tensor, corrupted: Tensor, length: int, name: str, where: Tensor,
             values: Tensor, n: int, baseline: tuple[float, float]) -> Tensor:
    """(clean − patched) / (clean − corrupted) for the n patches of hook ``name`` stacked in the batch. [n]"""
    logits = model(_blocks(clean, n), patch={name: (where, values)})
    clean_diff, corrupted_diff = baseline
    return (clean_diff - logit_difference(logits, clean, corrupted, length)) / (clean_diff - corrupted_diff)


def _residual_effects(model, clean, corrupted, length, cache: Cache, baseline) -> Tensor:
    """[layer pos]: the residual stream entering each layer, corrupted at one position."""
    batch, n = clean.shape
    rows = []
    for layer in range(model.cfg.n_layers):
        where = _one_per_block(n, batch, n, model.embed.W_E.device)[..., None]          # [n·batch pos 1]
        values = cache[f"blocks.{layer}.hook_resid_pre"].repeat(n, 1, 1)                  # [n·batch pos d_model]
        rows.append(_effects(model, clean, corrupted, length, f"blocks.{layer}.hook_resid_pre", where, values, n,
                             baseline))
    return torch.stack(rows)


def _head_effects(model, clean, corrupted, length, cache: Cache, hook: str, baseline) -> Tensor:
    """[layer head]: one head's activation ``hook`` (hook_z, hook_q, hook_k, hook_v) corrupted at every position."""
    batch, h = clean.shape[0], model.cfg.n_heads
    rows = []
    for layer in range(model.cfg.n_layers):
        where = _one_per_block(h, batch, h, model.embed.W_E.device)[:, None, :, None]   # [h·batch 1 head 1]
        values = cache[f"blocks.{layer}.attn.{hook}"].repeat(h, 1, 1, 1)                 # [h·batch pos head d_head]
        rows.append(_effects(model, clean, corrupted, length, f"blocks.{layer}.attn.{hook}", where, values, h,
                             baseline))
    return torch.stack(rows)


def _k_path_effects(model, clean, corrupted, length, clean_cache: Cache, corrupted_cache: Cache, baseline) -> Tensor:
    """[sender layer, sender head, receiver layer, receiver head]: the receiver's keys read a clean residual stream
    in which the sender's result is its corrupted one; NaN unless the sender's layer is before the receiver's."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    batch = clean.shape[0]
    out = torch.full((L, H, L, H), float("nan"), dtype=model.embed.W_E.dtype)
    pos_embed = clean_cache["hook_pos_embed"]                                             # [batch pos d_model]
    for receiver in range(1, L):
        block, attn = model.blocks[receiver], model.blocks[receiver].attn
        results = [(clean_cache[f"blocks.{s}.attn.hook_result"], corrupted_cache[f"blocks.{s}.attn.hook_result"])
                   for s in range(receiver)]                                              # [batch pos head d_model]
        resid = torch.stack([clean_cache[f"blocks.{receiver}.hook_resid_pre"] - mine[:, :, head] + theirs[:, :, head]
                             for mine, theirs in results for head in range(H)])            # [sender batch pos d_model]
        qk_input = block.attention_inputs(resid, pos_embed)[0]
        keys = attention.qkv(qk_input, attn.W_K, attn.b_K)                                # [s batch pos head d_head]
        senders = keys.shape[0]
        where = _one_per_block(H, batch, H, model.embed.W_E.device).repeat(senders, 1)[:, None, :, None]
        # where: [s·h·batch 1 head 1]
        values = keys.repeat_interleave(H, dim=0).flatten(0, 1)                          # [s·h·batch pos head d_head]
        effects = _effects(model, clean, corrupted, length, f"blocks.{receiver}.attn.hook_k", where, values,
                           senders * H, baseline)
        out[:receiver, :, receiver] = effects.reshape(receiver, H, H).cpu()
    return out


@dataclass(frozen=True)
class Patching:
    """Activation patching on the induction task (see the module): the effects, and the verdicts a page states."""

    length: int               # each copy's length L
    clean: float              # the logit difference on the clean input
    corrupted: float          # on the corrupted input
    resid: np.ndarray         # [layer pos]: the residual stream entering a layer, corrupted at one position
    heads: np.ndarray         # [layer head]: a head's output z, corrupted at every position
    inputs: dict[str, np.ndarray]  # "q", "k", "v" -> [layer head]: a head's queries, keys or values, corrupted
    k_paths: np.ndarray       # [sender layer, sender head, receiver layer, receiver head] (``_k_path_effects``)
    gap_min: float            # LOGIT_GAP_MIN
    measurable: bool          # clean − corrupted ≥ gap_min: the model predicts the second copy, so a patch can break it
    strongest: tuple[str, str, float]  # the K path with the largest effect: (sender, receiver, effect)
    effect_min: float         # PATCH_EFFECT_MIN
    stands_out: bool          # measurable and the strongest K path's effect ≥ effect_min

    @property
    def carriers(self) -> tuple[str, ...]:
        """Every head whose keys carry the prediction (corrupting its keys alone costs ≥ effect_min of the
        corrupted input's effect): the rule the page states, and the set its question accepts; empty when the
        model does not do the task."""
        if not self.measurable:
            return ()
        layers, heads = np.nonzero(self.inputs["k"] >= self.effect_min)
        return tuple(head_label(int(layer), int(head)) for layer, head in zip(layers, heads))


def patching_mb(model: Transformer, seed: int = 0) -> float:
    """Estimated memory of ``patching`` beside the weights, in MB: the two cached runs, and its largest batch of
    patches (a forward of blocks × BATCH sequences, the values patched in among its activations)."""
    cfg, positions = model.cfg, 1 + 2 * eval_length(model.cfg.n_ctx)
    blocks = max(positions, cfg.n_heads, (cfg.n_layers - 1) * cfg.n_heads**2)
    return 2 * cfg.activations_mb(BATCH, positions) + cfg.activations_mb(blocks * BATCH, positions)


@costs(patching_mb, "activation patching on repeated sequences")
@torch.inference_mode()
def patching(model: Transformer, seed: int = 0) -> Patching:
    """Activation patching of ``model`` on ``BATCH`` repeated sequences drawn from ``seed`` (see the module)."""
    _require_scorable(model.cfg)
    length = eval_length(model.cfg.n_ctx)
    clean, corrupted = corrupted_pair(model.cfg.d_vocab, length, BATCH, seed)
    clean_logits, clean_cache = model.run_with_cache(clean)
    corrupted_logits, corrupted_cache = model.run_with_cache(corrupted)
    baseline = (float(logit_difference(clean_logits, clean, corrupted, length)[0]),
                float(logit_difference(corrupted_logits, clean, corrupted, length)[0]))
    args = (model, clean, corrupted, length)
    resid = _residual_effects(*args, corrupted_cache, baseline)
    heads = _head_effects(*args, corrupted_cache, "hook_z", baseline)
    inputs = {name: to_numpy(_head_effects(*args, corrupted_cache, f"hook_{name}", baseline)) for name in "qkv"}
    k_paths = _k_path_effects(*args, clean_cache, corrupted_cache, baseline)
    measurable = baseline[0] - baseline[1] >= LOGIT_GAP_MIN
    if model.cfg.n_layers > 1:
        flat = int(torch.nan_to_num(k_paths, nan=-np.inf).argmax())
        (ls, hs, lr, hr), value = np.unravel_index(flat, k_paths.shape), float(k_paths.flatten()[flat])
        strongest = (head_label(int(ls), int(hs)), head_label(int(lr), int(hr)), value)
    else:
        strongest = ("", "", float("nan"))
    return Patching(length, *baseline, to_numpy(resid), to_numpy(heads), inputs, k_paths.numpy(), LOGIT_GAP_MIN,
                    measurable, strongest, PATCH_EFFECT_MIN, measurable and strongest[2] >= PATCH_EFFECT_MIN)


def inputs_by_row(result: Patching) -> np.ndarray:
    """The effects of corrupting a head's queries, keys or values as one table [layer·3 + (q, k, v), head], the
    rows in the order layer 0's queries, keys, values, then layer 1's: the Circuits page's heatmap."""
    n_layers = result.heads.shape[0]
    return np.stack([result.inputs[part][layer] for layer in range(n_layers) for part in "qkv"])


def key_paths_grid(result: Patching) -> np.ndarray:
    """Path patching into keys as a grid [sender, receiver] over every head that can send (layers 0 … L−2) and
    every head that can receive (layers 1 … L−1), heads numbered layer by layer."""
    n_layers, n_heads = result.heads.shape
    flat = result.k_paths.reshape(n_layers * n_heads, n_layers * n_heads)
    return flat[: (n_layers - 1) * n_heads, n_heads:]
