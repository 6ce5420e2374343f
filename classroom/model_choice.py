"""The sidebar's model, named and typed: a ``ModelChoice`` of one of four kinds, which loads its shared read-only
model, says what it is, and writes the line of Python that loads it in a notebook. Every branch on the kind is here."""

from dataclasses import dataclass
from typing import Literal

from classroom import models_folder
from classroom.admission import MEMORY, BudgetError
from classroom.state.store import STORE, StoreError
from mechlib import zoo
from mechlib.config import ModelConfig
from mechlib.io import CheckpointError
from mechlib.model import Transformer

__all__ = ["ModelChoice", "ChoiceError"]

Kind = Literal["zoo", "random", "folder", "stored"]


class ChoiceError(Exception):
    """The chosen model cannot be opened now (gone from the folder or the store, over the budget, a bad file)."""


@dataclass(frozen=True)
class ModelChoice:
    """``kind`` and ``name``: "zoo" and a zoo name; "random" and a config's JSON (weights from its seed); "folder"
    and an entry of the class's models folder; "stored" and a store id (a trained or uploaded checkpoint, kept by
    the server's store). ``load`` gives the cache key, this choice made exact: a folder entry's path and the stamp
    of the files read (a file replaced is another model)."""

    kind: Kind
    name: str
    stamp: tuple[int, int] | None = None

    def load(self) -> tuple["ModelChoice", Transformer]:
        """(the cache key, the shared read-only model); raises ``ChoiceError``."""
        try:
            if self.kind == "zoo":
                return self, zoo.load(self.name)
            if self.kind == "random":
                cfg = self.config()
                return self, zoo.random_model(cfg, lambda: MEMORY.hold(cfg.estimate_mb(batch=0),
                                                                       f"a model of {cfg.n_params():,} parameters"))
            if self.kind == "folder":
                entry = models_folder.find(self.name)
                if entry is None:
                    raise models_folder.FolderError(f"{self.name} is no longer in the models folder")
                return ModelChoice("folder", str(entry.path), entry.stamp), models_folder.load(entry)
            return self, STORE.model(self.name)
        except (models_folder.FolderError, BudgetError, StoreError, CheckpointError) as error:
            raise ChoiceError(str(error)) from None

    def config(self) -> ModelConfig:
        """The random model's config (its JSON is its name)."""
        return ModelConfig.from_json(self.name)

    def where(self, label: str) -> str:
        """Where the model comes from, for the sidebar's description; ``label`` is the sidebar's name for it."""
        return {"zoo": "trained here, shipped with the app", "random": "random weights", "stored": label,
                "folder": f"{label} from the models folder"}[self.kind]

    def snippet_line(self) -> str:
        """Python that loads this model in a notebook (``name`` as ``load`` made it exact: a folder's path)."""
        if self.kind == "folder":  # the class's models folder: the same directory or file, where the notebook finds it
            return f"model = zoo.from_folder(Path({self.name!r}))  # from the class's models folder"
        if self.kind == "zoo":
            return f"model = zoo.load({self.name!r})"
        if self.kind == "random":
            return f"model = zoo.random_model(ModelConfig.from_json({self.name!r}))"
        return "model = zoo.from_checkpoint(open('model.safetensors', 'rb').read())[1]  # the model, downloaded"

    def snippet_imports(self) -> list[str]:
        """The imports ``snippet_line`` needs beyond mechlib's modules."""
        return {"random": ["from mechlib.config import ModelConfig"], "folder": ["from pathlib import Path"]}.get(
            self.kind, [])
