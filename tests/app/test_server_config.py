"""The classroom settings hold however the server is started: ``streamlit run /abs/path/app.py`` from another folder.

Streamlit reads ``.streamlit/config.toml`` beside the main script after the one in the working folder, so the
project's settings win over a stray folder's own (here one that asks for full tracebacks and 200 MB uploads);
only command-line flags and STREAMLIT_* variables, which the person starting the server types, override them.
Each test starts the real server on a free port and speaks its websocket protocol as a browser does
(as ``bench/classroom_load.py`` does). An uncaught exception is raised without test code in the app: a mistyped
``MECHLIB_THREADS`` fails mechlib's import in every script run.
"""

import asyncio
import http.client
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.NewSession_pb2 import Config
from websockets.asyncio.client import connect

APP = Path(__file__).resolve().parents[2] / "app.py"
MB = 2**20
STRAY_CONFIG = '[client]\nshowErrorDetails = "full"\ntoolbarMode = "developer"\n[server]\nmaxUploadSize = 200\n'


@contextmanager
def server(folder: Path, *flags: str, **env: str):
    """``streamlit run <absolute path>/app.py`` started in ``folder``; yields its port once it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(APP), "--server.port", str(port),
                                "--server.address", "127.0.0.1", *flags], cwd=folder, env={**os.environ, **env},
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        process.wait()


def first_run(port: int, then=None) -> dict:
    """One browser tab's first script run: the session's id and config, the exception and uploader elements;
    ``then(seen)``, if given, runs while the tab is still open (a session ends with its websocket)."""

    async def run() -> dict:
        seen = {"exceptions": [], "uploaders": []}
        async with connect(f"ws://127.0.0.1:{port}/_stcore/stream", max_size=None) as ws:
            message = BackMsg()
            message.rerun_script.page_name = ""
            await ws.send(message.SerializeToString())
            while True:
                reply = ForwardMsg()
                reply.ParseFromString(await asyncio.wait_for(ws.recv(), 60))
                kind = reply.WhichOneof("type")
                if kind == "new_session":
                    seen["session_id"] = reply.new_session.initialize.session_id
                    seen["config"] = reply.new_session.config
                elif kind == "delta" and reply.delta.WhichOneof("type") == "new_element":
                    element = reply.delta.new_element
                    if element.WhichOneof("type") == "exception":
                        seen["exceptions"].append(element.exception)
                    elif element.WhichOneof("type") == "file_uploader":
                        seen["uploaders"].append(element.file_uploader)
                elif kind == "script_finished":
                    if then is not None:
                        seen["then"] = await asyncio.to_thread(then, seen)
                    return seen

    with ThreadPoolExecutor(1) as thread:  # a loop of its own: a browser test run earlier in this process (pytest
        return thread.submit(asyncio.run, run()).result()  # -n 2 mixes the tiers) leaves Playwright's loop running


def upload_status(port: int, session_id: str, length: int) -> int | None:
    """The HTTP status of a file upload of ``length`` bytes in the session, as the browser's uploader sends it.
    From a megabyte on, only the headers are sent: a server that caps uploads below ``length`` refuses it from its
    Content-Length at once; one that would take it waits for the body, and None says so after 10 s."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/_stcore/health")
    response = conn.getresponse()
    response.read()
    xsrf = response.getheader("Set-Cookie").split(";")[0]  # _streamlit_xsrf=…, echoed in the header as the browser does
    boundary = "----addition-machines"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m.safetensors\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    conn.putrequest("PUT", f"/_stcore/upload_file/{session_id}/file-1")
    for name, value in {"Cookie": xsrf, "X-Xsrftoken": xsrf.split("=", 1)[1],
                        "Content-Type": f"multipart/form-data; boundary={boundary}",
                        "Content-Length": str(len(head) + length + len(tail))}.items():
        conn.putheader(name, value)
    conn.endheaders()
    if length < MB:
        conn.send(head + bytes(length) + tail)
    try:
        return conn.getresponse().status
    except TimeoutError:
        return None
    finally:
        conn.close()


def test_from_another_folder_the_upload_cap_is_64_mb_in_the_uploader_and_at_the_server(tmp_path):
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text(STRAY_CONFIG)
    with server(tmp_path) as port:
        seen = first_run(port, then=lambda seen: [upload_status(port, seen["session_id"], n) for n in (1000, 64 * MB + 1)])
    assert not seen["exceptions"] and seen["config"].toolbar_mode == Config.VIEWER  # the project's file, not the stray one
    assert [u.max_upload_size_mb for u in seen["uploaders"]] == [64]  # the sidebar's checkpoint uploader
    # a small file goes through (so the request is right); 64 MB and a byte is refused by the server itself
    assert seen["then"] == [204, 413]


def test_from_another_folder_an_uncaught_exception_reaches_the_browser_without_its_traceback(tmp_path):
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text(STRAY_CONFIG)
    with server(tmp_path, MECHLIB_THREADS="many") as port:
        (shown,) = first_run(port)["exceptions"]
    assert list(shown.stack_trace) == [] and shown.type == ""
    assert shown.message.startswith("This app has encountered an error. The original error message is redacted")
    assert "many" not in shown.message and "mechlib" not in shown.message

    with server(tmp_path, "--client.showErrorDetails", "full", MECHLIB_THREADS="many") as port:  # the control: a flag
        (shown,) = first_run(port)["exceptions"]
    assert shown.type == "ValueError" and "invalid literal for int() with base 10: 'many'" in shown.message
    assert any("mechlib/device.py" in line for line in shown.stack_trace)
