"""How fast induction heads form from scratch on 2 CPU cores (the classroom's favourite moment).

Run from the repository root: .venv/bin/python -m bench.induction_speed [--seeds 5]
Trains a two-layer attention-only model (no LayerNorm) on random tokens with a repeated segment
of varying length and start, evaluates every 25 steps, and stops when the best induction score
(measured at a segment length never trained on) reaches 0.9. Prints the wall time per seed and
the median, min and max. The goal: median ≤ 15 s.
"""

import argparse
import statistics

import torch

from mechlib import train
from mechlib.config import ModelConfig
from mechlib.data import RandomTokens, WithRepeats, training_lengths

# Chosen by a small sweep (one seed each, 2 threads): d_model 64 × 2 heads, standard positions,
# lr 1e-2 formed fastest (15 s); d_model 128 × 4 heads took 20–30 s, shortformer positions 20–24 s.
VOCAB, D_MODEL, HEADS, N_CTX, LR, BATCH, MAX_STEPS = 100, 64, 2, 48, 1e-2, 32, 4000


class Reached(Exception):
    pass


def time_to_induction(seed: int) -> tuple[float, int, dict[str, float]]:
    cfg = ModelConfig(n_layers=2, d_model=D_MODEL, n_heads=HEADS, d_vocab=VOCAB, n_ctx=N_CTX, seed=seed)

    def stop_when_formed(progress: train.Progress) -> None:
        if progress.metrics["induction"] >= 0.9:
            raise Reached(progress)

    try:
        train.train(cfg, WithRepeats(RandomTokens(VOCAB), training_lengths(N_CTX)), MAX_STEPS, lr=LR,
                    batch_size=BATCH, seed=seed, warmup=20, weight_decay=0.0, eval_every=25,
                    on_progress=stop_when_formed)
    except Reached as reached:
        progress = reached.args[0]
        return progress.elapsed_s, progress.step, progress.metrics
    return float("inf"), MAX_STEPS, {}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; 2 layers × {HEADS} heads, d_model {D_MODEL}, "
          f"vocab {VOCAB}, context {N_CTX}, lr {LR}, batch {BATCH}")
    times = []
    for seed in range(args.seeds):
        seconds, steps, metrics = time_to_induction(seed)
        times.append(seconds)
        shown = "  ".join(f"{k} {v:.2f}" for k, v in metrics.items())
        print(f"seed {seed}: {seconds:6.1f} s, {steps} steps  {shown}", flush=True)
    print(f"time to induction score ≥ 0.9: median {statistics.median(times):.1f} s, "
          f"min {min(times):.1f} s, max {max(times):.1f} s over {len(times)} seeds (goal: median ≤ 15 s)")


if __name__ == "__main__":
    main()
