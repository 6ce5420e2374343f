"""Shared test helpers."""

import torch

from mechlib.config import ModelConfig
from mechlib.model import Transformer


def with_random_biases(model: Transformer, seed: int = 11) -> Transformer:
    """Biases start at 0 and LayerNorm at w=1, b=0; randomise them so identities test every term."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.rsplit(".", 1)[-1].startswith("W_"):
                noise = torch.randn(param.shape, generator=g, dtype=param.dtype) * 0.3
                param.copy_(noise + (1.0 if name.endswith(".w") else 0.0))
    return model


def randomised(cfg: ModelConfig) -> Transformer:
    """A float64 model of ``cfg`` with random biases and LayerNorm parameters."""
    return with_random_biases(Transformer(cfg).double(), seed=5)
