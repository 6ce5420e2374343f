"""How fast Shapley values and token attributions run on 2 CPU cores, beside issue 40's goals.

Run from the repository root: .venv/bin/python -m bench.shapley_speed [--repeats 3] [--threads 2] [--record]
Each figure is the wall time of one call of the whole experiment (its game built, its forward passes, its values
combined), the median and the fastest of ``--repeats`` calls after a warm-up call, at ``--threads`` torch threads:

1. exact head Shapley values on attn-only-2l, both games (``shapley.shapley``): 9 players (8 heads and the direct
   path), 2^9 = 512 coalitions per game, the total game's 512 forward passes in one batch, on the induction task's
   repeated sequence (``shapley.induction_prompt``, seed 0). Goal: ≤ 1 s.
2. token attributions on a 20-token prompt of gelu-2l (<bos> and the first held-out sentence of 20 words it reads
   whole: 20 players), the log-probability of its top next token (``token_attribution``): Shapley values sampled by
   Captum (25 orderings), Kernel SHAP and LIME (Captum, 500 coalitions each). Goal: ≤ 5 s each. Exact values would
   take 2^20 = 1,048,576 forward rows: not run.
3. sampled head Shapley values on a random model of GPT-2 small's shape (12 layers × 12 heads, d_model 768, d_vocab
   50,257, n_ctx 1,024, GELU MLPs, LayerNorm): 157 players (144 heads, 12 MLPs, the direct path), an 8-token prompt
   of random ids, ``--orderings`` orderings (6: 6 · 156 + 2 = 938 coalitions and the full run), both games, with a
   standard error per value. Goal: ≤ 20 s.

The machine's load average is printed with the figures: its CPU is shared, and other work on it slows everything here,
two threads far more than one (many small forward passes, each two threads waiting on each other: on this machine at
a load average of 7, Captum's 25 orderings took 0.2 s on one thread and 4.5–19 s on two; at 8 to 13, the GPT-2-shaped
game took 16 s on one thread and 94–121 s on two, against 14 s on two in a quieter minute). The fastest call is the
figure least slowed by the neighbours; the goals are for the machine alone.
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from bench import results
from mechlib import data, shapley, token_attribution, zoo
from mechlib.config import ModelConfig

THREADS = 2
GPT2_SHAPE = ModelConfig(n_layers=12, d_model=768, n_heads=12, d_vocab=50_257, n_ctx=1024, d_mlp=3072,
                         normalization="LN", act_fn="gelu_new")
PROMPT_WORDS, GPT2_PROMPT = 20, 8
GOALS_S = {"heads": 1.0, "tokens": 5.0, "sampled": 20.0}


def timed(call: Callable[[], object], repeats: int, warm_up: Callable[[], object] | None = None
          ) -> tuple[tuple[float, float], object]:
    """(median, fastest) wall time of ``repeats`` calls after a warm-up call (``warm_up``, else ``call``), and the
    last call's result."""
    (warm_up or call)()
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return (statistics.median(times), min(times)), result


def verdict(seconds: tuple[float, float], goal: float) -> str:
    median, fastest = seconds
    return (f"median {median:.2f} s, fastest {fastest:.2f} s (goal ≤ {goal:g} s: "
            f"{'met' if median <= goal else 'met by the fastest' if fastest <= goal else 'MISSED'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--orderings", type=int, default=6, help="orderings sampled on the GPT-2-shaped model")
    parser.add_argument("--record", action="store_true", help="add this run's figures to bench/RESULTS.md's log")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"$ .venv/bin/python -m bench.shapley_speed {' '.join(sys.argv[1:])}".rstrip())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the start; {args.repeats} calls after a warm-up")
    figures = []

    model = zoo.load("attn-only-2l")
    prompt = shapley.induction_prompt(model.cfg.d_vocab, model.cfg.n_ctx, seed=0)
    seconds, heads = timed(lambda: shapley.shapley(model, prompt.ids, prompt.metric), args.repeats)
    print(f"exact head Shapley, attn-only-2l, {len(heads.players)} players (8 heads + the direct path), "
          f"{heads.total.evaluations} coalitions × 2 games, {heads.forward_passes} forward rows of {len(prompt.ids)} "
          f"tokens: {verdict(seconds, GOALS_S['heads'])}; top: {heads.top_direct} (direct), {heads.top_total} (total)")
    figures.append(f"exact heads attn-only-2l {seconds[0]:.2f} s ({heads.forward_passes} rows)")

    text = data.covered_prompts(zoo.load("gelu-2l").tokenizer, 1, (PROMPT_WORDS, PROMPT_WORDS))[0]
    words = zoo.load("gelu-2l")
    ids = data.prompt_ids(words.tokenizer, text, words.cfg.n_ctx).ids
    print(f"token attributions, gelu-2l, {len(ids) - 1} tokens after <bos>: {text!r}")
    for method in ("shapley sampling", "kernel shap", "lime"):
        call = lambda method=method: token_attribution.token_attribution(words, ids, method=method)
        seconds, result = timed(call, args.repeats)
        print(f"  {method} ({result.library}, {result.samples} {'orderings' if 'shapley' in method else 'coalitions'}): "
              f"{result.evaluations} forward rows, {verdict(seconds, GOALS_S['tokens'])}; top token {result.top!r}")
        figures.append(f"{method} 20 tokens {seconds[0]:.2f} s ({result.evaluations} rows)")

    big = zoo.random_model(GPT2_SHAPE)
    ids = data.random_ids(GPT2_SHAPE.d_vocab, GPT2_PROMPT, seed=0, bos=GPT2_SHAPE.d_vocab - 1)
    run = lambda orderings: shapley.shapley(big, ids, shapley.Metric(), permutations=orderings)
    seconds, sampled = timed(lambda: run(args.orderings), args.repeats, lambda: run(2))
    errors = sampled.total.standard_errors
    print(f"sampled head Shapley, random GPT-2-small shape, {len(sampled.players)} players, {args.orderings} orderings, "
          f"{sampled.forward_passes} forward rows of {GPT2_PROMPT} tokens: {verdict(seconds, GOALS_S['sampled'])}; "
          f"total game's standard errors: median {np.median(errors):.3f}, max {errors.max():.3f} (v(N) − v(∅) = "
          f"{sampled.total.full - sampled.total.empty:.2f}); efficiency {'holds' if sampled.passed else 'FAILS'}")
    figures.append(f"sampled GPT-2 shape {seconds[0]:.1f} s ({sampled.forward_passes} rows, median SE {np.median(errors):.3f})")

    line = f"median wall, {args.threads} threads, load {os.getloadavg()[0]:.1f}: " + " · ".join(figures)
    name = f"shapley_speed --threads {args.threads} --orderings {args.orderings}"
    if recorded := results.last(name):
        print(f"  last recorded (bench/RESULTS.md): {recorded}")
    if args.record:
        results.record(name, line)


if __name__ == "__main__":
    main()
