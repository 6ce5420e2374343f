"""ModelConfig: the sizes of a transformer, validated with messages that name the field.

Field names follow TransformerLens's ``HookedTransformerConfig`` so a config reads the same in both.
"""

import dataclasses
import json
from dataclasses import dataclass
from typing import Self

__all__ = ["JsonConfig", "ModelConfig", "divisors", "whole", "read_json"]

NORMALIZATIONS = ("LN", None)
ACT_FNS = ("gelu", "gelu_new")  # exact GELU; GPT-2's tanh approximation of it
POSITIONALS = ("standard", "shortformer")
LIMITS = {"n_layers": (0, 48), "d_model": (1, 8192), "n_heads": (1, 256), "d_head": (1, 1024),
          "d_vocab": (2, 200_000), "n_ctx": (1, 8192), "d_mlp": (1, 32768)}


MAX_DIGITS = 30  # a config number longer than this is refused before Python converts it (2**63 has 19 digits)


def whole(name: str, value: object, low: int, high: int) -> None:
    """The one check of a config's whole-number field: an int (not a bool) from ``low`` to ``high``, else a
    ``ValueError`` that names the field and the range to choose from."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name}={_quoted(value)} must be a whole number; choose {name} between {low} and {high}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is out of range; choose {name} between {low} and {high}")


def _quoted(value: object, most: int = 40) -> str:
    """``repr(value)`` cut to ``most`` characters, for a message."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 1] + "…"


def _number(text: str) -> int:
    """json.loads' reader of whole numbers, refusing absurd digit counts with our own sentence (Python's own
    limit, 4,300 digits, advises changing an interpreter setting)."""
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"the config holds a number of {len(text.lstrip('-')):,} digits; sizes have at most "
                         f"{MAX_DIGITS}")
    return int(text)


def read_json(text: str | bytes):
    """JSON whose whole numbers are refused past ``MAX_DIGITS`` digits, with a sentence: a config's text, read before
    anything is built from it. Raises ``ValueError`` (``json.JSONDecodeError`` for text that is not JSON)."""
    return json.loads(text, parse_int=_number)


def divisors(n: int) -> list[int]:
    """The positive divisors of n, ascending: the head counts a d_model of n allows."""
    return [k for k in range(1, n + 1) if n % k == 0]


class JsonConfig:
    """A config dataclass written to and read from JSON (a checkpoint's metadata), unknown fields refused."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Self:
        fields = read_json(text)
        if not isinstance(fields, dict):
            raise ValueError("the config is not a JSON object")
        unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"the config has unknown fields: {', '.join(sorted(unknown))}")
        return cls(**fields)


@dataclass(frozen=True, kw_only=True)
class ModelConfig(JsonConfig):
    """Sizes and switches of a transformer (TransformerLens names).

    ``d_head`` defaults to ``d_model // n_heads``; ``d_mlp=None`` means attention-only;
    ``normalization`` is ``"LN"`` or ``None``; ``positional="shortformer"`` adds the positional
    embedding to the queries' and keys' input only, never to the residual stream; ``act_fn`` is the
    MLP's GELU: ``"gelu"`` (exact) or ``"gelu_new"`` (GPT-2's tanh approximation).
    """

    n_layers: int
    d_model: int
    n_heads: int
    d_vocab: int
    n_ctx: int
    d_head: int | None = None
    d_mlp: int | None = None
    normalization: str | None = None
    positional: str = "standard"
    act_fn: str = "gelu"
    seed: int = 0

    def __post_init__(self) -> None:
        for name, (low, high) in LIMITS.items():
            value = getattr(self, name)
            if value is None and name in ("d_head", "d_mlp"):
                continue
            whole(name, value, low, high)
        whole("seed", self.seed, 0, 2**63 - 1)
        if self.d_head is None:
            if self.d_model % self.n_heads:
                allowed = ", ".join(str(k) for k in divisors(self.d_model)[:12])
                more = ", …" if len(divisors(self.d_model)) > 12 else ""
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                    f"choose n_heads in {{{allowed}{more}}} or set d_head explicitly"
                )
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization={self.normalization!r} is not known; choose 'LN' or None")
        if self.act_fn not in ACT_FNS:
            raise ValueError(f"act_fn={self.act_fn!r} is not known; choose 'gelu' or 'gelu_new'")
        if self.positional not in POSITIONALS:
            raise ValueError(f"positional={self.positional!r} is not known; choose 'standard' or 'shortformer'")

    @property
    def attn_only(self) -> bool:
        return self.d_mlp is None

    def n_params(self) -> int:
        """Number of learned numbers (weights and biases)."""
        d, h, dh, per_layer = self.d_model, self.n_heads, self.d_head, 0
        per_layer += 4 * h * d * dh + 3 * h * dh + d          # W_Q, W_K, W_V, W_O, b_Q/K/V, b_O
        if not self.attn_only:
            per_layer += 2 * d * self.d_mlp + self.d_mlp + d  # W_in, W_out, b_in, b_out
        if self.normalization == "LN":
            per_layer += 2 * d * (1 if self.attn_only else 2)
        final_ln = 2 * d if self.normalization == "LN" else 0
        return self.d_vocab * d + self.n_ctx * d + self.n_layers * per_layer + final_ln + d * self.d_vocab + self.d_vocab

    def estimate_mb(self, batch: int, bytes_per_number: int = 4) -> float:
        """Weights, causal masks, and the activations ``run_with_cache`` keeps for ``batch`` full-length sequences,
        in MB: what building the model and running it on full contexts holds."""
        masks = self.n_layers * self.n_ctx**2     # the causal-mask buffers (one byte each)
        return (self.n_params() * bytes_per_number + masks) / 1e6 + self.activations_mb(batch, self.n_ctx,
                                                                                          bytes_per_number)

    def activations_mb(self, batch: int, positions: int, bytes_per_number: int = 4) -> float:
        """The activations ``run_with_cache`` keeps for ``batch`` sequences of ``positions`` tokens, in MB: what an
        experiment adds to a model already built (its weights are held once, by whoever built it)."""
        b, p, d, h, dh = batch, positions, self.d_model, self.n_heads, self.d_head
        per_layer = 4 * b * p * d                 # resid_pre, attn_out, resid_mid/post, normalized input
        per_layer += 4 * b * p * h * dh           # q, k, v, z
        per_layer += 2 * b * h * p * p            # attn_scores, pattern
        per_layer += b * p * h * d                # per-head results
        if not self.attn_only:
            per_layer += 2 * b * p * self.d_mlp + b * p * d
        return (2 * b * p * d + self.n_layers * per_layer + b * p * self.d_vocab) * bytes_per_number / 1e6
