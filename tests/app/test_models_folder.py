"""The class's models folder (``classroom.models_folder``, named by ADDITION_MODELS): a Hugging Face GPT-2 directory
and mechlib checkpoints a teacher copied there, listed in the sidebar with their sizes, checked and admitted before
they load, and studied by the pages like a zoo model."""

import shutil

import pytest
import torch
from streamlit.testing.v1 import AppTest

from classroom import keys
from classroom.model_choice import ModelChoice
from classroom import models_folder
from classroom.admission import BudgetError
from mechlib import io, zoo
from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.app.helpers import APP
from tests.unit.helpers import bpe_tokenizer, gpt2, required

GPT2 = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=320, n_positions=64)  # a small GPT-2, GELU-new and LayerNorm
END_OF_TEXT = 300  # the tokenizer's first token is GPT-2's <|endoftext|>; the model's vocabulary pads it to 320


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A GPT-2 directory with its tokenizer, a mechlib checkpoint, the zoo's LSTM, and things that are no model."""
    root = tmp_path_factory.mktemp("models")
    hf = gpt2(required("transformers"), GPT2 | {"bos_token_id": 0, "eos_token_id": 0})
    hf.save_pretrained(root / "tiny-gpt2")
    bpe_tokenizer(root / "tiny-gpt2" / "tokenizer.json", END_OF_TEXT, special=("<|endoftext|>",))
    io.save(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=40, n_ctx=12)), root / "one-layer.safetensors")
    shutil.copy(zoo.path("lstm"), root / "lstm.safetensors")
    (root / "notes.txt").write_text("not a model")
    (root / "half-copied").mkdir()
    (root / "half-copied" / "config.json").write_text("{}")  # no weights yet: not listed
    return root


@pytest.fixture
def named(folder, monkeypatch):
    monkeypatch.setenv(models_folder.SETTING, str(folder))
    return folder


def test_the_folder_lists_its_models_by_name_with_their_kind_and_size(named):
    listed = {entry.name: entry for entry in models_folder.entries()}
    assert list(listed) == ["lstm.safetensors", "one-layer.safetensors", "tiny-gpt2"]
    assert listed["tiny-gpt2"].kind == "Hugging Face" and listed["one-layer.safetensors"].kind == "mechlib"
    assert listed["tiny-gpt2"].n_bytes == sum(f.stat().st_size for f in (named / "tiny-gpt2").iterdir())
    assert listed["one-layer.safetensors"].n_bytes == (named / "one-layer.safetensors").stat().st_size
    assert listed["tiny-gpt2"].label == "folder: tiny-gpt2"


def test_a_model_is_found_again_by_its_listed_name_and_by_no_other(named):
    listed = {entry.name: entry for entry in models_folder.entries()}
    assert all(models_folder.find(name) == entry for name, entry in listed.items())
    outside = named.parent / "outside.safetensors"
    shutil.copy(named / "one-layer.safetensors", outside)
    for name in ("notes.txt", "half-copied", "gone", "", ".", "..", "../outside.safetensors", str(outside)):
        assert models_folder.find(name) is None, name


def test_no_setting_lists_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv(models_folder.SETTING, raising=False)
    assert models_folder.folder() is None and models_folder.entries() == []
    monkeypatch.setenv(models_folder.SETTING, str(tmp_path / "missing"))
    assert models_folder.entries() == []


def test_a_gpt2_loads_with_its_tokenizer_and_is_shared(named):
    entry = next(entry for entry in models_folder.entries() if entry.name == "tiny-gpt2")
    model = models_folder.load(entry)
    assert models_folder.load(entry) is model and model.cfg == models_folder.config(entry)
    assert model.cfg.act_fn == "gelu_new" and model.tokenizer.bos_id == 0
    with pytest.raises(RuntimeError):
        model.train()  # shared: read-only, as a zoo model


def test_an_lstm_is_refused_by_name_and_a_model_over_the_budget_before_its_weights_are_read(named, monkeypatch):
    lstm, gpt = (next(entry for entry in models_folder.entries() if entry.name == name)
                 for name in ("lstm.safetensors", "tiny-gpt2"))
    with pytest.raises(models_folder.FolderError, match="lstm.safetensors is an LSTM checkpoint; the pages study "
                                                        "transformers"):
        models_folder.config(lstm)
    monkeypatch.setenv("MECHLIB_MEMORY_BUDGET_MB", "0.01")
    monkeypatch.setattr(zoo, "from_folder", lambda *_: pytest.fail("the weights were read"))
    with pytest.raises(BudgetError, match=r"folder: tiny-gpt2 \(\d[\d,]* parameters\) would need about"):
        models_folder.load(gpt)


def open_on(model: str, page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = model
    at.run()
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("page", ["app_pages/patterns.py", "app_pages/residual.py"])
def test_the_sidebar_lists_the_folder_and_the_pages_study_its_gpt2(named, page):
    at = open_on("folder: tiny-gpt2", page)
    assert at.selectbox(key="model").value == "folder: tiny-gpt2"
    sidebar = " ".join([md.value for md in at.sidebar.markdown] + [c.value for c in at.sidebar.caption]).replace("\\", "")
    assert "**tiny-gpt2** — Hugging Face" in sidebar and "**one-layer.safetensors** — mechlib" in sidebar
    assert "**lstm.safetensors** — mechlib" in sidebar and "cannot be used: lstm.safetensors is an LSTM" in sidebar
    assert "2 layers × 4 heads" in sidebar and "1 layer × 2 heads" in sidebar
    assert "tiny-gpt2 from the models folder" in sidebar and "Hugging Face model from the class's models folder" in sidebar
    assert not at.error and not at.warning
    ids = at.radio(key="input").value
    assert ids == "prompt"  # the GPT-2's tokenizer reads typed prompts


def test_a_link_to_a_model_the_folder_lacks_says_so_and_shows_the_default(named):
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = "folder: gpt2-xl"
    at.run()
    assert not at.exception and at.selectbox(key="model").value == "gelu-2l"
    assert "“folder: gpt2-xl” is not in this server's models folder" in at.warning[0].value.replace("\\", "")


def test_a_folder_model_over_the_budget_is_refused_with_a_note_and_the_default_shown(named, monkeypatch):
    monkeypatch.setenv("MECHLIB_MEMORY_BUDGET_MB", "0.05")
    monkeypatch.setattr(zoo, "from_folder", lambda *_: pytest.fail("the weights were read"))
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = "folder: tiny-gpt2"
    at.run()
    assert not at.exception, at.exception
    notes = [w.value.replace("\\", "") for w in at.warning]
    assert at.selectbox(key="model").value == "gelu-2l"
    assert any(note.startswith("folder: tiny-gpt2 (48,320 parameters) would need about") and
               note.endswith("The default model is shown instead.") for note in notes), notes


def test_the_reproduce_snippet_loads_the_folder_model_from_its_path(named):
    key = open_on("folder: tiny-gpt2", "app_pages/patterns.py").session_state[keys.MODEL_CHOICE]
    assert key == ModelChoice("folder", "tiny-gpt2")
    assert ModelChoice("folder", str(named / "tiny-gpt2"), (1, 2)).snippet_line() == (
        f"model = zoo.from_folder(Path({str(named / 'tiny-gpt2')!r}))  # from the class's models folder")
    assert torch.equal(zoo.from_folder(named / "tiny-gpt2").embed.W_E,
                       models_folder.load(models_folder.entries()[-1]).embed.W_E)
