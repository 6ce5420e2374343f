"""The class's links are the teacher's to keep, through the real server: the store's share is per browser, so ten
tabs of one browser uploading a model each keep that browser's last eight (``classroom.state.store.PER_OWNER``), and the
model the teacher pinned in another browser still opens from its link."""

import re

from classroom.state.store import PER_OWNER, short_id
from mechlib import io
from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.browser.conftest import wait_for_app

TABS = PER_OWNER + 2


def checkpoint(seed: int) -> bytes:
    return io.to_bytes(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=20, n_ctx=8, seed=seed)))


def upload(page, server: str, path) -> None:
    page.goto(f"{server}/")
    wait_for_app(page, charts=0)
    page.get_by_text("upload a checkpoint").click()
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
    page.wait_for_function("() => location.search.includes('model=uploaded')", timeout=90_000)


def opens(browser, server: str, data: bytes) -> bool:
    """Whether a fresh browser opens the link to ``data``'s model (or is told it is gone)."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server}/?model=uploaded+{short_id(data)}")
    gone = page.get_by_text(re.compile("is kept on this server|does not exist"))
    kept = page.locator('[data-testid="stSidebar"]').get_by_text(re.compile(f"uploaded {short_id(data)}: tab|lesson"))
    gone.or_(kept).first.wait_for(timeout=90_000)  # the note, or the model listed under its first name
    opened = kept.count() > 0
    context.close()
    return opened


def test_ten_tabs_of_one_browser_keep_one_share_and_the_teachers_pinned_model_survives(browser, server, tmp_path):
    teacher = browser.new_context()
    page = teacher.new_page()
    lesson = tmp_path / "lesson.safetensors"
    lesson.write_bytes(checkpoint(100))
    upload(page, server, lesson)
    page.get_by_text("Pin for the class").click()  # offered here: this browser is on the server's machine
    wait_for_app(page, charts=0)
    assert page.get_by_role("switch", name="Pin for the class").is_checked()

    student = browser.new_context()
    models = [checkpoint(seed) for seed in range(TABS)]
    for seed, data in enumerate(models):  # ten tabs, one upload each, all open at once
        path = tmp_path / f"tab{seed}.safetensors"
        path.write_bytes(data)
        upload(student.new_page(), server, path)
    assert not opens(browser, server, models[0]) and not opens(browser, server, models[1])  # the browser's oldest
    assert all(opens(browser, server, data) for data in models[-PER_OWNER:])
    assert opens(browser, server, lesson.read_bytes())
    student.close()
    teacher.close()
