"""Shared models: a process-wide cache of read-only models (``bounded.Bounded``: by kind, and by their weights' size).

Thirty sessions may ask for the same model at once; it is built once (a lock per key) and every
session gets the same object, made read-only by ``Shareable.share`` (eval mode, no gradients;
``.train()``, ``requires_grad_(True)`` and ``load_state_dict`` on it raise). Nobody mutates a cached
model: interventions are forward arguments or work on a copy (``copy.deepcopy`` gives a writable one).
A zoo model is a ``Model``: a ``Transformer`` or, for the LSTM analogy, an ``LSTM``.
"""

import hashlib
import json
import math
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from mechlib import data, hf, io
from mechlib.config import ModelConfig
from mechlib.bounded import Bounded
from mechlib.device import DEVICE
from mechlib.lstm import LSTM, LSTMConfig
from mechlib.model import Transformer
from mechlib.sae import SAE

__all__ = ["Model", "random_model", "from_checkpoint", "stored", "sweep", "folder_weights", "from_folder", "LIMITS", "cache_mb", "model_mb", "Recipe", "RECIPES", "names", "load",
           "snapshot_steps", "load_snapshot", "history"]

# Models of each kind kept at once; the least recently used goes first. Their sizes are bounded too: ``cache_mb``.
LIMITS = {"random": 8, "upload": 16, "zoo": 8, "snapshot": 24, "folder": 4}
# A stored checkpoint's model unused this long goes (``sweep``): its bytes stay where they are kept (a server's store),
# and it is built again in a fraction of a second. The class's other models stay while the bounds allow.
IDLE_S = {"upload": 120.0}


def cache_mb() -> float:
    """What all cached models may hold together, in MB (``MECHLIB_CACHE_MB``, default 1024): counts alone let three
    153-million-parameter random models (620 MB each) take the server from 0.9 to 2.7 GB."""
    return float(os.environ.get("MECHLIB_CACHE_MB", 1024))


def model_mb(model: "Model") -> float:
    """The memory a model's weights and buffers hold, in MB."""
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())) / 1e6

Model = Transformer | LSTM  # what the zoo and io.load give back

_models: Bounded[Model] = Bounded(max_size=lambda: cache_mb(), size=model_mb, per_group=lambda kind: LIMITS[kind],
                                  ttl_s=lambda kind: IDLE_S.get(kind, math.inf))


def sweep() -> None:
    """Drop the models idle past ``IDLE_S`` now (a server calls this between runs: after a class leaves, nobody asks
    the cache for anything)."""
    _models.sweep()


def _cached(key: tuple, build: Callable[[], Model]) -> Model:
    """The shared model ``key`` (its kind first), built once and made read-only."""
    return _models.get_or_build(key, lambda: build().to(DEVICE).share(), group=key[0])


def random_model(cfg: ModelConfig, admit: Callable[[], AbstractContextManager] = nullcontext) -> Transformer:
    """The shared, read-only model with random weights drawn from ``cfg`` (its seed included). ``admit()`` is
    entered around a build only, not when the model is already here: a server holds the weights' memory under its
    budget there."""
    def build() -> Transformer:
        with admit():
            return Transformer(cfg)
    return _cached(("random", cfg, str(DEVICE)), build)


def from_checkpoint(data: bytes) -> tuple[str, Model]:
    """(sha256 digest, the shared read-only model) of an uploaded checkpoint; raises ``io.CheckpointError``."""
    digest = hashlib.sha256(data).hexdigest()
    return digest, stored(digest, lambda: data)


def stored(key: str, read: Callable[[], bytes]) -> Model | SAE:
    """The shared read-only model (or sparse autoencoder) of the checkpoint named ``key`` (a content hash: one name, one checkpoint), its
    bytes asked of ``read()`` only when it is not cached here: a server's sessions share one model however many
    of them open it, and its bytes cross from a store elsewhere (Redis) once. Raises ``io.CheckpointError``."""
    return _cached(("upload", key, str(DEVICE)), lambda: io.load(read()))


def folder_weights(path: Path) -> Path:
    """The weights file of a models-folder entry: a Hugging Face directory's ``model.safetensors``, or the
    mechlib checkpoint itself."""
    return path / "model.safetensors" if path.is_dir() else path


def from_folder(path: Path, admit: Callable[[], AbstractContextManager] = nullcontext) -> Model:
    """The shared read-only model at ``path``: a Hugging Face GPT-2 directory (``hf.from_transformers``) or a
    mechlib checkpoint file (``io.load``), both checked before anything is built. Cached under the path and its
    weights' size and modification time, so a file replaced on disk is read again; ``admit()`` as in
    ``random_model``."""
    weights = folder_weights(path).stat()

    def build() -> Model:
        with admit():
            return hf.from_transformers(path) if path.is_dir() else io.load(path)
    return _cached(("folder", str(path.resolve()), weights.st_size, weights.st_mtime_ns, str(DEVICE)), build)


# ---------------------------------------------------------------------------------------------
# The named models, shipped in mechlib/checkpoints/ and rebuilt by `python -m mechlib.train NAME`.
# The word models' step counts stop near the lowest held-out loss: the corpus is small (≈113,000
# words), so longer training memorises it.

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"


@dataclass(frozen=True)
class Recipe:
    """How a zoo model is made: its config, its data (``mechlib.train.recipe_data``), the optimiser's settings."""

    cfg: ModelConfig | LSTMConfig
    source: str               # "words" or "chars" (the built-in text), or "copying" (``data.CopyingTask``: random ids)
    repeats: float            # share of sequences with a copied segment (0: plain text)
    steps: int
    lr: float
    description: str
    random_share: float = 0.5  # of the repeated sequences, the share made of random tokens
    weight_decay: float = 0.01
    warmup: int = 50          # steps of linear warm-up (``train.learning_rate``)
    clip: float | None = 1.0  # gradient-norm clipping; None: none
    snapshots: int = 0        # checkpoints kept across training, for replaying it
    batch_size: int = 32
    seed: int = 0


RECIPES: dict[str, Recipe] = {
    # No layers: the next-token objective is the cross-entropy of the text's bigram table, so the rebuild fits
    # W_E, W_U, b_U to that table full-batch (mechlib.bigrams.fit: Adam for `steps` steps at peak `lr`), which is
    # training on every window at once and the best its width allows; the batch settings do not apply.
    "attn-only-0l": Recipe(
        ModelConfig(n_layers=0, d_model=128, n_heads=1, d_vocab=data.WORD_VOCAB, n_ctx=64, positional="shortformer"),
        "words", 0.0, steps=1000, lr=3e-2,
        description="no layers: logits = W_E W_U + b_U, the bigram path, fitted full-batch (word-level, built-in text)"),
    "attn-only-1l": Recipe(
        ModelConfig(n_layers=1, d_model=128, n_heads=4, d_vocab=data.WORD_VOCAB, n_ctx=64, positional="shortformer"),
        "words", 0.0, steps=1200, lr=3e-3,
        description="one attention layer, 4 heads: skip-trigrams and copying (word-level, built-in text)"),
    # Shortformer positions keep positions out of the values, so layer 0 cannot pass "where my earlier copy
    # was" on to layer 1: the model must learn the classic circuit, a previous-token head K-composed with an
    # induction head. No weight decay: it would soften both heads' attention.
    "attn-only-2l": Recipe(
        ModelConfig(n_layers=2, d_model=128, n_heads=4, d_vocab=105, n_ctx=48, positional="shortformer"),
        "chars", 1.0, random_share=0.8, weight_decay=0.0, steps=6000, lr=3e-3, snapshots=20,
        description="two attention layers, 4 heads each: a previous-token head and an induction head "
                    "(characters: built-in text with repeated spans, mixed with repeated random characters)"),
    # The same data as attn-only-2l and a similar size (168,265 parameters against 165,225), for the LSTM analogy.
    "lstm": Recipe(
        LSTMConfig(d_vocab=105, d_model=64, d_hidden=160, n_ctx=48),
        "chars", 1.0, random_share=0.8, weight_decay=0.0, steps=3000, lr=3e-3,
        description="an LSTM (one layer, 160 cells) on attn-only-2l's data, for comparing state-updating machines"),
    "gelu-2l": Recipe(
        ModelConfig(n_layers=2, d_model=128, n_heads=4, d_vocab=data.WORD_VOCAB, n_ctx=64, d_mlp=512, normalization="LN"),
        "words", 0.0, steps=800, lr=3e-3,
        description="two layers with GELU MLPs and LayerNorm, for the residual-stream ledger (word-level, built-in text)"),
    # Controls on the copying task (``copying.controls``): train.INDUCTION_PRESET's task (segments of 8–16 ids from
    # 512, each copied once), optimiser settings and batch, for the same 2,000 steps each (the preset stops once its
    # circuit forms; these run the whole budget). The two-layer model is the preset's, the one-layer model has its
    # width, and the LSTM about its size (99,328 parameters against 101,440; the one-layer model has 84,800).
    "copying-2l": Recipe(
        ModelConfig(n_layers=2, d_model=64, n_heads=1, d_vocab=512, n_ctx=33, positional="shortformer"),
        "copying", 1.0, steps=2000, lr=1e-2, batch_size=64, warmup=0, clip=None, weight_decay=0.0,
        description="two attention layers of one head on the copying task (random ids, no tokenizer): "
                    "the Train page's preset, trained 2,000 steps"),
    "copying-1l": Recipe(
        ModelConfig(n_layers=1, d_model=64, n_heads=1, d_vocab=512, n_ctx=33, positional="shortformer"),
        "copying", 1.0, steps=2000, lr=1e-2, batch_size=64, warmup=0, clip=None, weight_decay=0.0,
        description="one attention layer of one head on the copying task (random ids, no tokenizer): "
                    "copying-2l's control without composition"),
    "copying-lstm": Recipe(
        LSTMConfig(d_vocab=512, d_model=64, d_hidden=64, n_ctx=33),
        "copying", 1.0, steps=2000, lr=1e-2, batch_size=64, warmup=0, clip=None, weight_decay=0.0,
        description="an LSTM of 64 cells on the copying task (random ids, no tokenizer), of about copying-2l's size"),
}


def names() -> list[str]:
    """The zoo's model names."""
    return list(RECIPES)


def path(name: str) -> Path:
    return CHECKPOINTS / f"{name}.safetensors"


def _known(name: str) -> None:
    if name not in RECIPES:
        raise KeyError(f"no zoo model named {name!r}; choose from {', '.join(RECIPES)}")


def load(name: str) -> Model:
    """The shared, read-only zoo model ``name``, with ``model.cfg`` and ``model.tokenizer``."""
    _known(name)
    return _cached(("zoo", name, str(DEVICE)), lambda: io.load(path(name)))


def snapshot_steps(name: str) -> list[int]:
    """The training steps at which ``name`` was saved (empty when it keeps no snapshots)."""
    _known(name)
    folder = CHECKPOINTS / name
    return sorted(int(p.stem.removeprefix("step_")) for p in folder.glob("step_*.safetensors")) if folder.is_dir() else []


def load_snapshot(name: str, step: int) -> Model:
    """The shared, read-only model ``name`` as it was at training step ``step``."""
    if step not in snapshot_steps(name):
        raise KeyError(f"{name} has no snapshot at step {step}; it has {snapshot_steps(name)}")
    return _cached(("snapshot", f"{name}@{step}", str(DEVICE)), lambda: io.load(CHECKPOINTS / name / f"step_{step:05d}.safetensors"))


def history(name: str) -> list[dict[str, float]]:
    """The evaluation rows (step, loss, repeat_loss, induction, prev_token) recorded while training ``name``."""
    _known(name)
    file = CHECKPOINTS / name / "history.json"
    return json.loads(file.read_text()) if file.exists() else []
