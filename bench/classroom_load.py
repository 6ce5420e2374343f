"""A class on one server: simulated students move sliders over the analysis pages while others train.

Run from the repository root: .venv/bin/python -m bench.classroom_load --clients 30 --minutes 3 [--train 5]
[--pages equivalence,patterns,...] [--drill] [--url http://127.0.0.1:PORT] [--server-pids PID,...]

Without ``--url`` it starts ``streamlit run app.py`` on a free port (with the project's .streamlit/config.toml)
and measures that server; ``--url`` measures a running one (e.g. a proxy in front of several), whose processes
``--server-pids`` names for the memory figures. No browsers: each student is one websocket speaking Streamlit's own
protocol, so what is measured is the server. Students join over the first 30 s. A student opens a page, then every
2–5 s (think time, after the reply) moves one of the page's widgets, at random, and waits for "script finished": a
slider dragged by up to a tenth of its range, or a radio or select box set to another option; after four moves it
opens the next page of ``--pages``. ``--train`` of the clients press a training's button instead, again and
again: every other one the Train page's preset, the rest the Dictionary learning page's sparse autoencoder. ``--drill`` adds one student who, once the class is running, makes ten fast moves of the Equivalence page's
d_model slider (0.3 s apart, without waiting for replies), as a student dragging it would. ``--room``: a live class
instead, one teacher and ``--clients`` students following (``bench/live_class.py``).

A move counts as changing the output when the content the student sees (text, tables, charts, metrics; not the
widgets themselves) differs from before the move; a no-op rerun (the same values sent again) is the control, and
must change nothing. Prints, per page, the reply time to a move (p50, p95, max) and the share of moves that
changed the output; page openings; trainings (time from the press to the result, queue waits included);
exceptions shown to students, error messages, disconnects; and the server's memory (the server process's resident
set, and the proportional set of it with its training workers; sampled every second) during the run and after
the students leave.
"""

import argparse
import asyncio
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from websockets.exceptions import ConnectionClosed

from bench import live_class, results
from bench.student import REPLY_TIMEOUT_S, Stats, Student, quantiles

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["equivalence", "patterns", "residual", "circuits-zero", "lstm",  # circuits-zero: the old Circuits page's first part
         "which-input"]  # a warm rerun 0.13–0.21 s (AppTest); each new baseline, metric or seed computes ~8 s once
MOVES_PER_PAGE = 4
THINK_S = (2.0, 5.0)
ARRIVALS_S = (0.0, 30.0)  # students join over the first half minute, as a class does
PRESET_BUTTON = "Watch an induction head form"
SAE_BUTTON = "Train a sparse autoencoder"  # the Dictionary learning page's job: every other trainer presses it
TRAININGS = (("train", PRESET_BUTTON, "Training stopped at step"), ("dictionary", SAE_BUTTON, "loss recovered"))


async def think(rng: random.Random, stop: asyncio.Event, seconds: tuple[float, float] = THINK_S) -> None:
    try:
        await asyncio.wait_for(stop.wait(), rng.uniform(*seconds))
    except TimeoutError:
        pass


@asynccontextmanager
async def connected(student: Student) -> AsyncIterator[None]:
    """The student's websocket for the block; a disconnect, or a reply later than ``REPLY_TIMEOUT_S``, ends the
    block and is counted."""
    await student.connect()
    try:
        yield
    except ConnectionClosed:
        student.stats.disconnects += 1
    except TimeoutError:
        student.stats.timeouts += 1
    finally:
        await student.ws.close()


async def analyse(student: Student, pages: list[str], stop: asyncio.Event) -> None:
    """A student on the analysis pages until ``stop``; reconnects after a disconnect."""
    turn = pages.index(student.rng.choice(pages))
    await think(student.rng, stop, ARRIVALS_S)
    while not stop.is_set():
        async with connected(student):
            while not stop.is_set():
                student.stats.opens.append(await student.open(pages[turn % len(pages)]))
                turn += 1
                if student.stats.noop[1] < 2 * len(pages):
                    await student.noop()
                for _ in range(MOVES_PER_PAGE):
                    await think(student.rng, stop)
                    if stop.is_set():
                        break
                    await student.move()


async def trains(student: Student, stop: asyncio.Event, job: int) -> None:
    """A student pressing a training's button (``TRAININGS[job]``: the Train page's preset, or the Dictionary
    learning page's sparse autoencoder), again and again, until ``stop``."""
    page, button, done = TRAININGS[job % len(TRAININGS)]
    await think(student.rng, stop, ARRIVALS_S)
    async with connected(student):
        await student.open(page)
        while not stop.is_set():
            student.texts.clear()
            start = time.perf_counter()
            await student.rerun(press=button)  # trains, then reruns to show the result
            if any(done in t for t in student.texts):
                student.stats.trainings.append(time.perf_counter() - start)
            await think(student.rng, stop)


async def drill(url: str, stats: Stats, delay_s: float) -> None:
    """Ten fast moves of the Equivalence page's d_model slider, 0.3 s apart, not waiting for replies."""
    await asyncio.sleep(delay_s)
    student = Student(url, stats, random.Random(99))
    await student.connect()
    await student.open("equivalence")
    proto, _ = student.sliders["d_model D"]
    start, last = time.perf_counter(), int(proto.max)
    for d_model in range(last - 9 * 8, last + 1, 8):
        message = BackMsg()
        message.rerun_script.page_name = "equivalence"
        state = message.rerun_script.widget_states.widgets.add()
        state.id = proto.id
        state.double_array_value.data.append(d_model)
        await student.ws.send(message.SerializeToString())
        await asyncio.sleep(0.3)
    shown = f"= {last} / ".encode()  # the page's caption "d_head = D / H = 1024 / 8 = …" for the last value
    while not any(shown in content for content in student.screen.values()):
        elapsed = await student.read_until_finished(start, full=True)
    stats.drill.append(elapsed)
    await student.ws.close()


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def memory_mb(pids: list[int]) -> tuple[float, float]:
    """(resident set of ``pids`` themselves, proportional set of them and all their descendants), in MB, from
    /proc. The second counts a page shared by several processes (torch's libraries in the server and in each
    training worker) once, split between them, so it is the memory the whole server really takes."""
    children = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                children[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry.name))
            except OSError:
                continue
    rss = pss = 0
    todo = list(pids)
    while todo:
        pid = todo.pop()
        todo += children[pid]
        try:
            if pid in pids:
                rss += _field_kb(f"/proc/{pid}/status", "VmRSS:")
            pss += _field_kb(f"/proc/{pid}/smaps_rollup", "Pss:")
        except OSError:
            continue
    return rss / 1024, pss / 1024


def _field_kb(path: str, name: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(name):
            return int(line.split()[1])
    return 0


async def sample(pids: list[int], stop: asyncio.Event, into: list[tuple], counts: list[int]) -> None:
    while not stop.is_set():
        into.append(memory_mb(pids))
        counts.append(max(threads(pid) for pid in pids))
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


async def measure(url: str, pids: list[int], args) -> dict[str, float]:
    """Run the class and print its figures; returns the headline ones (every move's p50, p95 and max in s, the
    server processes' peak resident set in MB, the failures students saw)."""
    stats, stop, memory, after, counts = Stats(), asyncio.Event(), [], [], []
    idle = memory_mb(pids)
    sampler = asyncio.ensure_future(sample(pids, stop, memory, counts))
    analysts = [Student(url, stats, random.Random(i)) for i in range(args.clients - args.train)]
    trainers = [Student(url, stats, random.Random(1000 + i)) for i in range(args.train)]
    tasks = [asyncio.ensure_future(analyse(s, args.pages, stop)) for s in analysts]
    tasks += [asyncio.ensure_future(trains(s, stop, job)) for job, s in enumerate(trainers)]
    if args.drill:
        tasks.append(asyncio.ensure_future(drill(url, stats, 20.0)))
    await asyncio.sleep(60 * args.minutes)
    stop.set()
    await asyncio.gather(*tasks, sampler)
    for _ in range(args.settle):
        await asyncio.sleep(1.0)
        after.append(memory_mb(pids))
    after = after or memory[-1:]

    print(f"{args.clients} clients for {args.minutes:g} min ({len(analysts)} on {', '.join(args.pages)}; "
          f"{len(trainers)} training{'; the rapid-slider drill' if args.drill else ''})")
    all_moves = [t for page in args.pages for t in stats.moves[page]]
    for page in args.pages:
        moves = stats.moves[page]
        print(f"  {page:12s} {len(moves):4d} moves  {quantiles(moves)} · changed the output in "
              f"{stats.changed[page]} of {len(moves)}")
    print(f"  {'every move':12s} {len(all_moves):4d} moves  {quantiles(all_moves)} "
          f"({len(all_moves) / (60 * args.minutes):.1f} moves/s)")
    print(f"  {'page opens':12s} {len(stats.opens):4d}        {quantiles(stats.opens)}")
    print(f"  no-op reruns (the control) that changed the output: {stats.noop[0]} of {stats.noop[1]}")
    if trainers:
        print(f"  trainings    {len(stats.trainings):4d}        {quantiles(stats.trainings)} (press to result, "
              "queue included)")
    if args.drill:
        print(f"  drill: the page showed the last of ten fast d_model moves {stats.drill[0]:.1f} s after the first"
              if stats.drill else "  drill: did not finish")
    print(f"  exceptions shown {len(stats.exceptions)}, disconnects {stats.disconnects}, timeouts "
          f"(> {REPLY_TIMEOUT_S:.0f} s) {stats.timeouts}, error messages {sum(stats.errors.values())}")
    for text in sorted(set(stats.exceptions))[:5]:
        print(f"    exception: {text[:160]}")
    for text, n in sorted(stats.errors.items(), key=lambda kv: -kv[1])[:5]:
        print(f"    {n} × {text}")
    for i, what in enumerate(["server process (RSS)", "with its training workers (PSS)"]):
        print(f"  memory, {what}: {idle[i]:,.0f} MB before, up to {max(m[i] for m in memory):,.0f} MB during, "
              f"{after[-1][i]:,.0f} MB {args.settle} s after the students left")
    print(f"  at most {max(counts)} threads in a server process")
    ordered = sorted(all_moves)
    slowest = max((quantiles(stats.moves[page]).split(" · ")[1] for page in args.pages if stats.moves[page]),
                  key=lambda text: float(text.split()[1].replace(",", "")), default="none")
    figures = f"{quantiles(all_moves)} · slowest page's {slowest} · page opens {quantiles(stats.opens).split(' · ')[1]}"
    results.report(bench_name(args), " ".join(figures.split()), args.record)
    return {"moves": len(ordered), "p50_s": statistics.median(ordered) if ordered else math.inf,
            "p95_s": ordered[int(0.95 * (len(ordered) - 1))] if ordered else math.inf,
            "max_s": ordered[-1] if ordered else math.inf, "peak_mb": max(m[0] for m in memory),
            "failures": len(stats.exceptions) + stats.disconnects + stats.timeouts + sum(stats.errors.values())}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"nothing listens on port {port} after {seconds} s")


def bench_name(args) -> str:
    """This run's name in bench/RESULTS.md's log: the options that change what is measured."""
    return ("classroom_load" + " --room" * args.room + f" --clients {args.clients}"
            + (f" --train {args.train}" if args.train else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--train", type=int, default=0, help="how many of the clients train")
    parser.add_argument("--pages", type=lambda s: s.split(","), default=PAGES)
    parser.add_argument("--drill", action="store_true")
    parser.add_argument("--record", action="store_true", help="add this run's figures to bench/RESULTS.md's log")
    parser.add_argument("--room", action="store_true", help="a live class: one teacher, --clients students "
                        "following (bench/live_class.py)")
    parser.add_argument("--settle", type=int, default=30, help="seconds to watch memory after the students leave")
    parser.add_argument("--url", help="a running server (http://HOST:PORT); default: start one")
    parser.add_argument("--server-pids", type=lambda s: [int(p) for p in s.split(",")], default=[])
    args = parser.parse_args()
    print(f"$ .venv/bin/python -m bench.classroom_load {' '.join(sys.argv[1:])}".rstrip())
    print(f"{os.cpu_count()} CPU cores")
    server = None
    if args.url is None:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                                   "--server.address", "127.0.0.1"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        wait_for(port)
        args.url, args.server_pids = f"http://127.0.0.1:{port}", [server.pid]
    try:
        ws_url = args.url.replace("http", "ws", 1).rstrip("/") + "/_stcore/stream"
        asyncio.run(live_class.measure_room(ws_url, args.server_pids, args, bench_name(args)) if args.room
                    else measure(ws_url, args.server_pids, args))
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
