"""The bad-input catalogue, through the app as a student meets it: each bad input gets a message that names what is
wrong, and the session's models survive it (its uploaded model stays in ``session_models`` under its id, the
server's store keeps its bytes, byte for byte, and it stays selected in the sidebar).

Covered elsewhere, and not repeated here: crafted whole-number links, an LSTM checkpoint, the upload caps, Markdown
in file names and tokenizers, the smallest vocabulary (tests/app/test_bad_inputs.py); each bad checkpoint's message
from ``mechlib.io.load`` itself, a pickle never unpickled, the 0x80 header (tests/unit/test_io.py); a PNG, an empty
text, UTF-16 with its mark (tests/unit/test_data.py, tests/app/test_train_page.py).
Here: pickles with payloads, truncated files, headers that lie, metadata that is not text, NaN/Inf, dtypes, empty and
garbage files, odd file names, training texts (binary, a huge single line, latin-1, UTF-16 without its mark), and
rapid changes.
"""

import json
import os
import pickle
import re
import struct
import time

import pytest
import torch
from safetensors.torch import save as st_save
from streamlit.testing.v1 import AppTest

from classroom import keys
from classroom.model_choice import ModelChoice
from classroom.state.store import STORE, short_id
from mechlib import io, zoo
from mechlib.config import ModelConfig
from mechlib.model import Transformer
from tests.app.helpers import APP

CFG = ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=30, n_ctx=8, seed=4)
MINE = io.to_bytes(Transformer(CFG))  # the session's own model, uploaded before each bad input
LABEL = f"uploaded {short_id(MINE)}: mine.safetensors"  # the server's store names a model by its contents' id
OTHER = io.to_bytes(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=30, n_ctx=8, seed=5)))


def session_with_my_model() -> AppTest:
    """A session that has uploaded MINE in the sidebar, which selected it."""
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.sidebar.file_uploader[0].upload("mine.safetensors", MINE).run()
    assert at.session_state["model"] == LABEL
    return at


def assert_my_model_survived(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert at.session_state[keys.SESSION_MODELS] == {LABEL: short_id(MINE)} and STORE.get(short_id(MINE)).data == MINE
    assert at.sidebar.selectbox(key="model").value == LABEL and at.session_state[keys.MODEL_CHOICE] == ModelChoice("stored", short_id(MINE))
    assert any("1 layers × 2 heads" in c.value for c in at.sidebar.caption)  # the sidebar still describes it


def plain(markdown: str) -> str:
    """Text shown through ``classroom.page.text.literal``, its backslash escapes removed: what the student reads."""
    return re.sub(r"\\(.)", r"\1", markdown)


# ---------------------------------------------------------------------------------------------
# Checkpoints uploaded in the sidebar

def tensors(change) -> bytes:
    """MINE's weights after ``change(state_dict)``, saved with its metadata."""
    state = dict(Transformer(CFG).state_dict())
    change(state)
    return st_save(state, metadata={"format": io.FORMAT, "architecture": "transformer", "config": CFG.to_json()})


def header_says(edit) -> bytes:
    """MINE with its JSON header changed by ``edit(header)`` and the data left as it was: a header that lies."""
    length = int.from_bytes(MINE[:8], "little")
    header = json.loads(MINE[8 : 8 + length])
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + MINE[8 + length :]


def metadata_says(**fields) -> bytes:
    return header_says(lambda header: header["__metadata__"].update(fields))


def last_tensor(header: dict) -> dict:
    return max((entry for name, entry in header.items() if name != "__metadata__"), key=lambda e: e["data_offsets"][1])


def floats_as(dtype: torch.dtype):
    return lambda state: state.update({k: v.to(dtype) for k, v in state.items() if v.is_floating_point()})


DAMAGED = "the file is damaged and cannot be read as safetensors ("
NOT_SAFETENSORS = "this is not a safetensors file (its header length is impossible); it may be truncated or another format"
NOT_STRINGS = "this is not a safetensors file (its metadata is not a JSON object of strings)"
CHECKPOINTS = {  # name: (bytes, the message after the file name; shown as "<name>: <message>. The previous …")
    "empty": (b"", "the file is empty; choose a .safetensors checkpoint saved by this app or mechlib.io.save"),
    "binary garbage": (bytes((i * 7919 + 13) % 256 for i in range(5000)), NOT_SAFETENSORS),
    "truncated in the data": (MINE[:-100], DAMAGED + "blocks.0.attn.mask's bytes (8,828–8,892) do not fit its shape "
                                                      "and the file: the file is cut or damaged)"),
    "truncated in the header": (MINE[:100], NOT_SAFETENSORS),
    "header longer than the file": (struct.pack("<Q", len(MINE)) + MINE[8:], NOT_SAFETENSORS),
    "header length 2**63": (struct.pack("<Q", 2**63) + MINE[8:], NOT_SAFETENSORS),
    "offsets past the end": (header_says(lambda h: last_tensor(h)["data_offsets"].__setitem__(1, len(MINE) + 4096)),
                             DAMAGED + "blocks.0.attn.mask's bytes (8,828–14,356) do not fit its shape and the file"),
    "shape × dtype ≠ bytes": (header_says(lambda h: h["embed.W_E"].__setitem__("shape", [30, 17])),
                              "embed.W_E has shape [30, 17], but the config needs [30, 16]"),  # read in the header
    "an unknown dtype": (header_says(lambda h: h["embed.W_E"].__setitem__("dtype", "Q99")),
                         "this is not a safetensors file (embed.W_E has the dtype 'Q99', which is not one of "
                         "safetensors' numbers)"),
    "a tokenizer that is a number": (metadata_says(tokenizer=5), NOT_STRINGS),        # crashed: TypeError
    "a tokenizer that is an object": (metadata_says(tokenizer={"kind": "word", "vocab": []}), NOT_STRINGS),
    "an architecture that is a list": (metadata_says(architecture=["lstm"]), NOT_STRINGS),  # crashed: unhashable
    "+inf weights": (tensors(lambda s: s["embed.W_E"].__setitem__((0, 0), float("inf"))),
                     "embed.W_E holds NaN or infinite values; the checkpoint is corrupt"),
    "-inf weights": (tensors(lambda s: s["unembed.W_U"].__setitem__((3, 1), float("-inf"))),
                     "unembed.W_U holds NaN or infinite values; the checkpoint is corrupt"),
    "NaN in a bias": (tensors(lambda s: s["blocks.0.attn.b_Q"].fill_(float("nan"))),
                      "blocks.0.attn.b_Q holds NaN or infinite values; the checkpoint is corrupt"),
    "int32 weights": (tensors(floats_as(torch.int32)), "weights must be float32 or float64, embed.W_E is torch.int32"),
    "float16 weights": (tensors(floats_as(torch.float16)), "weights must be float32 or float64, embed.W_E is torch.float16"),
    "bfloat16 weights": (tensors(floats_as(torch.bfloat16)), "weights must be float32 or float64, embed.W_E is torch.bfloat16"),
}


@pytest.mark.parametrize("case", list(CHECKPOINTS))
def test_a_bad_checkpoint_is_refused_with_its_reason_and_the_session_keeps_its_model(case):
    data, message = CHECKPOINTS[case]
    at = session_with_my_model()
    at.sidebar.file_uploader[0].upload("bad.safetensors", data).run()
    (error,) = [plain(e.value) for e in at.sidebar.error]
    assert error.startswith(f"bad.safetensors: {message}") and error.endswith(". The previous model stays selected."), error
    assert_my_model_survived(at)


def test_float64_weights_are_a_good_checkpoint():  # the control beside the refused dtypes: same model, exact
    at = session_with_my_model()
    double = tensors(floats_as(torch.float64))
    at.sidebar.file_uploader[0].upload("double.safetensors", double).run()
    assert not at.exception and not at.sidebar.error
    assert list(at.session_state[keys.SESSION_MODELS]) == [LABEL, f"uploaded {short_id(double)}: double.safetensors"]


class Payload:
    """Unpickling this creates ``path``: the proof that a pickle ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_a_pickle_with_a_payload_never_runs(tmp_path, how):
    marker = tmp_path / "pwned"
    if how == "pickle":
        data = pickle.dumps({"embed.W_E": Payload(marker)}, protocol=4)
    else:
        path = tmp_path / "model.pt"
        torch.save({"embed.W_E": Payload(marker)}, path)
        data = path.read_bytes()
    pickle.loads(pickle.dumps(Payload(marker)))  # the control: unpickled, it does create the file
    assert marker.exists()
    marker.unlink()
    at = session_with_my_model()
    at.sidebar.file_uploader[0].upload("model.safetensors", data).run()
    (error,) = [plain(e.value) for e in at.sidebar.error]
    assert error.startswith("model.safetensors: this looks like a pickle/torch.save file, not safetensors; pickles can "
                            "run code, so they are never opened here")
    assert_my_model_survived(at)
    for page in ("app_pages/patterns.py", "app_pages/train.py"):
        at.switch_page(page).run()
    assert not marker.exists()
    assert_my_model_survived(at)


ODD_NAMES = {
    "very long": "a" * 4000 + ".safetensors",
    "newlines": "two\nlines\n===\n    indented.safetensors",  # only AppTest can: browsers send a newline as %0A, kept so
    "right-to-left": "\u202eslebal\u202c \u05e9\u05dc\u05d5\u05dd.safetensors",
    "emoji and zero-width": "\U0001f9e0\u200b\u200dmodel.safetensors",
    "percent-encoded": "%0A%22%3Cb%3E.safetensors",
}
QUOTED = {  # as a refusal quotes them: 80 characters at most, control and bidirectional characters made visible
    "very long": "a" * 80 + "… (4,012 characters)",
    "newlines": "two⟨U+000A⟩lines⟨U+000A⟩===⟨U+000A⟩    indented.safetensors",
    "right-to-left": "⟨U+202E⟩slebal⟨U+202C⟩ \u05e9\u05dc\u05d5\u05dd.safetensors",
    "emoji and zero-width": "\U0001f9e0⟨U+200B⟩⟨U+200D⟩model.safetensors",
}


@pytest.mark.parametrize("case", list(ODD_NAMES))
def test_an_odd_file_name_is_kept_as_typed_whether_the_file_is_good_or_bad(case):
    """The model keeps the name as typed; a refusal quotes it cut to a readable length, with every control and
    bidirectional character visible (a U+202E reversed the rest of the warning line)."""
    name = ODD_NAMES[case]
    at = session_with_my_model()
    at.sidebar.file_uploader[0].upload(name, b"not a checkpoint at all, just words").run()
    (error,) = [e.icon + plain(e.value) for e in at.sidebar.error]  # Streamlit shows a leading emoji as the box's icon
    assert error == f"{QUOTED.get(case, name)}: {NOT_SAFETENSORS}. The previous model stays selected."
    assert_my_model_survived(at)
    at.sidebar.file_uploader[0].upload(name, OTHER).run()  # the same name on a good file: a model under that name
    assert not at.exception and not at.sidebar.error
    other = f"uploaded {short_id(OTHER)}: {name}"
    assert list(at.session_state[keys.SESSION_MODELS]) == [LABEL, other]
    assert at.session_state["model"] == other
    assert any(plain(c.value).endswith(f"{other}; {CFG.n_params():,} parameters, ≈ "
                                       f"{CFG.estimate_mb(batch=1):,.1f} MB with one sequence's activations")
               for c in at.sidebar.caption)
    at.sidebar.selectbox(key="model").set_value(LABEL).run()  # and back to the first: both are kept
    assert not at.exception and at.session_state[keys.MODEL_CHOICE] == ModelChoice("stored", short_id(MINE))
    assert at.session_state[keys.SESSION_MODELS] == {LABEL: short_id(MINE), other: short_id(OTHER)}


# ---------------------------------------------------------------------------------------------
# Training texts uploaded on the Train page

STORY = ("the cat sat on the mat and the dog ran to the park . " * 60).encode()


def train_page_with_a_text() -> AppTest:
    """The session with MINE, on the Train page's "your own model" with an uploaded text it trains on."""
    at = session_with_my_model()
    at.session_state["t_task"], at.session_state["t_data"] = "your own model", "upload"
    at.switch_page("app_pages/train.py").run()
    at.file_uploader(key="train_upload").upload("story.txt", STORY, "text/plain").run()
    assert not at.exception and not at.main.error
    return at


def kept_the_story(at: AppTest) -> None:
    assert any(c.value.startswith("Training text: **story.txt** (") for c in at.caption)
    assert at.button  # the earlier text can still be trained on
    assert_my_model_survived(at)


TEXTS = {  # name: (bytes, the message)
    "binary garbage": (bytes((i * 7919 + 13) % 256 for i in range(20_000)),
                       "the file looks binary, not text; upload a plain .txt file (UTF-8)"),
    "a pickle": (pickle.dumps(Payload("/nonexistent/pwned")) * 50, "the file looks binary, not text"),
    "latin-1": ("le café était très animé, à côté du marché . ".encode("latin-1") * 60,
                "the file is not UTF-8 (bad byte at offset 6); save it as UTF-8 text and upload again"),
    "UTF-16 without its mark, little-endian": (STORY.decode().encode("utf-16-le"),  # was called "binary"
                                               "the file looks like UTF-16 text without a byte-order mark; save it as "
                                               "UTF-8 text and upload again"),
    "UTF-16 without its mark, big-endian": (STORY.decode().encode("utf-16-be"),
                                            "the file looks like UTF-16 text without a byte-order mark"),
    "over 5 MB": (b"word " * (1_048_576 + 1), "the file is 5.0 MB; upload at most 5 MB of text"),
}


@pytest.mark.parametrize("case", list(TEXTS))
def test_a_bad_training_text_is_refused_with_its_reason_and_the_earlier_text_and_models_stay(case):
    data, message = TEXTS[case]
    at = train_page_with_a_text()
    at.file_uploader(key="train_upload").upload("new.txt", data, "text/plain").run()
    (error,) = [plain(e.value) for e in at.main.error]
    assert error.startswith(f"new.txt: {message}") and error.endswith(". The previous data stays selected."), error
    kept_the_story(at)


def test_a_huge_single_line_and_utf16_with_its_mark_are_good_texts():
    at = train_page_with_a_text()
    line = ("the quick brown fox jumps over the lazy dog " * 120_000)[: 5 * 2**20 - 1]  # 5 MB, no newline
    assert "\n" not in line and len(line.encode()) == 5 * 2**20 - 1
    at.file_uploader(key="train_upload").upload("one line.txt", line.encode(), "text/plain").run()
    assert not at.exception and not at.main.error, [e.value for e in at.main.error]
    assert any(c.value == f"Training text: **one line.txt** ({len(line):,} characters)" for c in at.caption)
    assert any("vocabulary 10 (words)" in c.value for c in at.caption)  # <bos>, <unk>, the fox's 8 different words
    text = "le café était très animé . " * 60
    at.file_uploader(key="train_upload").upload("notepad.txt", text.encode("utf-16"), "text/plain").run()
    assert not at.main.error and any(c.value == f"Training text: **notepad.txt** ({len(text):,} characters)"
                                     for c in at.caption)
    assert_my_model_survived(at)


# ---------------------------------------------------------------------------------------------
# Rapid changes: many widget changes in a row, each a rerun, or several at once before one

def test_rapid_sidebar_changes_keep_the_session_models():
    at = session_with_my_model()
    at.sidebar.selectbox(key="model").set_value("random").run()
    for d_model in (512, 16, 1024, 32, 64):  # the sizes expander's slider, dragged back and forth
        at.sidebar.select_slider(key="d_model").set_value(d_model).run()
        assert not at.exception, at.exception
    at.sidebar.select_slider(key="d_model").set_value(16)
    at.sidebar.number_input(key="vocab").set_value(2)
    at.sidebar.number_input(key="ctx").set_value(1)
    at.sidebar.slider(key="layers").set_value(0)
    at.run()  # four changes in one rerun: the smallest model
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]
    cfg = ModelConfig.from_json(at.session_state[keys.MODEL_CHOICE].name)
    assert (cfg.d_model, cfg.d_vocab, cfg.n_ctx, cfg.n_layers) == (16, 2, 1, 0)
    at.sidebar.number_input(key="vocab").set_value(50_000)
    at.sidebar.number_input(key="ctx").set_value(2_048)
    at.sidebar.select_slider(key="d_model").set_value(1024)
    at.sidebar.slider(key="layers").set_value(4)
    at.sidebar.toggle(key="mlp").set_value(True).run()  # five at once, the largest: refused, the last valid sizes stay
    (error,) = [e.value for e in at.sidebar.error]
    assert "above this server's budget" in error and error.endswith("The previous model stays selected.")
    assert ModelConfig.from_json(at.session_state[keys.MODEL_CHOICE].name) == cfg
    assert at.session_state[keys.SESSION_MODELS] == {LABEL: short_id(MINE)}
    at.sidebar.selectbox(key="model").set_value(LABEL).run()
    assert_my_model_survived(at)


def test_rapid_page_and_widget_changes_on_the_session_model():
    at = session_with_my_model()
    at.session_state["input"] = "random tokens"
    for page in ("app_pages/patterns.py", "app_pages/equivalence.py", "app_pages/residual.py",
                 "app_pages/circuits_one.py", "app_pages/circuits_two.py", "app_pages/patterns.py"):
        at.switch_page(page).run()
        assert not at.main.error, (page, [e.value for e in at.main.error])
        assert_my_model_survived(at)
    assert len(at.main.slider) >= 2
    for _ in range(3):
        for slider in at.main.slider:  # every slider of the Patterns page to its far end, then back
            slider.set_value(slider.max).run()
            assert not at.exception, at.exception
        for slider in at.main.slider:
            slider.set_value(slider.min).run()
    assert not at.main.error and [s.value for s in at.main.slider] == [s.min for s in at.main.slider]
    assert_my_model_survived(at)


# ---------------------------------------------------------------------------------------------
# A hostile student's attacks: each refused (or capped) in under 2 s of CPU and 100 MB of growth, the session intact

CPU_S, GROWTH_MB = 2.0, 100.0


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def within_budget(action) -> None:
    """``action()`` in under ``CPU_S`` of this process's CPU and ``GROWTH_MB`` of resident memory."""
    cpu, rss = time.process_time(), rss_mb()
    action()
    assert time.process_time() - cpu < CPU_S and rss_mb() - rss < GROWTH_MB, (time.process_time() - cpu, rss_mb() - rss)


def crafted(metadata: dict, header=None) -> bytes:
    """A small safetensors file: MINE's weights under ``metadata``, its header changed by ``header(h)``."""
    data = st_save(dict(Transformer(CFG).state_dict()), metadata=metadata)
    if header is None:
        return data
    length = int.from_bytes(data[:8], "little")
    h = json.loads(data[8 : 8 + length])
    header(h)
    text = json.dumps(h).encode()
    return struct.pack("<Q", len(text)) + text + data[8 + length :]


ATTACKS = {  # what the hostile-student pass uploaded, and the sentence each now gets
    "an LSTM of a million layers": (
        crafted({"format": io.FORMAT, "architecture": "lstm",
                 "config": json.dumps({"d_vocab": 5, "d_model": 2, "d_hidden": 2, "n_layers": 10**6})}),
        "the checkpoint's model config is invalid: n_layers=1000000 is out of range; choose n_layers between 1 and 48"),
    "shapes that overflow": (
        crafted({"format": io.FORMAT, "config": CFG.to_json()},
                lambda h: h["embed.W_E"].__setitem__("shape", [2**62, 2**62])),
        "embed.W_E has shape [4611686018427387904, 4611686018427387904], but the config needs [30, 16]"),
    "a number of 5,000 digits": (
        crafted({"format": io.FORMAT, "config": CFG.to_json().replace('"seed": 4', '"seed": ' + "9" * 5000)}),
        "the checkpoint's model config is invalid: the config holds a number of 5,000 digits; sizes have at most 30"),
    "a config larger than its file": (
        crafted({"format": io.FORMAT, "config": ModelConfig(n_layers=2, d_model=512, n_heads=8, d_vocab=5000,
                                                             n_ctx=512).to_json()}),
        "the checkpoint's config needs 7,488,392 weights but the file has only"),
}


@pytest.mark.parametrize("case", list(ATTACKS))
def test_an_attack_is_refused_at_once_and_the_session_keeps_its_model(case, monkeypatch):
    data, said = ATTACKS[case]
    at = session_with_my_model()
    within_budget(lambda: at.sidebar.file_uploader[0].upload("attack.safetensors", data).run())
    (error,) = [plain(e.value) for e in at.sidebar.error]
    assert error.startswith(f"attack.safetensors: {said}"), error
    assert_my_model_survived(at)
    validations, validate = [], zoo.from_checkpoint  # the file stays in the uploader: the next reruns remember its
    monkeypatch.setattr(zoo, "from_checkpoint",   # refusal instead of validating it again
                        lambda checkpoint: validations.append(checkpoint == data) or validate(checkpoint))
    at.run()
    at.run()
    assert True not in validations and [plain(e.value) for e in at.sidebar.error] == [error]


def test_a_link_with_a_model_name_of_60000_characters_is_quoted_short():
    asked = "uploaded " + "x" * 60_000
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = asked
    within_budget(at.run)
    (note,) = [plain(w.value) for w in at.main.warning]
    assert note.startswith(f"The link's model “{asked[:80]}… (60,009 characters)” does not exist on this server")
    assert len(note) < 400 and at.session_state["model"] == "gelu-2l"


def test_a_link_whose_random_sizes_are_refused_opens_the_default_model_and_says_why_on_the_page():
    at = AppTest.from_file(APP, default_timeout=180)
    for key, value in {"model": "random, from sizes", "d_model": "1024", "vocab": "50000", "ctx": "2048",
                       "layers": "4", "mlp": "true"}.items():
        at.query_params[key] = value
    within_budget(at.run)
    (note,) = [w.value for w in at.main.warning]
    assert note.startswith("The random model's sizes are refused: a model of") and "above this server's budget" in note
    assert note.endswith("The default model is shown instead.")
    assert at.session_state[keys.MODEL_CHOICE] == ModelChoice("zoo", "gelu-2l") and not at.sidebar.error and not at.exception


def test_a_zero_layer_model_of_6000_tokens_is_refused_by_its_stated_cost_before_any_table_is_built(monkeypatch):
    """A valid 200 KB upload whose 6,000-token vocabulary made the zero-layer section build dense 6,000 × 6,000
    float64 tables and run a 1,000-step fit: 15–20 minutes at 2.25 GB. Its cost is stated, and above the budget."""
    from mechlib import bigrams
    from mechlib.data import WordTokenizer, builtin_text

    cfg = ModelConfig(n_layers=0, d_model=4, n_heads=1, d_vocab=6000, n_ctx=8, positional="shortformer", seed=1)
    model = Transformer(cfg)
    words = WordTokenizer.fit(builtin_text(), 6000).vocab  # the built-in text has ~3,200 distinct words
    model.tokenizer = WordTokenizer(words + [f"made-up-{i}" for i in range(6000 - len(words))])
    data = io.to_bytes(model)
    built, build = [], bigrams.corpus_table
    monkeypatch.setattr(bigrams, "corpus_table", lambda tokens, d_vocab: built.append(d_vocab) or build(tokens, d_vocab))
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.sidebar.file_uploader[0].upload("wide.safetensors", data).run()
    at.switch_page("app_pages/circuits_zero.py").run()
    at.radio(key="c_model_attn-only-0l").set_value("the sidebar's model")
    within_budget(at.run)
    assert any(c.value.startswith("Cost: about 3,600 MB for the 6,000 × 6,000 bigram tables") for c in at.main.caption)
    (error,) = [e.value for e in at.main.error]
    assert error.startswith("zero_layer on this model would need about 3,600 MB, above this server's budget of")
    assert 6000 not in built and not at.exception
