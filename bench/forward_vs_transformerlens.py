"""mechlib's forward beside TransformerLens 3.9's HookedTransformer, at GPT-2-small's shape, on the same weights.

Runs in the TransformerLens venv (see bench/composition_vs_transformerlens.py for how to make it):
    .bench-venv/bin/python -m bench.forward_vs_transformerlens [--repeats 7]
The model: 12 layers, d_model 768, 12 heads of 64, d_mlp 3072, LayerNorm, exact GELU, vocab 50,257, context
128 (GPT-2's 1,024 only lengthens W_pos, which a 128-token forward never reads; random weights from mechlib, moved across by ``mechlib.interop.to_transformer_lens``); a batch of 4 × 128
tokens; torch's default threads. The two alternate call by call, so machine noise hits both alike; the script
prints the median of each, the ratio, and the largest logit difference. Goals: the plain forward ≤ 0.8× TL's;
``run_with_cache`` exact and no slower than TL's (its cache holds TL's keys, so it computes the formula path).
"""

import argparse
import statistics
import sys
import time

import torch

from mechlib.config import ModelConfig
from mechlib.interop import to_transformer_lens
from mechlib.model import Transformer

CFG = ModelConfig(n_layers=12, d_model=768, n_heads=12, d_vocab=50257, n_ctx=128, d_mlp=3072, normalization="LN")
BATCH, POSITIONS = 4, 128


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats
    ours = Transformer(CFG).eval().requires_grad_(False)
    theirs = to_transformer_lens(ours).eval()
    tokens = torch.randint(0, CFG.d_vocab, (BATCH, POSITIONS), generator=torch.Generator().manual_seed(0))
    calls = {"forward": (lambda: ours(tokens), lambda: theirs(tokens)),
             "run_with_cache": (lambda: ours.run_with_cache(tokens), lambda: theirs.run_with_cache(tokens))}
    print(f"$ .bench-venv/bin/python -m bench.forward_vs_transformerlens {' '.join(sys.argv[1:])}".rstrip())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; GPT-2-small shape, batch {BATCH} × {POSITIONS}; "
          f"median of {repeats} interleaved calls after one warm-up each")
    with torch.inference_mode():
        for name, (mine, reference) in calls.items():
            times: dict[str, list[float]] = {"mechlib": [], "TransformerLens": []}
            for i in range(repeats + 1):
                for who, call in (("mechlib", mine), ("TransformerLens", reference)):
                    start = time.perf_counter()
                    out = call()
                    if i:
                        times[who].append(time.perf_counter() - start)
                    logits = out[0] if isinstance(out, tuple) else out
                    if who == "mechlib":
                        our_logits = logits
            difference = float((our_logits - logits).abs().max())
            ours_ms, theirs_ms = (statistics.median(times[w]) * 1e3 for w in ("mechlib", "TransformerLens"))
            print(f"{name:15s} mechlib {ours_ms:7.1f} ms, TransformerLens {theirs_ms:7.1f} ms: {ours_ms / theirs_ms:.2f}× "
                  f"TL's time; max |logit difference| {difference:.1e}")


if __name__ == "__main__":
    main()
