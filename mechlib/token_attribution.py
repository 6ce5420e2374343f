"""Token attributions (SHAP: Lundberg & Lee 2017; LIME: Ribeiro et al. 2016): which input tokens one prediction rests
on, exact over every coalition of tokens, or sampled and fitted by Captum's perturbation methods (``captum.attr``).

The players are the prompt's tokens after <bos> (<bos> always stays). A token is absent when its embedding is replaced
by a baseline embedding at its own position (its positional embedding stays): "unk", the embedding of the tokenizer's
<unk> (id 1 in mechlib's tokenizers, and in a model without one, whose random ids avoid 0 and 1; <|endoftext|> for a
byte-level BPE tokenizer, which has no unknown token), or "mean", the mean of W_E's rows. v(S) is a
``shapley.Metric`` at the last position with the tokens outside S absent: ``shapley``'s game over inputs instead of
components.

The methods:

- "shapley": exact, every one of the 2^n coalitions of tokens evaluated in batches and combined by
  ``shapley.exact_shapley`` (the head game's own formula, in float64): 2^n forward rows, for up to ``shapley.EXACT_MAX``
  tokens after <bos>;
- "shapley sampling": Captum's ``ShapleyValueSampling``, ``samples`` random orderings, one call per ordering (its
  own v(∅) and n rows: samples·(n + 1) rows), so each ordering's marginal contributions are known: φ is their mean
  and its standard error their standard deviation / √samples, as ``shapley.sampled_shapley``'s (Captum returns only
  the mean). Each ordering telescopes, so Σφ = v(N) − v(∅) holds for the estimate too;
- "kernel shap": Captum's ``KernelShap``, ``samples`` coalitions drawn with the Shapley kernel and fitted by least
  squares (scikit-learn's LinearRegression, Captum's default): an estimate of the Shapley values;
- "lime": Captum's ``Lime``, ``samples`` random coalitions weighted by an exponential kernel of the cosine distance
  between the perturbed and the prompt's embeddings, fitted by scikit-learn's Lasso (α = 0.01), Captum's defaults: a
  local linear surrogate's coefficients, not Shapley values.

Captum batches its perturbations as ``shapley.chunk_rows`` allows (``perturbations_per_eval``). Why Captum, and why not
for the exact values (each measured beside torch 2.13.0's CPU build in a fresh Python 3.11 venv): Captum 0.9.0 adds
184 MB with numpy and matplotlib (386 MB with the scikit-learn its LIME and Kernel SHAP fit with) against shap 0.51.0's
577 MB (numba and llvmlite, scipy, scikit-learn, pandas); ``import captum.attr`` takes 0.3–0.65 s after torch against
shap's 1.4–2.7 s; it perturbs torch tensors on the model's device in batches, where shap hands numpy masks to a
callback; and it has LIME, which shap wraps from another package. But Captum's exact ``ShapleyValues`` walks all n!
orderings (n·n! + 1 rows: 4,321 for 6 tokens, 3.3 million for 9), and its Shapley methods add up attributions in
float32 whatever the input's dtype (``dtype=torch.float`` in captum/attr/_core/shapley_value.py): on a float64 model its
exact values missed shap's ``ExactExplainer`` by 1.3e-6. So the exact values come from every coalition, and
shap stays in the tests, where its ``ExactExplainer`` checks them (tests/unit/test_token_attribution.py); an efficiency
check of Captum's Shapley estimates holds them to float32's tolerance.

Every call reports the forward rows it ran (counted, beside the count known before it runs: ``token_evaluations``)
and its time.

Captum draws from torch's global generator (``torch.randperm`` for an ordering, ``torch.bernoulli`` and
``torch.multinomial`` for LIME's and Kernel SHAP's coalitions) and takes no generator of its own. A call seeds that
generator inside ``torch.random.fork_rng``, which saves the process-wide state and restores it at the end; two
Streamlit sessions inside it at once would draw from each other's stream (and restore each other's state), so a seed
would no longer give its values. ``CAPTUM_LOCK`` lets one Captum call at a time hold the generator, its forward passes
included: a second session waits for the first (the app shares the results of equal settings, so it often finds them
computed).
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version

import captum.attr
import numpy as np
import torch
from torch import Tensor

from mechlib.checks import EFFICIENCY_TOLERANCE, Check, compare, tolerance_for
from mechlib.data import token_labels
from mechlib.device import costs
from mechlib.model import Transformer
from mechlib.shapley import (
    EXACT_MAX,
    Metric,
    chunk_rows,
    coalitions,
    exact_shapley,
    final_norm,
)

__all__ = ["CAPTUM", "CAPTUM_LOCK", "METHODS", "TOKEN_BASELINES", "SAMPLES", "baseline_embedding", "token_value",
           "TokenAttribution", "token_evaluations", "token_attribution_mb", "token_attribution"]

CAPTUM = {"shapley sampling": captum.attr.ShapleyValueSampling, "kernel shap": captum.attr.KernelShap,
          "lime": captum.attr.Lime}
METHODS = ("shapley", *CAPTUM)
TOKEN_BASELINES = ("unk", "mean")
SAMPLES = {"shapley sampling": 25, "kernel shap": 500, "lime": 500}  # orderings, or coalitions, unless told
_SHAPLEY = ("shapley", "shapley sampling")  # the methods whose values are Shapley values (efficiency holds)
CAPTUM_LOCK = threading.Lock()  # held around every seeded Captum call: torch's global generator is one per process


def baseline_embedding(model: Transformer, baseline: str) -> tuple[Tensor, str]:
    """What an absent token's embedding becomes [d_model], and what it is in words."""
    W_E = model.embed.W_E
    if baseline == "mean":
        return W_E.mean(0), "the mean token embedding (the mean of W_E's rows)"
    if baseline != "unk":
        raise ValueError(f"baseline={baseline!r}; choose one of {', '.join(TOKEN_BASELINES)}")
    tokenizer = model.tokenizer
    token = 1 if tokenizer is None else tokenizer.unk_id if tokenizer.unk_id is not None else tokenizer.bos_id
    return W_E[token], f"the embedding of token {token} ({token_labels(tokenizer, [token])[0]})"


def token_value(model: Transformer, tokens: Tensor, metric: Metric, rows: list[int]) -> Callable[[Tensor], Tensor]:
    """v of embeddings x [k n d_model] standing for the n tokens after <bos> of tokens [1 pos]: the metric at the
    last position, each row one forward pass with hook_embed patched [k]. Appends each call's k to ``rows``."""
    first = model.embed.W_E[tokens[0, :1]]                                      # [1 d_model]: <bos>'s embedding
    everywhere = torch.ones((), dtype=torch.bool, device=first.device)

    def value(x: Tensor) -> Tensor:
        rows.append(len(x))
        embedded = torch.cat([first.expand(len(x), 1, -1), x], 1)               # [k pos d_model]
        resid = model(tokens.expand(len(x), -1), patch={"hook_embed": (everywhere, embedded)},
                      stop_at_layer=model.cfg.n_layers)[:, -1]                  # [k d_model]
        return metric.score(model, final_norm(model, resid))
    return value


@dataclass(frozen=True)
class TokenAttribution:
    """One method's attribution of a prediction to the prompt's tokens after <bos>."""

    ids: tuple[int, ...]
    labels: tuple[str, ...]    # the players: each token after <bos>, readable
    values: np.ndarray         # [token] its attribution
    standard_errors: np.ndarray | None  # [token] sampled orderings' standard errors; zeros when exact; None for Kernel
                                        # SHAP and LIME, whose values are one regression's fit, not a mean of samples
    method: str                # one of METHODS
    library: str               # what computed the values: "captum 0.9.0", or mechlib.shapley's exact formula
    samples: int | None        # orderings or coalitions drawn; None when exact
    baseline: str              # what an absent token's embedding is, in words
    metric: str                # the metric, in words
    full: float                # v(N): the metric on the prompt
    empty: float               # v(∅): every token after <bos> absent
    evaluations: int           # forward rows run, counted: every coalition's (exact), or Captum's and the two above
    seconds: float             # wall time of the call
    efficiency: Check | None   # Σφ against v(N) − v(∅) for the Shapley methods; None for Kernel SHAP and LIME

    @property
    def top(self) -> str:
        """The token with the largest attribution."""
        return self.labels[int(np.argmax(self.values))]


def _samples(method: str, samples: int | None) -> int | None:
    if method not in METHODS:
        raise ValueError(f"method={method!r}; choose one of {', '.join(METHODS)}")
    k = None if method == "shapley" else samples or SAMPLES[method]
    if method == "shapley sampling" and k < 2:
        raise ValueError(f"samples={k}: a standard error needs two orderings at least")
    return k


def token_evaluations(model: Transformer, ids: tuple[int, ...], metric: Metric | None = None, method: str = "shapley sampling",
                      baseline: str = "unk", samples: int | None = None, seed: int = 0) -> int:
    """The forward rows ``token_attribution`` with these arguments runs, known before it runs (a caller may refuse a
    million): 2^n exact; Captum's (samples·(n + 1) for sampled orderings, one call each; samples for Kernel SHAP
    and LIME) and 2 for v(N) and v(∅)."""
    n, k = len(ids) - 1, _samples(method, samples)
    if method == "shapley":
        return 2**n
    return 2 + (k * (n + 1) if method == "shapley sampling" else k)


def token_attribution_mb(model: Transformer, ids: tuple[int, ...], *_, **__) -> float:
    """What ``token_attribution`` holds beside the weights, in MB: one batch of perturbed prompts' forward."""
    return model.cfg.activations_mb(chunk_rows(model, len(ids)), len(ids))


def _captum(method: str, value: Callable[[Tensor], Tensor], x: Tensor, absent: Tensor, samples: int, batch: int,
            seed: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Captum's ``method`` on the tokens' embeddings x [1 n d_model], absent ones replaced by ``absent``
    [d_model], its draws from ``seed`` under CAPTUM_LOCK: (values [n], standard errors [n] or None). Sampled
    orderings run one Captum call each, so each ordering's values are known."""
    n = x.shape[1]
    features = torch.arange(n, device=x.device)[None, :, None].expand_as(x).contiguous()  # [1 n d_model]
    explainer = CAPTUM[method](value)
    run = lambda count: explainer.attribute(x, baselines=absent.expand_as(x), feature_mask=features,
                                            n_samples=count, perturbations_per_eval=batch)[0, :, 0]  # [n]
    with CAPTUM_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if method != "shapley sampling":
            return run(samples).double().cpu().numpy(), None
        each = torch.stack([run(1) for _ in range(samples)]).double().cpu()     # [ordering n]
    return each.mean(0).numpy(), (each.std(0) / samples**0.5).numpy()


@costs(token_attribution_mb, "token attributions by perturbing the prompt")
@torch.inference_mode()
def token_attribution(model: Transformer, ids: tuple[int, ...], metric: Metric | None = None,
                      method: str = "shapley sampling", baseline: str = "unk", samples: int | None = None,
                      seed: int = 0) -> TokenAttribution:
    """Each token's attribution (after <bos>) of the prediction at the last of ``ids`` by ``method`` (one of
    METHODS; ``metric`` by default: the log-probability of the model's top token), its absent tokens' embedding
    ``baseline``, Captum's draws from ``seed``."""
    if len(ids) < 2:
        raise ValueError("a prompt needs a token after <bos> to attribute to")
    start, k = time.perf_counter(), _samples(method, samples)
    if method == "shapley" and len(ids) - 1 > EXACT_MAX:
        raise ValueError(f"exact values take 2^n forward rows: at most {EXACT_MAX} tokens after <bos>, not "
                         f"{len(ids) - 1}; sample orderings instead (method='shapley sampling')")
    tokens, rows = torch.tensor([ids], device=model.embed.W_E.device), []
    metric = (metric or Metric()).resolved(model(tokens)[0, -1])
    absent, words = baseline_embedding(model, baseline)
    value = token_value(model, tokens, metric, rows)
    x = model.embed.W_E[tokens[0, 1:]][None]                                    # [1 n d_model]
    n, batch = x.shape[1], chunk_rows(model, len(ids))
    if method == "shapley":
        present = coalitions(n).to(x.device)[:, :, None]                        # [2^n n 1]
        v = torch.cat([value(torch.where(chunk, x, absent)) for chunk in present.split(batch)]).double().cpu()
        values, full, empty, library = exact_shapley(v.numpy(), n), float(v[-1]), float(v[0]), "mechlib.shapley"
        errors, tolerance = np.zeros(n), EFFICIENCY_TOLERANCE[str(x.dtype).removeprefix("torch.")]
    else:
        values, errors = _captum(method, value, x, absent, k, batch, seed)
        full, empty = value(torch.cat([x, absent.expand_as(x)])).double().cpu().tolist()
        library, tolerance = f"captum {version('captum')}", tolerance_for(torch.float32)  # Captum adds in float32
    efficiency = None
    if method in _SHAPLEY:
        efficiency = compare(torch.tensor([values.sum()], dtype=torch.float64),
                             torch.tensor([full - empty], dtype=torch.float64), tolerance)
    return TokenAttribution(tuple(ids), tuple(token_labels(model.tokenizer, ids[1:])), values, errors, method, library,
                            k, words, metric.label, full, empty, sum(rows), time.perf_counter() - start, efficiency)
