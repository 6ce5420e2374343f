"""composition_scores side by side with TransformerLens's all_composition_scores, on the same weights.

TransformerLens is not a dependency of the app: this script runs in its own environment (TransformerLens 3;
4.0 removed HookedTransformer).
    python3.11 -m venv .bench-venv && .bench-venv/bin/pip install torch==2.13.0 "transformer-lens<4"
    .bench-venv/bin/python -m bench.composition_vs_transformerlens
The same venv with pytest added (.bench-venv/bin/pip install pytest) runs mechlib.interop's tests:
    .bench-venv/bin/python -m pytest -q tests/unit/test_interop.py
A GPT-2-small-shaped random model (12 layers × 12 heads, d_model 768, d_head 64) is built by mechlib;
its state dict loads into a HookedTransformer unchanged (the same names). For modes Q, K and V the
script checks that the scores agree to 1e-5 and prints the best of 3 timings of each and the ratio.
"""

import time

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from mechlib import circuits
from mechlib.config import ModelConfig
from mechlib.model import Transformer


def best_of(fn, repeats: int = 3) -> tuple[float, torch.Tensor]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    cfg = ModelConfig(n_layers=12, d_model=768, n_heads=12, d_vocab=1000, n_ctx=64, seed=0)
    ours = Transformer(cfg).eval().requires_grad_(False)
    theirs = HookedTransformer(HookedTransformerConfig(
        n_layers=12, d_model=768, n_heads=12, d_head=64, d_vocab=1000, n_ctx=64, attn_only=True,
        normalization_type=None, positional_embedding_type="standard", device="cpu"))
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all(k.endswith(("IGNORE", "mask")) for k in missing), (missing, unexpected)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; state dict loaded into HookedTransformer "
          f"with no unexpected keys")
    for mode in "QKV":
        t_ours, mine = best_of(lambda: circuits.composition_scores(ours, mode))
        with torch.inference_mode():
            t_theirs, reference = best_of(lambda: theirs.all_composition_scores(mode))
        difference = float((mine - reference.to(mine.dtype)).abs().max())
        print(f"mode {mode}: mechlib {t_ours:.3f} s, TransformerLens {t_theirs:.3f} s, {t_theirs / t_ours:.1f}× faster; "
              f"max |difference| {difference:.1e} ({'agree' if difference <= 1e-5 else 'DISAGREE'} to 1e-5)")


if __name__ == "__main__":
    main()
