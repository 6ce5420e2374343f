"""One upload cap, by behaviour through the real server in Chromium: a file one byte under ``mechlib.io.MAX_BYTES``
reaches mechlib (which reads it and says what is wrong with its contents, not its size); one byte over is refused
with the cap's size, the same number the uploader and mechlib state."""

import pytest

from mechlib.io import MAX_BYTES
from tests.browser.conftest import wait_for_app


def upload(page, server: str, path) -> str:
    """The sidebar's checkpoint uploader given ``path``: the text of the uploader and of the sidebar's messages."""
    page.goto(f"{server}/")
    wait_for_app(page, charts=0)
    page.get_by_text("upload a checkpoint").click()
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
    page.wait_for_timeout(1000)
    wait_for_app(page, charts=0)
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.locator('[data-testid="stAlert"], [role="alert"]').first.wait_for(timeout=60_000)  # the app's, the uploader's
    return sidebar.inner_text()


@pytest.mark.parametrize("size, said", [
    (MAX_BYTES - 1, "under.safetensors: this is not a safetensors file"),  # read by mechlib: its contents refused
    (MAX_BYTES + 1, f"{MAX_BYTES // 10**6}.0MB or smaller"),              # refused for its size by the uploader
])
def test_the_cap_is_one_number(page, server, tmp_path, size, said):
    path = tmp_path / ("under.safetensors" if size < MAX_BYTES else "over.safetensors")
    with path.open("wb") as f:
        f.write(b"\xff" * 8)  # a header length no file can have: refused at once, whatever the size
        f.truncate(size)
    assert said in upload(page, server, path)
