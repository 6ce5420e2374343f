"""Shared test settings: the project root on sys.path, paths the tiers use, and the ``one_thread`` fixture."""

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mechlib.device  # noqa: F401  (it gives torch every core at import; the share below replaces that)

# pytest-xdist's workers share the machine's cores, so each worker's torch gets its share. Two workers at two threads
# each on 2 cores, beside a browser, made one test's seconds of fitting take 134 s in CI: a thread waits on a busy
# neighbour. The servers the tests start keep every core, as a class's server does: with them on one thread too, the
# suite took 17 min 28 s and 17 min 49 s here, against 16 min 55 s twice before.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, (os.cpu_count() or 1) // WORKERS))


@pytest.fixture(scope="module")
def one_thread():
    """A module's tests on one torch thread, as the app's workers train: the same sums in the same order on any
    machine, and no second thread left waiting on a busy neighbour (at a load average of 5 on 2 cores, 300 toy steps
    took 50 s on two threads and 1.8 s on one). A module asks for it with ``pytestmark``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
