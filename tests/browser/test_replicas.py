"""A class on two replicas behind nginx with Redis, as ``deploy/class.sh 2`` starts it: a link to a model made
through one replica opens through the other (two browsers pinned to different replicas), and a replica killed
mid-class sends its students' next page load to the other, where their stored models and links still open."""

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from classroom.store import short_id
from tests.app.conftest import free_port
from tests.browser.conftest import ROOT
from tests.browser.test_store_share import checkpoint, upload


def answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


@pytest.fixture(scope="module")
def class_of_two(browser, tmp_path_factory):
    """(the proxy's address, each replica's own address, each replica's pid)."""
    missing = [name for name in ("nginx", "redis-server") if shutil.which(name) is None]
    if missing:
        reason = f"the replica tests need Debian's {' and '.join(missing)} (apt-get install nginx redis-server)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("class")
    port, first, redis_port = free_port(), 20_000 + os.getpid() % 20_000, free_port()
    env = {**os.environ, "CLASS_PORT": str(port), "CLASS_REPLICA_PORT": str(first), "CLASS_REDIS_PORT": str(redis_port),
           "CLASS_STATE": str(state)}
    env.pop("CLASS_REDIS_URL", None)
    process = subprocess.Popen(["bash", "deploy/class.sh", "2"], cwd=ROOT, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy, replicas = f"http://127.0.0.1:{port}", [f"http://127.0.0.1:{first + i}" for i in range(2)]
    try:
        deadline = time.monotonic() + 120
        while not all(answers(url) for url in [proxy, *replicas]):
            assert time.monotonic() < deadline, f"the class did not start within 120 s; see {state / 'logs'}"
            time.sleep(0.5)
        yield proxy, replicas, [int(pid) for pid in (state / "replica-pids").read_text().split()]
    finally:  # killed outright: a replica stopped gently first finishes its warm-up's bigram fit (10–20 s of CPU)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def listed(page, data: bytes):
    """The sidebar's entry for ``data``'s model, as a session lists a model opened from its link."""
    return page.locator('[data-testid="stSidebar"]').get_by_text(re.compile(f"uploaded {short_id(data)}: lesson"))


def test_a_link_made_through_one_replica_opens_through_the_other(browser, class_of_two, tmp_path):
    _, (one, two), _ = class_of_two
    lesson = tmp_path / "lesson.safetensors"
    lesson.write_bytes(checkpoint(200))
    teacher = browser.new_context()
    upload(teacher.new_page(), one, lesson)                       # the teacher's browser on the first replica
    student = browser.new_context()
    page = student.new_page()
    page.goto(f"{two}/?model=uploaded+{short_id(lesson.read_bytes())}")  # a student's on the second
    listed(page, lesson.read_bytes()).wait_for(timeout=90_000)
    teacher.close()
    student.close()


def test_a_replica_killed_mid_class_sends_its_students_to_the_other_with_their_models(browser, class_of_two, tmp_path):
    proxy, replicas, pids = class_of_two
    lesson = tmp_path / "lesson.safetensors"
    lesson.write_bytes(checkpoint(201))
    context = browser.new_context()
    page = context.new_page()
    served = page.goto(f"{proxy}/").headers["x-class-replica"]  # the replica this browser's route cookie names
    upload(page, proxy, lesson)
    link = page.url
    assert "model=uploaded" in link
    mine = [url.removeprefix("http://") for url in replicas].index(served)
    os.kill(pids[mine], signal.SIGKILL)                         # the replica dies mid-class
    reloaded = page.goto(link)                                  # the student's next page load
    assert reloaded.ok and reloaded.headers["x-class-replica"] != served
    listed(page, lesson.read_bytes()).wait_for(timeout=90_000)  # the model and its link still open
    context.close()
