"""What a class's uploads and a broken models folder cost the server's memory, and what a large folder costs a page.

Three measures, each on a fresh server (``streamlit run app.py`` on a free port), its process's resident set read
from /proc:

1. Four students (browser contexts) each upload the same 61.6 MB checkpoint eight times in the sidebar: the
   server's growth while they work, then 150 s after their tabs close (Streamlit drops a closed tab's session two
   minutes after it disconnects). Goal: ≤ 600 MB during (one copy plus overhead), within 100 MB of the start after.
2. A models folder whose GPT-2 directory has a cut ``tokenizer.json``, opened by a link twenty times: growth.
   Goal: ≤ 100 MB (it was 1.1 GB a run when the weights loaded before the tokenizer failed).
3. A page run (the Patterns page, AppTest, in this process) with a models folder of 10,000 entries against one with
   none: the median of 20 reruns each. Goal: within 20 %.

    .venv/bin/python -m bench.hostile_memory
"""

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def serve(env: dict) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port",
                                str(port), "--server.address", "127.0.0.1", "--server.headless", "true"], cwd=ROOT,
                               env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return process, url
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the server did not start")


def checkpoint(path: Path) -> Path:
    """A 61.6 MB checkpoint (15.4 million weights in float32)."""
    from mechlib import io
    from mechlib.config import ModelConfig
    from mechlib.model import Transformer
    io.save(Transformer(ModelConfig(n_layers=2, d_model=512, n_heads=8, d_vocab=13_000, n_ctx=64)), path)
    return path


def idle(page) -> None:
    from bench.slides_walk import settle
    settle(page)


def uploads(browser, folder: Path) -> None:
    file = checkpoint(folder / "shared.safetensors")
    server, url = serve({})
    try:
        warm = browser.new_context()  # the server's libraries, zoo model and first pages loaded: the class's start
        warm.new_page().goto(url)
        idle(warm.pages[0])
        warm.close()
        time.sleep(5)
        start = rss_mb(server.pid)
        contexts = [browser.new_context() for _ in range(4)]
        peak = start
        for context in contexts:
            page = context.new_page()
            page.goto(url)
            idle(page)
            page.locator('[data-testid="stSidebar"]').get_by_text("upload a checkpoint").click()
            for _ in range(8):
                page.locator('[data-testid="stSidebar"] input[type="file"]').set_input_files(str(file))
                idle(page)
                peak = max(peak, rss_mb(server.pid))
        during = rss_mb(server.pid)
        for context in contexts:
            context.close()
        time.sleep(150)
        after = rss_mb(server.pid)
        late = browser.new_context()  # a student who opens the app later: Streamlit drops expired sessions as it goes
        late.new_page().goto(url)
        idle(late.pages[0])
        late.close()
        time.sleep(5)
        later = rss_mb(server.pid)
        print(f"4 students × 8 uploads of one {file.stat().st_size / 1e6:.1f} MB checkpoint: server RSS {start:,.0f} MB "
              f"at start, peak {peak:,.0f} MB (+{peak - start:,.0f}, goal ≤ +600), {during:,.0f} MB when done, "
              f"{after:,.0f} MB 150 s after the tabs closed (+{after - start:,.0f}, goal ≤ +100), {later:,.0f} MB once "
              f"another student opened the app (+{later - start:,.0f})")
    finally:
        server.terminate()


def broken_tokenizer(browser, folder: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.unit.helpers import bpe_tokenizer, gpt2
    import transformers
    directory = folder / "models" / "gpt2"
    gpt2(transformers, dict(n_layer=4, n_embd=512, n_head=8, vocab_size=20_000, n_positions=256)).save_pretrained(
        directory)
    bpe_tokenizer(directory / "tokenizer.json")
    (directory / "tokenizer.json").write_bytes((directory / "tokenizer.json").read_bytes()[:5000])
    weights = (directory / "model.safetensors").stat().st_size / 1e6
    server, url = serve({"ADDITION_MODELS": str(folder / "models")})
    try:
        time.sleep(5)
        page = browser.new_context().new_page()
        page.goto(f"{url}/patterns")
        idle(page)
        start = rss_mb(server.pid)
        for _ in range(20):
            page.goto(f"{url}/patterns?model=folder%3A+gpt2")
            idle(page)
        said = page.locator('[data-testid="stAlert"]').first.inner_text()[:100]
        after = rss_mb(server.pid)
        print(f"20 loads of a {weights:.0f} MB GPT-2 directory with a cut tokenizer.json: server RSS {start:,.0f} → "
              f"{after:,.0f} MB (+{after - start:,.0f}, goal ≤ +100); the page says: {said!r}")
    finally:
        server.terminate()


def large_folder(folder: Path) -> None:
    from streamlit.testing.v1 import AppTest

    empty, full = folder / "empty", folder / "full"
    empty.mkdir()
    full.mkdir()
    for k in range(10_000):
        (full / f"notes-{k:05d}.txt").touch()

    def median_run(where: Path) -> float:
        os.environ["ADDITION_MODELS"] = str(where)
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.switch_page("app_pages/patterns.py").run()
        times = []
        for _ in range(20):
            start = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    none, many = median_run(empty), median_run(full)
    print(f"a Patterns page run, median of 20: {none * 1e3:,.0f} ms with an empty models folder, {many * 1e3:,.0f} ms "
          f"with 10,000 entries ({many / none - 1:+.0%}, goal within ±20 %)")


def main() -> None:
    from playwright.sync_api import sync_playwright

    print("$ .venv/bin/python -m bench.hostile_memory")
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
        large_folder(Path(scratch))
        broken_tokenizer(browser, Path(scratch))
        uploads(browser, Path(scratch))
        browser.close()


if __name__ == "__main__":
    main()
