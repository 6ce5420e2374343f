"""mechlib: the mathematics behind Addition Machines, importable from a notebook (no Streamlit).

    from mechlib import Transformer, ModelConfig, zoo, circuits, induction

Importing it applies the device and precision policy once (see ``mechlib.device``). The model classes
load with the package; every module (``mechlib.zoo``, ``mechlib.circuits``, …) loads on first use, so
``import mechlib`` costs about what ``import torch`` does (plotly, for one, loads only with ``figures``).
"""

import importlib
import pkgutil

from mechlib import device  # noqa: F401  (first: sets device, IEEE float32 matmuls and thread count once)
from mechlib.config import ModelConfig
from mechlib.lstm import LSTM, LSTMConfig
from mechlib.model import Transformer

__version__ = "0.2.0"  # the one place the version is written; pyproject.toml reads it

MODULES = sorted(module.name for module in pkgutil.iter_modules(__path__))
__all__ = ["LSTM", "LSTMConfig", "ModelConfig", "Transformer", *MODULES]


def __getattr__(name: str):
    """``mechlib.zoo`` and ``from mechlib import zoo``: a module imported on first use (PEP 562)."""
    if name in MODULES:
        return importlib.import_module(f"mechlib.{name}")
    raise AttributeError(f"module 'mechlib' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
