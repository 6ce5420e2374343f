"""Issue 38's findings, replayed: what a hostile student sends and a careless teacher copies, each of which crashed,
filled or leaked the class before (each test failed then). Three more replays sit beside the code they test: H4 in
test_shared_state.py (an unreachable Redis names its setting, never its URL and password), M3 in
tests/browser/test_live_class.py (a reload is the same student, one answer) and M5 in test_store.py (a student's
preset results never unpin the teacher's model)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from classroom import keys
from classroom import models_folder
from classroom.state.store import STORE, short_id
from mechlib import io
from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.app.helpers import APP
from tests.unit.helpers import bpe_tokenizer, gpt2, required

ROOT = Path(__file__).resolve().parents[2]
GPT2 = dict(n_layer=4, n_embd=256, n_head=4, vocab_size=2000, n_positions=64)  # 15 MB of weights: a read takes a while


@pytest.fixture(scope="module")
def gpt2_directory(tmp_path_factory):
    """A Hugging Face GPT-2 directory with its tokenizer, in a models folder of its own."""
    folder = tmp_path_factory.mktemp("models")
    gpt2(required("transformers"), GPT2).save_pretrained(folder / "gpt2")
    bpe_tokenizer(folder / "gpt2" / "tokenizer.json")
    return folder / "gpt2"


def copied(directory: Path, into: Path) -> Path:
    into.mkdir()
    for file in directory.iterdir():
        (into / file.name).write_bytes(file.read_bytes())
    return into


def test_h1_weights_written_over_while_they_load_are_refused_and_the_process_lives(gpt2_directory, tmp_path):
    """``cp new.safetensors folder/gpt2/model.safetensors`` while a student loads it: the mapped file was cut under
    the load and the server died of SIGBUS (-7), every session with it. Read with plain reads, each load reads the
    model whole or is refused with a sentence."""
    directory = copied(gpt2_directory, tmp_path / "gpt2")
    done = subprocess.run([sys.executable, "-m", "tests.app.rewrite_while_loading", str(directory), "200"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    loaded, refused = map(int, done.stdout.split()[1::2])
    assert loaded + refused == 200 and refused > 0, done.stdout  # the writes did overlap the loads


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(models_folder.SETTING, str(tmp_path))
    return tmp_path


def chosen(folder_name: str) -> AppTest:
    """A session that chose the models folder's entry ``folder_name`` in the sidebar (a link naming it)."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = f"folder: {folder_name}"
    return at.run()


def test_h2_a_broken_tokenizer_is_one_sentence_before_any_weight_is_read(gpt2_directory, folder, monkeypatch):
    """A GPT-2 directory with a cut ``tokenizer.json``: the weights loaded (497 MB for GPT-2 small), then the
    tokenizer raised a ValueError nobody caught: the error box, and the weights kept by its traceback, run after run.
    The tokenizer is read first now, and refused with a sentence naming the entry and the file."""
    directory = copied(gpt2_directory, folder / "gpt2")
    tokenizer = directory / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes()[:5000])
    from mechlib import hf
    opened = []
    monkeypatch.setattr(hf, "File", lambda path: opened.append(path))
    for _ in range(3):
        at = chosen("gpt2")
        assert not at.exception, at.exception
        (error,) = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]  # as read: literal()'s escapes removed
        assert error.startswith("gpt2: tokenizer.json cannot be read by tokenizers"), error
        assert str(folder) not in error and str(Path.home()) not in error  # no path of the server's disk
    assert opened == []  # no weight was read


@pytest.mark.parametrize("field, value, reason", [
    ("activation_function", ["gelu"], "activation_function=['gelu'] has no counterpart in mechlib"),
    ("n_embd", "9" * 5000, "config.json is not JSON a model's config can be (the config holds a number of 5,000 "
                                "digits; sizes have at most 30)"),
    ("n_layer", "2", "the model's config does not fit mechlib: n_layers='2' must be a whole number"),
    ("tie_word_embeddings", {"yes": 1}, "tie_word_embeddings={'yes': 1} must be true or false"),
], ids=["a list", "5,000 digits", "a string", "an object"])
def test_m1_a_crafted_config_is_listed_as_unusable_with_its_reason(gpt2_directory, folder, field, value, reason):
    """A ``config.json`` with a list as activation_function, or a 5,000-digit number, raised TypeError or ValueError
    in the listing every run of every session reads: the error box on every page until the file was removed."""
    directory = copied(gpt2_directory, folder / "gpt2")
    fields = json.loads((directory / "config.json").read_text()) | {field: value}
    text = json.dumps(fields)
    if value == "9" * 5000:  # a number of 5,000 digits, as the file's text holds it (Python itself refuses to make one)
        text = text.replace(f'"{value}"', value)
    (directory / "config.json").write_text(text)
    (entry,) = models_folder.entries()
    with pytest.raises(models_folder.FolderError, match=f"^gpt2: {reason}"[:60].replace("(", r"\(").replace("[", r"\[")):
        models_folder.config(entry)
    at = AppTest.from_file(APP, default_timeout=180).run()
    assert not at.exception, at.exception
    listed = [m.value for m in at.sidebar.markdown if "gpt2" in m.value]
    assert len(listed) == 1 and "cannot be used" in listed[0], listed


def test_m6_the_folder_is_listed_once_per_change_however_large(folder, monkeypatch):
    """A folder of 10,000 entries was listed and stat'ed on every page run of every session: 3.1 s a run instead of
    64 ms. It is listed once per change of its modification time now; a run costs one stat."""
    for k in range(10_000):
        (folder / f"notes-{k:05d}.txt").touch()
    io.save(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=40, n_ctx=12)), folder / "m.safetensors")
    listed = []
    listdir = os.listdir
    monkeypatch.setattr(models_folder.os, "listdir", lambda where: listed.append(where) or listdir(where))
    first = models_folder.entries()
    for _ in range(20):
        assert models_folder.entries() == first
    assert [entry.name for entry in first] == ["m.safetensors"] and len(listed) == 1
    (folder / "n.safetensors").write_bytes((folder / "m.safetensors").read_bytes())  # a model added: listed again
    os.utime(folder, ns=(os.stat(folder).st_atime_ns, os.stat(folder).st_mtime_ns + 1_000_000))
    assert [entry.name for entry in models_folder.entries()] == ["m.safetensors", "n.safetensors"]
    assert len(listed) == 2


@pytest.mark.parametrize("room", ["[JOIN THE CLASS HERE](https://evil.example/JOIN)",
                                  "![x](https://evil.example/pixel.png)", "A" * 60_000],
                         ids=["a link", "an image", "60,000 characters"])
def test_m4_a_room_value_in_a_link_is_drawn_as_text_and_cut(room):
    """``?room=[JOIN THE CLASS HERE](https://evil.example/JOIN)`` drew a working link on the class's own address,
    ``![x](…)`` made every browser that opened it fetch a remote image, and a 60,000-character value was quoted whole."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["room"] = room
    at.run()
    assert not at.exception, at.exception
    (note,) = [w.value for w in at.warning if w.value.startswith("The link's class")]
    assert "](" not in note.replace("\\]\\(", "") and "is not a class's code" in note, note
    assert len(note) < 400, len(note)


def test_h3_a_session_keeps_its_models_by_id_and_the_process_one_copy():
    """Each session kept its own copy of every model it uploaded, even when the store held the same bytes: four tabs
    uploading eight 61.6 MB files took the server from 0.08 to 4.95 GB. A session lists a stored model by its id;
    the store keeps the bytes, the model cache one model, whichever sessions upload or link it."""
    data = io.to_bytes(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=30, n_ctx=8, seed=21)))
    tabs = [AppTest.from_file(APP, default_timeout=180).run() for _ in range(2)]
    for tab in tabs:
        tab.sidebar.file_uploader[0].upload("shared.safetensors", data).run()
        assert not tab.exception, tab.exception
        assert list(tab.session_state[keys.SESSION_MODELS].values()) == [short_id(data)]  # an id, not the bytes
    models = {id(STORE.model(short_id(data)))}
    for tab in tabs:
        tab.switch_page("app_pages/patterns.py").run()
        assert not tab.exception
    assert models == {id(STORE.model(short_id(data)))}  # one model for both sessions
