"""Shared test helpers."""

import importlib
import pydoc_data.topics
from pathlib import Path

import pytest
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


def randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn afresh, biases and LayerNorm included, so each one's mapping shows in the logits:
    matrices ~ N(0, 1/fan_in) (fan_in: the second-last axis), vectors ~ N(0, 0.3²)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            std = param.shape[-2] ** -0.5 if param.dim() > 1 else 0.3
            param.copy_(std * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    return module


def required(module: str):
    """``module``, which requirements-test.txt installs: a test that needs it fails, never skips, where it is
    missing, so a green run always includes it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        pytest.fail(f"this test needs {module}, which requirements-test.txt installs: {error}")


def documentation() -> list[str]:
    """Python's documentation, topic by topic: the text the tests' tokenizers are trained on."""
    return [text for _, text in sorted(pydoc_data.topics.topics.items())]


def bpe_tokenizer(path: Path, size: int = 300, special: tuple[str, ...] = ()) -> Path:
    """A byte-level BPE tokenizer of ``size`` tokens (GPT-2's kind; ``special`` tokens first, as GPT-2's
    <|endoftext|>) trained with ``tokenizers`` on Python's documentation, saved at ``path``."""
    tokenizers = required("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=size, special_tokens=list(special),
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(documentation()[:300], trainer)
    tokenizer.save(str(path))
    return path


def gpt2(transformers, fields: dict, dtype=torch.float32, seed: int = 0):
    """A ``transformers`` GPT-2 of the GPT2Config ``fields``, every weight drawn afresh (``randomize``), no dropout."""
    config = transformers.GPT2Config(**fields, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return randomize(transformers.GPT2LMHeadModel(config), seed).to(dtype).eval()
