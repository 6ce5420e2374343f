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
from classroom.setting import setting
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
    """The folder the setting names, or None."""
    named = setting(SETTING, "models_folder")
    return Path(named).expanduser() if named else None


def entries() -> list[Entry]:
    """The folder's models by name (``MAX_ENTRIES`` at most). Empty when no folder is named or it cannot be read.
    A page run asks for them every time: the folder is listed once per change of its modification time (an entry
    added, removed or renamed), each run costs one stat whatever the folder holds (a folder of 10,000 entries
    listed on every run made every page 3 s slower)."""
    where = folder()
    try:
        changed = where.stat().st_mtime_ns if where else None
    except OSError:
        return []
    return list(_listing(where, changed)) if where else []


@functools.lru_cache(maxsize=4)
def _listing(where: Path, changed: int) -> tuple[Entry, ...]:
    """The first ``MAX_ENTRIES`` models of the folder ``where`` as it was at modification time ``changed``, by
    name."""
    try:
        names = sorted(os.listdir(where))
    except OSError:
        return ()
    found = []
    for name in names:
        if (entry := _entry(where / name)) is not None:
            found.append(entry)
            if len(found) == MAX_ENTRIES:
                break
    return tuple(found)


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
    if entry.kind == "mechlib" and entry.n_bytes > io.MAX_BYTES:
        raise FolderError(f"{entry.name} is {entry.n_bytes / 1e6:,.0f} MB; a mechlib checkpoint is at most "
                          f"{io.MAX_BYTES / 1e6:,.0f} MB")
    try:
        cfg = hf.read_config(entry.path) if entry.kind == "Hugging Face" else io.config(entry.path.read_bytes())
    except (hf.HFError, io.CheckpointError, OSError) as error:
        why = _sentence(entry, error)
    else:
        why = None
    if why is not None:  # raised outside the handler: the refused file's error and its frames are not kept
        raise FolderError(why)
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
    Raises ``FolderError`` (a sentence naming the entry and what is wrong with it, never a path of the server's
    disk) or ``admission.BudgetError``. A refused load keeps nothing: the error is raised outside the handler, so
    neither the half-built model nor the frames that held it outlive the refusal."""
    cfg = admit(entry)
    try:
        return zoo.from_folder(entry.path, lambda: MEMORY.hold(cfg.estimate_mb(batch=0), _what(entry, cfg)))
    except (hf.HFError, io.CheckpointError, OSError) as error:
        why = _sentence(entry, error)
    raise FolderError(why)


def _sentence(entry: Entry, error: Exception) -> str:
    """``error`` about ``entry`` as the sentence a student reads: the entry's name, then why; an operating system's
    error by its reason (its message names the file's path on the server's disk, which no student sees)."""
    why = (error.strerror or type(error).__name__) if isinstance(error, OSError) else str(error)
    return f"{entry.name}: {why.replace(str(entry.path), entry.name)}"


def _what(entry: Entry, cfg: ModelConfig) -> str:
    return f"{entry.label} ({cfg.n_params():,} parameters)"
