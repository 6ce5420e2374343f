"""A class on one server: other students' reruns while one student trains the Train page's preset, drawn live.

Run from the repository root: .venv/bin/python -m bench.class_load [--students 8]
Starts ``streamlit run app.py`` on a free port and connects as browsers do, one websocket per student (the
server's own protocol: a rerun request, then the deltas until "script finished"). ``--students`` sessions rerun
the Patterns page (the sidebar's default model; first runs warm the caches) in a loop, 5 s alone, then while one
more session presses "watch an induction head form": it trains, and redraws every head's attention and the curves
at each evaluation. Prints the students' rerun times (median, 95th percentile) in both phases, and the preset's
own time to form the circuit, alone (from a first press) and under the class.
"""

import argparse
import asyncio
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[1]


class Session:
    """One browser tab: a websocket to the server, reruns of one page, the ids of the buttons it was shown."""

    def __init__(self, port: int, page: str):
        self.port, self.page, self.buttons, self.texts = port, page, {}, []

    async def connect(self) -> None:
        self.ws = await connect(f"ws://127.0.0.1:{self.port}/_stcore/stream", max_size=None)

    async def rerun(self, press: str | None = None) -> float:
        """Seconds from the request to "script finished"; ``press`` clicks the button with that label."""
        message = BackMsg()
        message.rerun_script.page_name = self.page
        if press is not None:
            widget = message.rerun_script.widget_states.widgets.add()
            widget.id, widget.trigger_value = self.buttons[press], True
        start = time.perf_counter()
        await self.ws.send(message.SerializeToString())
        while True:
            raw = await self.ws.recv()
            reply = ForwardMsg()
            reply.ParseFromString(raw)
            kind = reply.WhichOneof("type")
            if kind == "delta" and reply.delta.WhichOneof("type") == "new_element":
                element = reply.delta.new_element
                if element.WhichOneof("type") == "button":
                    self.buttons[element.button.label] = element.button.id
                elif element.WhichOneof("type") == "alert":
                    self.texts.append(element.alert.body)
            if kind == "script_finished" and reply.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                return time.perf_counter() - start


async def students_rerun(sessions: list[Session], stop: asyncio.Event, times: list[float]) -> None:
    async def loop(session: Session) -> None:
        while not stop.is_set():
            times.append(await session.rerun())
    await asyncio.gather(*(loop(s) for s in sessions))


async def press_preset(port: int) -> float:
    """One student presses the preset's button; the seconds the page reports for forming the circuit."""
    trainer = Session(port, "train")
    await trainer.connect()
    await trainer.rerun()
    await trainer.rerun(press="Watch an induction head form")   # trains, then st.rerun()s to show the result
    while not any("Training stopped at step" in t for t in trainer.texts):
        await trainer.rerun()
    found = re.search(r"Training stopped at step [\d,]+ after ([\d.]+) s", trainer.texts[-1])
    return float(found.group(1))


async def measure(port: int, students: int) -> None:
    alone = await press_preset(port)
    sessions = [Session(port, "patterns") for _ in range(students)]
    for session in sessions:
        await session.connect()
        await session.rerun()
    for phase in ("alone", "while one trains"):
        stop, times = asyncio.Event(), []
        running = asyncio.ensure_future(students_rerun(sessions, stop, times))
        if phase == "alone":
            await asyncio.sleep(5)
        else:
            loaded = await press_preset(port)
        stop.set()
        await running
        times.sort()
        print(f"{phase:17s}: {len(times)} reruns of the Patterns page, median {statistics.median(times) * 1e3:.0f} ms, "
              f"95th percentile {times[int(0.95 * (len(times) - 1))] * 1e3:.0f} ms")
    print(f"the preset formed its circuit in {alone:.1f} s with nobody else on the server, {loaded:.1f} s while "
          f"{students} students reran")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=8)
    students = parser.parse_args().students
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                               "--server.address", "127.0.0.1"], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        print(f"$ .venv/bin/python -m bench.class_load {' '.join(sys.argv[1:])}".rstrip())
        print(f"one server (streamlit run app.py, 2 CPU cores); {students} students on the Patterns page")
        asyncio.run(measure(port, students))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
