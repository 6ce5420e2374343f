"""How long the pages take on the server: the Patterns and Residual pages on the default zoo model (gelu-2l), then
every page on a random-weight model of GPT-2 small's shape (12 layers × 12 heads, d_model 768, 50,257 tokens) read
from the class's models folder.

Run from the repository root: .venv/bin/python -m bench.pages_rerun
Part 1, for each page: the first run (caches cold), a warm rerun (cache hit), and moving a slider to values not seen
before (each a cache miss: the model runs and every check is recomputed). Part 2 (goal: each page's first run
≤ 10 s on 2 cores, within the memory budget, no section refused silently): a GPT2LMHeadModel drawn by
``transformers``' own initialisation (nothing is downloaded) and a byte-level BPE tokenizer trained here on
Python's documentation, saved in Hugging Face's format in a temporary models folder; the sidebar chooses it, and
each Circuits page reads the sidebar's model where it fits. Printed per page: its first run, a warm rerun, and
every refusal or note the page shows.
"""

import os
import pydoc_data.topics
import statistics
import tempfile
import time
from pathlib import Path

import torch
from streamlit.testing.v1 import AppTest

from classroom import models_folder, pages

APP = str(Path(__file__).resolve().parents[1] / "app.py")
SLIDERS = {"app_pages/patterns.py": ("dest", range(3, 15)), "app_pages/residual.py": ("rpos", range(1, 13))}
GPT2_SMALL = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024, bos_token_id=50256,
                  eos_token_id=50256)
FOLDER_MODEL = "gpt2-small-random"
GOAL_S = 10.0


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def zoo_sliders() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; model gelu-2l, the default prompt (16 tokens)")
    for page, (key, values) in SLIDERS.items():
        at = AppTest.from_file(APP, default_timeout=120)
        at.run()
        at.switch_page(page)
        first = timed(at.run)
        warm = [timed(at.run) for _ in range(10)]
        moved = []
        for value in values:
            at.slider(key=key).set_value(value)
            moved.append(timed(at.run))
        assert not at.exception, at.exception
        print(f"{page}: first run {first * 1e3:.0f} ms; warm rerun median {statistics.median(warm) * 1e3:.0f} ms; "
              f"moving '{key}' to a new value median {statistics.median(moved) * 1e3:.0f} ms "
              f"(max {max(moved) * 1e3:.0f}) over {len(moved)}")


def gpt2_small_folder(folder: Path) -> None:
    """A random-weight GPT-2 small with a BPE tokenizer (as many tokens as the documentation's words allow, padded
    to 50,257 by the model), saved in Hugging Face's format in ``folder``."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2_SMALL)).save_pretrained(folder / FOLDER_MODEL)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(list(pydoc_data.topics.topics.values()), trainers.BpeTrainer(
        vocab_size=GPT2_SMALL["vocab_size"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(folder / FOLDER_MODEL / "tokenizer.json"))


def on_gpt2_small() -> None:
    with tempfile.TemporaryDirectory() as folder:
        gpt2_small_folder(Path(folder))
        os.environ[models_folder.SETTING] = folder
        entry = models_folder.entries()[0]
        print(f"\n{entry.label}: {entry.n_bytes / 1e6:,.0f} MB on disk; "
              f"{models_folder.config(entry).n_params():,} parameters in mechlib (the unembedding untied)")
        slowest = 0.0
        for page in pages.PAGES:
            at = AppTest.from_file(APP, default_timeout=600)
            at.query_params["model"] = entry.label
            for zoo_name in ("attn-only-0l", "attn-only-1l", "attn-only-2l"):
                at.query_params[pages.circuits_model_key(zoo_name)] = pages.SIDEBARS_MODEL
            load = timed(at.run)
            at.switch_page(page.file)
            first, warm = timed(at.run), timed(at.run)
            assert not at.exception, at.exception
            slowest = max(slowest, first)
            shown = [note.value.replace("\\", "") for note in [*at.error, *at.warning, *at.info]]
            print(f"{page.url_path or 'home'}: first run {first:.1f} s, warm rerun {warm * 1e3:.0f} ms"
                  + (f" (the start page's run before it, loading the model where not yet cached: {load:.1f} s)"
                     if page is pages.HOME else ""))
            for note in shown:
                print(f"    shown: {' '.join(note.split())[:220]}")
        print(f"slowest first run {slowest:.1f} s (goal ≤ {GOAL_S:.0f} s)")


if __name__ == "__main__":
    zoo_sliders()
    on_gpt2_small()
