"""One replica against two behind nginx: the class's reply times at 30 and at 60 students, side by side.

Run from the repository root: .venv/bin/python -m bench.replicas [--sizes 30,60] [--replicas 1,2] [--minutes 3]

For each replica count it starts ``deploy/class.sh N`` (Redis, N replicas, nginx; in a state folder of its own, on
free ports), lets the replicas warm up, then runs ``bench.classroom_load``'s class against the proxy at each size, one
after the other, and stops the deployment. Prints each run's figures as classroom_load does, then one table: every
move's p50 / p95 / max, the replicas' peak memory, failures, and the capacity at each replica count (the class size
at which the p95 reaches the goal, 2 s, interpolated between the sizes measured), with the ratio of two replicas'
capacity to one's.
"""

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.classroom_load import PAGES, free_port, measure, wait_for

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 2.0  # the class's p95 reply time to a move


def deployment(replicas: int, state: Path) -> tuple[subprocess.Popen, int, list[int]]:
    """``deploy/class.sh replicas`` on free ports; (its process, the proxy's port, the replicas' pids) once every
    replica answers through the proxy."""
    port, first, redis_port = free_port(), free_port(), free_port()
    while any(p in range(first, first + replicas) for p in (port, redis_port)):
        first = free_port()
    env = {**os.environ, "CLASS_PORT": str(port), "CLASS_REPLICA_PORT": str(first), "CLASS_REDIS_PORT": str(redis_port),
           "CLASS_STATE": str(state), "CLASS_PYTHON": sys.executable}
    env.pop("CLASS_REDIS_URL", None)
    process = subprocess.Popen(["bash", "deploy/class.sh", str(replicas)], cwd=ROOT, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for replica in range(first, first + replicas):
        wait_for(replica, seconds=120)
    wait_for(port)
    time.sleep(5)  # the replicas' first imports
    return process, port, [int(pid) for pid in (state / "replica-pids").read_text().split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(n) for n in s.split(",")], default=[30, 60])
    parser.add_argument("--replicas", type=lambda s: [int(n) for n in s.split(",")], default=[1, 2])
    parser.add_argument("--minutes", type=float, default=3.0)
    args = parser.parse_args()
    print(f"$ .venv/bin/python -m bench.replicas {' '.join(sys.argv[1:])}".rstrip())
    print(f"{os.cpu_count()} CPU cores; every run: students join over 30 s, then move widgets on {', '.join(PAGES)}")
    results: dict[tuple[int, int], dict] = {}
    for replicas in args.replicas:
        with tempfile.TemporaryDirectory(prefix="class-") as state:
            process, port, pids = deployment(replicas, Path(state))
            try:
                for size in args.sizes:
                    print(f"\n{replicas} replica{'s' * (replicas > 1)} behind nginx, {size} students:")
                    run = argparse.Namespace(clients=size, minutes=args.minutes, train=0, pages=PAGES, drill=False,
                                             settle=5)
                    url = f"ws://127.0.0.1:{port}/_stcore/stream"
                    results[replicas, size] = asyncio.run(measure(url, pids, run))
            finally:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)

    print("\n| replicas | students | moves | p50 | p95 | max | replicas' peak RSS | failures |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (replicas, size), r in results.items():
        print(f"| {replicas} | {size} | {r['moves']:,} | {r['p50_s'] * 1e3:,.0f} ms | {r['p95_s'] * 1e3:,.0f} ms | "
              f"{r['max_s']:,.1f} s | {r['peak_mb']:,.0f} MB | {r['failures']} |")
    capacity = {replicas: capacity_at(GOAL_S, [(size, results[replicas, size]["p95_s"]) for size in args.sizes])
                for replicas in args.replicas}
    for replicas, (students, how) in capacity.items():
        print(f"capacity with {replicas} replica{'s' * (replicas > 1)}: {how} {students:.0f} students at p95 ≤ {GOAL_S:.0f} s")
    if len(capacity) == 2:
        (low, (a, how_a)), (high, (b, how_b)) = sorted(capacity.items())
        bound = " or more" if how_b == "at least" or how_a == "under" else " or less" if how_a == "at least" else ""
        print(f"capacity ratio, {high} replicas over {low}: {b / a:.2f}{bound}")


def capacity_at(goal_s: float, measured: list[tuple[int, float]]) -> tuple[float, str]:
    """The class size at which the p95 reaches ``goal_s``, from (students, p95) runs: interpolated linearly between
    the two sizes around it ("about"), or the largest size measured when every run met it ("at least"), or the
    smallest when none did ("under")."""
    measured = sorted(measured)
    for (small, p_small), (large, p_large) in zip(measured, measured[1:]):
        if p_small <= goal_s < p_large:
            return small + (goal_s - p_small) / (p_large - p_small) * (large - small), "about"
    if measured[-1][1] <= goal_s:
        return measured[-1][0], "at least"
    return measured[0][0], "under"  # the first run already missed the goal (any other miss has a crossing above)

if __name__ == "__main__":
    main()
