"""The class's models folder: Hugging Face GPT-2 directories (``config.json``, ``model.safetensors``,
``tokenizer.json``) and mechlib checkpoints (``*.safetensors``) a teacher copied onto the server before class;
nothing is downloaded. The sidebar lists them with their sizes; one is loaded when chosen, after its config alone
(not its weights) says the memory it needs and the budget admits it, then shared like a zoo model.

The setting: the environment variable ``ADDITION_MODELS``, else the Streamlit secret ``models_folder``
(``.streamlit/secrets.toml``): a folder's path. Unset, the sidebar lists no folder."""

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from classroom.admission import MEMORY, require_budget
from mechlib import hf, io, zoo
from mechlib.config import ModelConfig
from mechlib.model import Transformer

__all__ = ["SETTING", "FolderError", "Entry", "folder", "entries", "find", "config", "admit", "load"]

SETTING = "ADDITION_MODELS"
MAX_ENTRIES = 50  # listed at most, by name: the sidebar is a list a teacher reads, not a file browser


class FolderError(ValueError):
    """A folder entry that cannot be used; the message says why."""


@dataclass(frozen=True)
class Entry:
    """One model in the folder: ``name`` is the directory's or the file's name, ``kind`` "Hugging Face" or
    "mechlib"."""

    name: str
    kind: str
    path: Path
    n_bytes: int   # every file of it, together

    @property
    def label(self) -> str:
        """The sidebar's name for it, which a link carries: "folder: gpt2"."""
        return f"folder: {self.name}"

    @property
    def stamp(self) -> tuple[int, int]:
        """(size, modification time) of its weights: a model replaced on disk is a new model."""
        weights = zoo.folder_weights(self.path).stat()
        return weights.st_size, weights.st_mtime_ns


def folder() -> Path | None:
    """The folder the setting names (the environment first, then Streamlit's secrets), or None."""
    named = os.environ.get(SETTING, "").strip()
    if not named:
        try:
            import streamlit as st
            named = str(st.secrets.get("models_folder", "")).strip()
        except Exception:  # no secrets file, or not under Streamlit: the setting is the environment's alone
            named = ""
    return Path(named).expanduser() if named else None


def entries() -> list[Entry]:
    """The folder's models by name (``MAX_ENTRIES`` at most). Empty when no folder is named or it cannot be read."""
    where = folder()
    try:
        paths = sorted(where.iterdir()) if where else []
    except OSError:
        return []
    return [entry for entry in map(_entry, paths) if entry is not None][:MAX_ENTRIES]


def find(name: str) -> Entry | None:
    """The folder's model named ``name`` (a name the sidebar listed), read again from disk without listing the
    folder; None when it is gone or ``name`` is not a plain name in it."""
    where = folder()
    return _entry(where / name) if where and name == Path(name).name and name not in ("", ".", "..") else None


def _entry(path: Path) -> Entry | None:
    """``path`` as a model: a directory holding ``config.json`` and ``model.safetensors``, or a ``.safetensors``
    file; None for anything else, or what was removed or became unreadable while read."""
    try:
        if path.is_dir() and (path / "config.json").is_file() and (path / "model.safetensors").is_file():
            return Entry(path.name, "Hugging Face", path, sum(f.stat().st_size for f in path.iterdir() if f.is_file()))
        if path.is_file() and path.suffix == ".safetensors":
            return Entry(path.name, "mechlib", path, path.stat().st_size)
    except OSError:
        pass
    return None


def config(entry: Entry) -> ModelConfig:
    """The entry's transformer config, from its config alone (a checkpoint's header), before any weight is read.
    Raises ``FolderError``."""
    return _config(entry, entry.stamp)


@functools.lru_cache(maxsize=64)
def _config(entry: Entry, stamp: tuple[int, int]) -> ModelConfig:
    try:
        if entry.kind == "Hugging Face":
            return hf.read_config(entry.path)
        if entry.n_bytes > io.MAX_BYTES:
            raise FolderError(f"{entry.name} is {entry.n_bytes / 1e6:,.0f} MB; a mechlib checkpoint is at most "
                              f"{io.MAX_BYTES / 1e6:,.0f} MB")
        cfg = io.config(entry.path.read_bytes())
    except (hf.HFError, io.CheckpointError, OSError) as error:
        raise FolderError(f"{entry.name}: {error}") from None
    if not isinstance(cfg, ModelConfig):
        raise FolderError(f"{entry.name} is an LSTM checkpoint; the pages study transformers, and the LSTM page uses "
                          "its own models")
    return cfg


def admit(entry: Entry) -> ModelConfig:
    """The entry's config, once the budget admits its weights' memory (read off the config, before any weight).
    Raises ``FolderError`` or ``admission.BudgetError``."""
    cfg = config(entry)
    require_budget(cfg.estimate_mb(batch=0), _what(entry, cfg))
    return cfg


def load(entry: Entry) -> Transformer:
    """The shared read-only model of ``entry``: ``admit``-ted first, its weights' memory held while it is built.
    Raises ``FolderError`` or ``admission.BudgetError``."""
    cfg = admit(entry)
    try:
        return zoo.from_folder(entry.path, lambda: MEMORY.hold(cfg.estimate_mb(batch=0), _what(entry, cfg)))
    except (hf.HFError, io.CheckpointError, OSError) as error:
        raise FolderError(f"{entry.name}: {error}") from None


def _what(entry: Entry, cfg: ModelConfig) -> str:
    return f"{entry.label} ({cfg.n_params():,} parameters)"
