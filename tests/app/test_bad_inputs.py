"""AppTest for bad inputs that broke the app: crafted links, an LSTM checkpoint uploaded, the smallest vocabulary.
Each one gets a message naming what was wrong, and the session's models survive it."""

import pytest
from streamlit.testing.v1 import AppTest

from classroom import keys
from classroom.page.text import literal
from classroom.state.store import STORE, short_id
from mechlib import io
from mechlib.config import ModelConfig
from mechlib.lstm import LSTM, LSTMConfig
from mechlib.model import Transformer
from tests.app.helpers import APP, shown_checks


def open_link(**params) -> AppTest:
    """The app opened from a link with ``params`` in its query string."""
    at = AppTest.from_file(APP, default_timeout=180)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


RANDOM = "random, from sizes"  # the sidebar's model as a link names it: the option's label


def warnings(at: AppTest) -> list[str]:
    """The notes on what the link asked for and did not get: on the page, above its content."""
    return [w.value for w in at.main.warning if w.icon == ":material/link_off:"]


@pytest.mark.parametrize("raw, seed, message", [
    ("1e400", 2**31 - 1, "The link's seed is outside 0–2,147,483,647, so 2,147,483,647 is used."),
    ("inf", 2**31 - 1, "The link's seed is outside 0–2,147,483,647, so 2,147,483,647 is used."),
    ("-1e400", 0, "The link's seed is outside 0–2,147,483,647, so 0 is used."),
    ("-5", 0, "The link's seed is outside 0–2,147,483,647, so 0 is used."),
    ("nan", 0, "The link's seed is not a whole number, so it is ignored."),
    ("2.5", 0, "The link's seed is not a whole number, so it is ignored."),
    ("**bold**", 0, "The link's seed is not a whole number, so it is ignored."),
])
def test_a_crafted_seed_is_clamped_or_dropped_with_a_warning(raw, seed, message):
    at = open_link(seed=raw)
    assert not at.exception, at.exception
    assert warnings(at) == [message]
    assert at.sidebar.number_input(key="seed").value == seed
    assert at.session_state["model"] == "gelu-2l" and len(at.main.markdown) > 0  # the page under it still works
    assert at.sidebar.caption[-1].value.startswith("Requests above")


def test_a_good_seed_in_a_link_is_kept_without_a_warning():
    at = open_link(seed="17")
    assert not at.exception and warnings(at) == []
    assert at.sidebar.number_input(key="seed").value == 17


@pytest.mark.parametrize("key, raw, field, value", [
    ("vocab", "1e400", "d_vocab", 50_000),
    ("vocab", "-1e400", "d_vocab", 2),
    ("vocab", "nan", "d_vocab", 1_000),
    ("ctx", "1e400", "n_ctx", 2_048),
    ("ctx", "inf", "n_ctx", 2_048),
    ("ctx", "0", "n_ctx", 1),
    ("layers", "1e400", "n_layers", 4),
])
def test_crafted_random_model_sizes_are_clamped_or_dropped(key, raw, field, value):
    at = open_link(model=RANDOM, **{key: raw})
    assert not at.exception, at.exception
    assert len(warnings(at)) == 1 and f"The link's {key} is " in warnings(at)[0]
    assert at.session_state["model"] == "random"
    assert getattr(ModelConfig.from_json(at.session_state[keys.MODEL_CHOICE].name), field) == value


@pytest.mark.parametrize("asked", ["uploaded: someone-else.safetensors", "zoo: no-such-model", "**bold**"])
def test_a_link_to_a_model_that_does_not_exist_says_so_and_shows_the_default(asked):
    at = open_link(model=asked)
    assert not at.exception
    assert warnings(at) == [f"The link's model “{literal(asked)}” does not exist on this server: it is none of the "
                            "zoo's models, and no trained model has that id (trained models are kept for a while, "
                            "then expire). The default model is shown instead."]
    assert at.sidebar.selectbox(key="model").value == "gelu-2l" and "model" not in at.query_params


def test_a_link_to_a_model_another_session_trained_lists_and_opens_it_here():
    data = io.to_bytes(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=30, n_ctx=8, seed=9)))
    label = STORE.put("trained", "1L×2H d16, for the class", data, "a teacher").label
    for asked in (label, label.split(":")[0]):  # the whole label, or only "trained <id>"
        at = open_link(model=asked)
        assert not at.exception and warnings(at) == []
        assert at.sidebar.selectbox(key="model").value == label
        assert at.session_state[keys.SESSION_MODELS] == {label: short_id(data)}  # its id: the store keeps the bytes
        assert at.query_params["model"] == label


def test_a_link_to_an_expired_model_says_why():
    at = open_link(model="trained abcdefghijkmnpqr: gone")
    assert warnings(at) == ["The link's model: no model with id abcdefghijkmnpqr is kept on this server: it was never made "
                            "here, or it expired (12 h after its last use, or pushed out by newer ones). The default "
                            "model is shown instead."]
    assert at.sidebar.selectbox(key="model").value == "gelu-2l"


def test_a_zoo_model_named_bare_in_a_link_opens_it():
    at = open_link(model="attn-only-2l")
    assert warnings(at) == [] and at.sidebar.selectbox(key="model").value == "attn-only-2l"


def test_a_link_to_a_shipped_model_opens_it_without_a_warning():
    at = open_link(model="zoo: attn-only-1l")
    assert warnings(at) == [] and at.sidebar.selectbox(key="model").value == "attn-only-1l"


def test_an_lstm_checkpoint_is_refused_and_the_uploaded_model_stays():
    at = open_link()
    mine = io.to_bytes(Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=30, n_ctx=8, seed=4)))
    at.sidebar.file_uploader[0].upload("mine.safetensors", mine).run()
    label = f"uploaded {short_id(mine)}: mine.safetensors"
    assert at.session_state["model"] == label
    at.sidebar.file_uploader[0].upload("lstm.safetensors", io.to_bytes(LSTM(LSTMConfig(d_vocab=30, d_model=8, d_hidden=8)))).run()
    assert not at.exception, at.exception
    assert [e.value for e in at.sidebar.error] == [
        "lstm.safetensors: this is an LSTM checkpoint; the pages study transformers, and the LSTM page uses its own "
        "models. The previous model stays selected."]
    assert list(at.session_state[keys.SESSION_MODELS]) == [label]
    assert at.session_state["model"] == label
    assert any("1 layers × 2 heads" in c.value for c in at.sidebar.caption)


def test_the_uploader_and_mechlib_state_the_same_cap():
    at = open_link()
    stated = at.sidebar.file_uploader[0].proto.max_upload_size_mb
    with pytest.raises(io.CheckpointError, match=f"checkpoints may be at most {stated} MB$"):
        io.load(bytes(io.MAX_BYTES + 1))


def test_the_patterns_page_works_at_the_smallest_vocabulary():
    at = open_link(model=RANDOM, vocab="2")
    assert ModelConfig.from_json(at.session_state[keys.MODEL_CHOICE].name).d_vocab == 2 and warnings(at) == []
    at.switch_page("app_pages/patterns.py").run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    shown = shown_checks(at)
    assert len(shown) == 5 and all(passed for *_, passed in shown), shown
    at.slider(key="dest").set_value(3).run()
    assert not at.exception and all(passed for *_, passed in shown_checks(at))


CRAFTED = "**bold** $x$ ![i](http://example.com/a.png) :red[r].safetensors"  # a file name that is Markdown
CRAFTED_SHOWN = r"\*\*bold\*\* \$x\$ \!\[i\]\(http\://example.com/a.png\) \:red\[r\].safetensors"
TOKENS = ["<b>z</b>", "$y$", "**x**", "![i](http://example.com/a.png)"]  # a checkpoint's tokenizer entries


def crafted_model() -> Transformer:
    from mechlib.data import WordTokenizer

    model = Transformer(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=6, n_ctx=8, seed=4))
    model.tokenizer = WordTokenizer(["<bos>", "<unk>", *TOKENS])
    return model


def test_a_crafted_file_name_and_tokenizer_show_as_typed():
    at = open_link()
    crafted = io.to_bytes(crafted_model())
    at.sidebar.file_uploader[0].upload(CRAFTED, crafted).run()
    assert not at.exception, at.exception
    label = f"uploaded {short_id(crafted)}: {CRAFTED}"
    assert at.session_state["model"] == label  # the label itself is kept as typed
    shown = " ".join(c.value for c in at.sidebar.caption)
    assert f"uploaded {short_id(crafted)}\\: {CRAFTED_SHOWN}" in shown and "**bold**" not in shown and "![" not in shown
    at.sidebar.file_uploader[0].upload(CRAFTED, b"\x80\x04\x95 pickle").run()
    assert [e.value for e in at.sidebar.error][0].startswith(f"{CRAFTED_SHOWN}: this looks like a pickle")
    assert at.session_state["model"] == label and len(at.session_state[keys.SESSION_MODELS]) == 1

    at.session_state["input"] = "random tokens"
    at.switch_page("app_pages/patterns.py").run()  # the refused file's error stays in the sidebar, the page works
    assert not at.exception and not at.main.error, (at.exception, [e.value for e in at.main.error])
    (line,) = [m.value for m in at.markdown if m.value.startswith("Into position **")]  # the messages section's
    assert "![" not in line and line.count("**") == 2                                 # only bold is the position
    assert any(f"('{token}')" in line for token in [r"\*\*x\*\*", r"\$y\$", r"\<b\>z\</b\>",
                                                    r"\!\[i\]\(http\://example.com/a.png\)"]), line
    import json
    ticks = [tick for chart in at.get("plotly_chart") for tick in json.loads(chart.proto.spec)["data"][0].get("x", [])
             if isinstance(tick, str)]
    assert any("&lt;b&gt;z&lt;/b&gt;" in tick for tick in ticks) and not any("<b>" in tick for tick in ticks)
    assert all(passed for *_, passed in shown_checks(at))


def test_a_crafted_training_text_name_shows_as_typed():
    from tests.app.helpers import open_page

    at = open_page("app_pages/train.py", t_task="your own model", t_data="upload")
    text = ("the **x** and $y$ sat on the mat . " * 80).encode()
    at.file_uploader(key="train_upload").upload("**t** $z$.txt", text, "text/plain").run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert any(r"Training text: **\*\*t\*\* \$z\$.txt** (" in c.value for c in at.caption)
    at.file_uploader(key="train_upload").upload("$$![i](http://example.com/a.png).txt", b"", "text/plain").run()
    assert any(e.value.startswith(r"\$\$\!\[i\]\(http\://example.com/a.png\).txt: the file is empty") for e in at.error)
    assert at.button  # the earlier text can still be trained on


def test_a_link_to_the_zoos_lstm_says_why_it_is_not_in_the_list():
    at = open_link(model="lstm")
    assert warnings(at) == ["The link's model “lstm” is the zoo's LSTM: the sidebar's pages study transformers, and the "
                            "LSTM page uses it on its own. The default model is shown instead."]
    assert at.sidebar.selectbox(key="model").value == "gelu-2l"


def test_a_links_long_prompt_is_cut_to_what_the_field_takes():
    """Issue 38 (low): a link's 400,000-character prompt (Streamlit reads links up to 524,288) went back to the
    browser on every run; the field's own limit held for typing only."""
    at = open_link(prompt="the class " * 40_000, input="prompt")
    assert not at.exception, at.exception
    assert warnings(at) == ["The link's prompt is 400,000 characters; its first 2,000 are used."]
    assert len(at.query_params["prompt"]) == 2_000
