"""How fast induction heads form from scratch on 2 CPU cores: the Train page's one-click preset.

Run from the repository root: .venv/bin/python -m bench.induction_speed [--seeds 5]
Trains ``train.INDUCTION_PRESET`` (two attention-only layers on the copying task, ``data.CopyingTask``) from
each seed until the circuit has formed on the fixed evaluation batch (``Preset.formed``: best induction score
≥ 0.9 beside a previous-token head ≥ 0.5), evaluating every 25 steps. The time is wall time from the first step
to that evaluation, evaluations included, process start not. Then the
circuit is read with ``induction.induction_circuit``: the previous-token head's score, and the induction score
with that head's output set to zero. Goals: median ≤ 3 s, every seed ≤ 6 s, previous-token head ≥ 0.5,
ablated induction score < 0.2.
"""

import argparse
import statistics
import sys

import torch

from mechlib import induction, train

THREADS = 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    seeds = parser.parse_args().seeds
    torch.set_num_threads(THREADS)
    preset = train.INDUCTION_PRESET
    print(f"$ .venv/bin/python -m bench.induction_speed {' '.join(sys.argv[1:])}".rstrip())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {preset.name}: {preset.description}; "
          f"lr {preset.lr}, batch {preset.batch_size}, context {preset.cfg.n_ctx}")
    times = []
    for seed in range(seeds):
        reports: list[train.Progress] = []
        result = preset.train(seed, on_progress=reports.append)
        last = reports[-1]
        circuit = induction.induction_circuit(result.model.share())
        times.append(last.elapsed_s if preset.formed(last) else float("inf"))
        print(f"seed {seed}: {times[-1]:5.2f} s, {last.step} steps, evaluation {last.evaluation_s / last.elapsed_s:.0%} "
              f"of it; induction {last.metrics['induction']:.2f}, loss on the copy {last.metrics['repeat_loss']:.2f} nats; "
              f"previous-token head {circuit.previous} {circuit.previous_score:.2f}, induction head {circuit.induction} "
              f"{circuit.induction_score:.2f} → {circuit.ablated_score:.2f} with {circuit.previous} ablated", flush=True)
    print(f"time to induction score ≥ 0.9 with a previous-token head ≥ 0.5: median {statistics.median(times):.2f} s, min {min(times):.2f} s, "
          f"max {max(times):.2f} s over {seeds} seeds (goals: median ≤ 3 s, every seed ≤ 6 s)")


if __name__ == "__main__":
    main()
