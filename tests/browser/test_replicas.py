"""A class on two replicas behind nginx with Redis and two training workers, as ``deploy/class.sh 2`` starts it: a
link to a model a worker trained for a browser on one replica opens in a browser on the other; and
the faults a class survives: a replica killed mid-class sends its students' next page load to the other, where
their stored models and links still open; Redis restarted, the replicas reconnect and the models are still there;
the workers killed mid-training, the student is told so within seconds."""

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from classroom.state.store import short_id
from tests.app.conftest import RedisServer, free_port
from tests.browser.conftest import ROOT, wait_for_app
from tests.browser.test_store_share import checkpoint, upload


def answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


@pytest.fixture(scope="module")
def class_of_two(browser, tmp_path_factory):
    """(the proxy's address, each replica's own address, each replica's pid, the class's Redis, the workers' pids).
    Redis is the tests' own (``CLASS_REDIS_URL``), so that a test can restart it."""
    missing = [name for name in ("nginx", "redis-server") if shutil.which(name) is None]
    if missing:
        reason = f"the replica tests need Debian's {' and '.join(missing)} (apt-get install nginx redis-server)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("class")
    port, first, shared = free_port(), 20_000 + os.getpid() % 20_000, RedisServer(tmp_path_factory.mktemp("redis"))
    shared.start()
    env = {**os.environ, "CLASS_PORT": str(port), "CLASS_REPLICA_PORT": str(first), "CLASS_REDIS_URL": shared.url,
           "CLASS_STATE": str(state)}
    process = subprocess.Popen(["bash", "deploy/class.sh", "2"], cwd=ROOT, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy, replicas = f"http://127.0.0.1:{port}", [f"http://127.0.0.1:{first + i}" for i in range(2)]
    try:
        deadline = time.monotonic() + 120
        while not all(answers(url) for url in [proxy, *replicas]):
            assert time.monotonic() < deadline, f"the class did not start within 120 s; see {state / 'logs'}"
            time.sleep(0.5)
        pids = [[int(pid) for pid in (state / f"{kind}-pids").read_text().split()] for kind in ("replica", "worker")]
        yield proxy, replicas, pids[0], shared, pids[1]
    finally:  # killed outright: a replica stopped gently first finishes its warm-up's bigram fit (10–20 s of CPU)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        shared.stop()


def listed(page, data: bytes):
    """The sidebar's entry for ``data``'s model, as a session lists a model opened from its link."""
    return page.locator('[data-testid="stSidebar"]').get_by_text(re.compile(f"uploaded {short_id(data)}: lesson"))


def test_a_model_trained_by_a_worker_through_one_replica_opens_through_the_other(browser, class_of_two):
    _, (one, two), _, _, _ = class_of_two
    teacher = browser.new_context()
    page = teacher.new_page()
    page.goto(f"{one}/train")                                     # the teacher presses the preset on one replica
    wait_for_app(page, charts=0)
    page.get_by_role("button", name="Watch an induction head form").click()
    page.get_by_text("The circuit check finds it").wait_for(timeout=120_000)  # trained by a worker, through Redis
    label = page.locator('[data-testid="stSidebar"] input[aria-label="model"]').input_value()
    trained = re.match(r"trained ([a-z2-7]{16}): ", label).group(1)
    student = browser.new_context().new_page()
    student.goto(f"{two}/?model=trained+{trained}")              # a student's link on the other
    student.locator('[data-testid="stSidebar"]').get_by_text(re.compile(f"trained {trained}: ")).wait_for(
        timeout=90_000)
    teacher.close()
    student.context.close()


def test_a_replica_killed_mid_class_sends_its_students_to_the_other_with_their_models(browser, class_of_two, tmp_path):
    proxy, replicas, pids, _, _ = class_of_two
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


def test_redis_restarted_mid_class_the_replicas_reconnect_and_the_models_are_still_there(browser, class_of_two,
                                                                                         tmp_path):
    proxy, _, _, shared, _ = class_of_two
    lesson = tmp_path / "lesson.safetensors"
    lesson.write_bytes(checkpoint(202))
    context = browser.new_context()
    page = context.new_page()
    upload(page, proxy, lesson)
    link = page.url
    shared.stop()   # its append-only file keeps what it held
    shared.start()  # on the same port and folder
    page.goto(link)  # the student's next page load, on a replica whose connections to Redis all broke
    listed(page, lesson.read_bytes()).wait_for(timeout=90_000)
    context.close()


def test_the_training_workers_killed_mid_training_tell_the_student_within_seconds(browser, class_of_two):
    proxy, _, _, _, workers = class_of_two
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{proxy}/train")
    wait_for_app(page, charts=0)
    page.get_by_role("button", name="Watch an induction head form").click()
    page.get_by_text(re.compile(r"step [\d,]+ of at most")).first.wait_for(timeout=60_000)  # a worker trains it
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    page.get_by_text("the worker process running this training stopped").wait_for(timeout=15_000)
    assert time.monotonic() - killed < 8.0
    context.close()
