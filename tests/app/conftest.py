"""Fixtures the app's tests share: Chromium for figure export, a Redis server for the shared state."""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

from classroom.page import export


def _needed(reason: str) -> None:
    """Skip with ``reason`` where a service is missing; under CI (CI=true) fail instead, so a green run has them."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI installs it)")
    pytest.skip(reason)


@pytest.fixture
def chromium():
    """Tests that render a figure need Chromium."""
    if reason := export.available():
        _needed(f"export tests must render: {reason}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """Debian's redis-server on a free port of loopback, its append-only file in ``folder``: it can be stopped and
    started again on the same port and data, as a class's Redis restarts."""

    def __init__(self, folder: Path):
        self.folder, self.port, self.process = folder, free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = redis.Redis(port=self.port)
        for _ in range(100):
            try:
                probe.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not answer within 5 s")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    if shutil.which("redis-server") is None:
        _needed("the shared-state tests need Debian's redis-server (apt-get install redis-server); none was found")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()
