"""AppTest for the Train page: widgets move, a short training run completes and joins the sidebar."""

import base64
import dataclasses
import json
import re
import threading
import time

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from classroom import keys
from classroom.training import local_queue
from classroom.training.claim import one_per_session
from classroom.training.door import TRAININGS
from mechlib import train
from tests.app.helpers import open_exports, open_page


def formed(row: dict[str, float]) -> bool:
    """The preset's own test of its bar (``Preset.formed``) on one evaluation of a history."""
    metrics = {key: row[key] for key in ("repeat_loss", "induction", "prev_token")}
    return train.INDUCTION_PRESET.formed(train.Progress(row["step"], 0, row["loss"], metrics, 0.0, 0.0))


def bar_revealed(at: AppTest) -> str:
    """The answer the bar question shows after the run (its prediction was asked before it)."""
    return next(found[1] for m in at.markdown if (found := re.search(r"This run: \*\*(.+?)\*\*", m.value)))


def bar_answer(at: AppTest) -> str:
    """What the bar question should reveal: whether any evaluation of this run passed the preset's bar."""
    return "yes" if any(formed(row) for row in at.session_state[keys.LAST_TRAINED]["history"]) else "no"


def train_page(**state) -> AppTest:
    """The Train page on "your own model"; the preset's tests open it on its default, the preset."""
    return open_page("app_pages/train.py", **{"t_task": "your own model", **state})


def test_the_preset_forms_an_induction_circuit_drawn_live_and_offers_it_to_the_circuits_page():
    at = open_page("app_pages/train.py")
    assert at.radio(key="t_task").value == train.INDUCTION_PRESET.name
    at.radio(key="predict bar").set_value("no").run()  # predicted before the run, as the page asks
    at.button[0].click().run(timeout=120)
    assert not at.exception, at.exception
    last = at.session_state[keys.LAST_TRAINED]
    report = last["last"]
    assert last["preset"] and at.session_state["model"] == last["label"] and report.patterns.shape == (2, 1, 33, 33)
    watched = train.watch_sequence(train.INDUCTION_PRESET.cfg.d_vocab, last["length"])  # [1 33]
    assert report.watched == tuple(watched[0].tolist()) and len(last["labels"]) == 33  # the hover view's tokens
    message = next(s.value for s in at.success if "The circuit check finds it" in s.value)
    steps, seconds, induction, previous = re.search(
        r"Training stopped at step ([\d,]+) after ([\d.]+) s \(evaluations included\): induction score (\d\.\d\d), "
        r"previous-token score (\d\.\d\d), past the preset's bar", message).groups()
    assert float(seconds) == round(report.elapsed_s, 1) and int(steps) == report.step == last["history"][-1]["step"]
    assert float(induction) >= 0.9 and float(previous) >= 0.5
    c = last["circuit"]
    assert c.found and f"{c.induction} an induction head ({c.induction_score:.2f}) that falls to {c.ablated_score:.2f}" in message
    assert c.ablated_score < 0.2 and at.get("page_link")  # the link to the Circuits page
    assert at.session_state["c_model_attn-only-2l"] == "the sidebar's model"  # the Circuits page opens on it
    assert bar_revealed(at) == bar_answer(at) == "yes"  # the preset stops at its first evaluation past the bar
    assert any("You predicted **no** before it ran. This run: **yes** :red[**✗ not what you predicted**]" in m.value
               for m in at.markdown)


def test_a_preset_run_that_has_not_formed_the_circuit_says_so(monkeypatch):
    monkeypatch.setattr(train, "INDUCTION_PRESET", dataclasses.replace(train.INDUCTION_PRESET, steps=25))
    at = open_page("app_pages/train.py")
    at.button[0].click().run(timeout=120)
    assert not at.exception, at.exception
    assert not at.success and not at.get("page_link")
    warning = at.warning[0].value
    assert re.search(r"Training stopped at step 25 after [\d.]+ s \(evaluations included\): induction score 0\.\d\d, "
                     r"previous-token score 0\.\d\d, short of the preset's bar\. The circuit check finds no induction "
                     r"circuit: ", warning)
    assert bar_revealed(at) == bar_answer(at) == "no"  # the same question, answered "yes" on the full preset above
    assert any("within the 25 steps set?" in m.value for m in at.markdown)


def test_defaults_show_sizes_memory_and_queue():
    at = train_page()
    caption = next(c.value for c in at.caption if "parameters" in c.value)
    assert "MB while training" in caption and "at most 2 trainings run at once" in caption
    assert at.radio(key="t_data").value == "random"


@pytest.mark.parametrize("key, value", [("t_layers", 1), ("t_heads", 4), ("t_ctx", 64), ("t_mlp", True), ("t_ln", True),
                                        ("t_repeats", 0.0), ("t_steps", 100), ("t_lr", 1e-3), ("t_d_model", 128)])
def test_each_widget_moves(key, value):
    at = train_page(t_data="words")
    for kind in ("slider", "select_slider", "toggle"):
        try:
            getattr(at, kind)(key=key).set_value(value).run()
            break
        except KeyError:
            continue
    assert not at.exception and not at.error
    assert at.session_state[key] == value


def test_a_short_training_run_completes_and_joins_the_sidebar():
    at = train_page(t_d_model=32, t_heads=2, t_ctx=32, t_data="random", t_steps=50)
    at.button[0].click().run()
    assert not at.exception, at.exception
    last = at.session_state[keys.LAST_TRAINED]
    assert last["label"] in at.session_state[keys.SESSION_MODELS]
    assert at.session_state["model"] == last["label"]          # the sidebar selected it
    assert at.session_state[keys.MODEL_CHOICE].kind == "stored"
    assert [row["step"] for row in last["history"]][-1] == 50
    assert re.fullmatch(r"trained [a-z2-7]{16}: 2L×2H d32 ctx 32, random tokens with repeats, 50 steps, lr 0\.01, seed 0",
                        last["label"]), last["label"]  # the store's short id, then the settings
    result = next(s.value for s in at.success if "Final loss" in s.value)
    seconds, rate = (float(x) for x in re.search(r"Training took ([\d.]+) s here \(([\d.]+) steps/s\)", result).groups())
    assert seconds == round(last["seconds"], 1) and 0 < last["seconds"] < 120  # measured, not a literal
    assert rate == pytest.approx(50 / last["seconds"], abs=0.06)


def test_help_states_no_made_up_duration():
    help_text = train_page().radio(key="t_data").help
    assert "fastest" in help_text and not re.search(r"\d+ ?s\b", help_text)


def test_each_data_source_prepares_with_its_vocabulary():
    for source, vocab in (("words", "vocabulary 1,000 (words)"), ("chars", "(characters)"), ("random", "vocabulary 100 (random ids)")):
        at = train_page(t_data=source)
        assert not at.error and any(vocab in c.value for c in at.caption), source


def test_upload_is_required_before_training_on_it():
    at = train_page(t_data="upload")
    assert any("upload a .txt file" in e.value for e in at.error)
    assert not at.main.button  # nothing to train on yet (the sidebar's buttons are the app's: join a class)


def test_text_upload_is_validated_and_a_bad_file_keeps_the_previous_text():
    at = train_page(t_data="upload")
    good = ("the cat sat on the mat and the dog ran to the park . " * 60).encode()
    at.file_uploader(key="train_upload").upload("story.txt", good, "text/plain").run()
    assert not at.exception and not at.error
    assert any("Training text: **story.txt**" in c.value for c in at.caption)
    assert any("vocabulary" in c.value and "(words)" in c.value for c in at.caption)
    at.file_uploader(key="train_upload").upload("photo.txt", b"\x89PNG\r\n\x1a\n\x00\x00" * 50, "text/plain").run()
    assert any("photo.txt: the file looks binary" in e.value and "previous data stays selected" in e.value for e in at.error)
    assert any("Training text: **story.txt**" in c.value for c in at.caption)
    assert at.main.button  # the earlier text can still be trained on


def test_two_trainings_get_two_entries_with_their_settings():
    at = train_page(t_d_model=32, t_heads=2, t_ctx=32, t_steps=50)
    at.button[0].click().run()
    at.select_slider(key="t_lr").set_value(1e-3).run()
    at.button[0].click().run()
    labels = list(at.session_state[keys.SESSION_MODELS])
    assert len(labels) == 2 and "lr 0.01" in labels[0] and "lr 0.001" in labels[1]
    assert at.session_state["model"] == labels[1]


TINY = {"t_d_model": 32, "t_heads": 2, "t_ctx": 32, "t_data": "random", "t_steps": 50}


def download_buttons(at: AppTest) -> list[str]:
    return [b.proto.label for b in at.get("download_button")]


@pytest.mark.parametrize("invalid, message", [
    ({"t_data": "upload"}, "upload a .txt file to train on it"),  # "upload" with no file yet
    ({"t_layers": 4, "t_d_model": 256, "t_heads": 16, "t_ctx": 128, "t_mlp": True}, "above this server's budget"),
])
def test_invalid_settings_say_why_and_keep_the_last_trained_model_and_its_download(invalid, message):
    at = train_page(**TINY)
    at.button[0].click().run()
    label = at.session_state[keys.LAST_TRAINED]["label"]
    assert download_buttons(at).count("Download as .safetensors") == 1
    for key, value in invalid.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, at.exception
    assert [e.value for e in at.main.error if message in e.value], [e.value for e in at.main.error]
    assert not at.main.button  # nothing to train with these settings
    assert any(s.value == "The model you trained last" for s in at.subheader)
    assert download_buttons(at).count("Download as .safetensors") == 1
    assert at.session_state["model"] == label and label in at.session_state[keys.SESSION_MODELS]


def spy_on_progress(monkeypatch) -> list[str]:
    """Every text a progress bar is updated with, in order (the page's bar is gone once the training ends)."""
    from streamlit.elements.progress import ProgressMixin

    texts, original = [], ProgressMixin.progress

    def progress(self, value, text=None, **kwargs):
        texts.append(text)
        return original(self, value, text, **kwargs)

    monkeypatch.setattr(ProgressMixin, "progress", progress)
    return texts


def test_a_waiting_training_shows_its_place_and_the_estimated_wait_then_the_time_left(monkeypatch):
    queue = local_queue.TrainingQueue(limit=1)  # this server's queue, fresh: one slot, no training measured yet
    monkeypatch.setattr(local_queue, "QUEUE", queue)
    texts = spy_on_progress(monkeypatch)
    at = train_page(**TINY)
    holding = threading.Event()

    def another_session():  # holds the only slot 2 s: 1 s before its first step, then at step 50 of 100 after 30 s
        with queue.slot(100, on_wait=lambda p, _: None) as ticket:
            holding.set()
            time.sleep(1.0)
            ticket.started = time.monotonic() - 30.0
            ticket.advance(50)
            time.sleep(1.0)

    holder = threading.Thread(target=another_session)
    holder.start()
    holding.wait()
    at.button[0].click().run()
    holder.join()
    assert not at.exception, at.exception
    assert len(at.session_state[keys.SESSION_MODELS]) == 1  # it trained once the slot freed
    waiting = [t for t in texts if t and t.startswith("Waiting for a free training slot: position 1 in the queue "
                                                      "(1 of 1 running) · ")]
    unknown = [i for i, t in enumerate(waiting) if t.endswith("no training has finished on this server yet to "
                                                              "estimate the wait")]
    estimated = [(i, int(m.group(1))) for i, t in enumerate(waiting)
                 if (m := re.search(r"about (\d+) s until a slot frees, from the trainings measured here$", t))]
    assert unknown and estimated and len(unknown) + len(estimated) == len(waiting), waiting
    assert max(unknown) < min(i for i, _ in estimated)  # no estimate before the running one's first step
    assert all(30 <= s <= 32 for _, s in estimated), estimated  # its 50 steps to go at its 50 steps per 30 s

    running = [re.search(r"^step (\d+) of at most 50 · ([\d.]+) s · \d+ steps/s · about (\d+) s left", t or "")
               for t in texts]
    running = [(int(m.group(1)), float(m.group(2)), int(m.group(3))) for m in running if m]
    assert running and running[-1][0] == 50 and running[-1][2] == 0, texts
    for step, elapsed, left in running:  # this run's own rate, as shown beside it (elapsed to 0.1 s)
        assert abs(left - (50 - step) * elapsed / step) <= 0.5 + 0.05 * (50 - step) / step + 1e-9, (step, elapsed, left)


def test_a_second_training_from_the_same_session_is_refused_while_its_first_holds_a_place(monkeypatch):
    queue = local_queue.TrainingQueue(limit=2)
    monkeypatch.setattr(local_queue, "QUEUE", queue)
    at = train_page(**{keys.SESSION_ID: "this session"}, **TINY)
    inside, release = threading.Event(), threading.Event()

    def first():  # this session's earlier run, still holding its claim and its slot (as ``LocalTrainings.train``)
        with one_per_session(TRAININGS.claims, "this session"), queue.slot(50, on_wait=lambda p, _: None):
            inside.set()
            release.wait()

    earlier = threading.Thread(target=first)
    earlier.start()
    inside.wait()
    at.button[0].click().run()
    assert not at.exception, at.exception
    assert [w.value for w in at.warning] == [
        "Not started: this session already has a training running or waiting for a slot; one training per session at "
        "a time. Any press or change on this page stops the earlier one at its next step; press the button again then."]
    assert keys.LAST_TRAINED not in at.session_state and queue.running == 1  # nothing trained, the slot left free
    release.set()
    earlier.join()
    at.button[0].click().run()  # once it has stopped, the session trains
    assert not at.warning and len(at.session_state[keys.SESSION_MODELS]) == 1


FLOAT32_REL = 1e-6  # an evaluation on one thread and on two rounds differently in float32's last bits


def close(ours, theirs) -> bool:
    """Two figures' JSON equal, except that numbers (plain, or a typed array in base64 of the same shape) may differ by
    ``FLOAT32_REL`` of their size."""
    if isinstance(ours, dict) and "bdata" in ours and isinstance(theirs, dict) and ours.get("shape") == theirs.get("shape"):
        ours, theirs = (np.frombuffer(base64.b64decode(x["bdata"]), x["dtype"]) for x in (ours, theirs))
        return ours.shape == theirs.shape and np.allclose(ours, theirs, rtol=FLOAT32_REL, atol=FLOAT32_REL)
    if isinstance(ours, dict):
        return isinstance(theirs, dict) and ours.keys() == theirs.keys() and all(close(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, list):
        return isinstance(theirs, list) and len(ours) == len(theirs) and all(map(close, ours, theirs))
    if isinstance(ours, float):
        return isinstance(theirs, (int, float)) and abs(ours - theirs) <= FLOAT32_REL * max(abs(ours), 1.0)
    return ours == theirs


def test_each_result_figures_snippet_trains_again_and_rebuilds_its_numbers_within_float32_rounding():
    """A training is deterministic for its config and seed, so each snippet's figure has the shown figure's data. The
    snippet runs here, in this process, on its threads; the app's training ran in a worker, on one thread beside a
    class and on every core when it is quiet: the steps' weights are the same bit for bit (tests/app/test_workers.py),
    but an evaluation's sums (the losses, the watched patterns) split over threads round differently in float32's
    last bits (``FLOAT32_REL``)."""
    at = train_page(**TINY)
    at.button[0].click().run()
    assert not at.exception, at.exception
    open_exports(at)
    snippets = [code.value for code in at.code if code.value.rstrip().endswith("fig.show()")]
    charts = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    assert len(snippets) == len(charts) == 2
    assert "tokenizer, batches = data.training_data('random', 32, 1.0)" in snippets[0]
    assert "result = train.train(cfg, batches, 50, lr=0.01, seed=0, tokenizer=tokenizer, eval_every=1, watch=15" in snippets[0]
    for snippet, chart in zip(snippets, charts):
        namespace: dict = {}
        began = time.monotonic()
        exec(compile(snippet.replace("fig.show()", ""), "<snippet>", "exec"), namespace)  # noqa: S102
        assert time.monotonic() - began < 60, snippet  # seconds on an idle core; a minute on a loaded one
        fig = json.loads(namespace["fig"].to_json())
        shown = chart["layout"]["title"]["text"].replace("<br>", " ")  # the page wraps a title to the chart's width
        assert fig["layout"]["title"]["text"] == shown and close(fig["data"], chart["data"]), snippet
    assert close(namespace["result"].history, at.session_state[keys.LAST_TRAINED]["history"])


def test_the_bar_question_on_a_short_own_training_and_presentation_mode():
    at = train_page(**TINY)
    at.button[0].click().run()
    assert bar_revealed(at) == bar_answer(at) == "no"
    assert any("within the 50 steps set?" in m.value for m in at.markdown)
    at.toggle(key="present").set_value(True).run()
    assert not at.exception, at.exception
    assert [h.value for h in at.subheader] == ["The model you trained last"]
    assert {"Train", "Next"} <= {b.label for b in at.button}  # Next: the part's second chart is a slide of its own
    # the lesson's page before this one: which input, or which mechanism (lessons.ROUTE)
    assert [(link.proto.label, link.proto.page) for link in at.get("page_link")] == [("Previous", "dictionary")]


def test_the_presets_time_left_is_to_its_usual_stop_with_the_bound_named_as_one(monkeypatch):
    """The preset stops once its circuit forms, near ``usual_steps``: the time left shown is to that step at the run's
    own rate, beside the bound to its last step ("at most"); past the usual stop only the bound is left."""
    texts = spy_on_progress(monkeypatch)
    monkeypatch.setattr(train, "INDUCTION_PRESET", dataclasses.replace(train.INDUCTION_PRESET, steps=100, usual_steps=50))
    at = open_page("app_pages/train.py")
    next(b for b in at.button if b.label == "Watch an induction head form").click().run(timeout=300)
    assert not at.exception, at.exception
    before = [tuple(float(x) for x in m.groups()) for t in texts if (m := re.search(
        r"^step (\d+) of at most 100 · ([\d.]+) s · \d+ steps/s · usually stops near step 50: about (\d+) s left, at "
        r"most (\d+) s", t or ""))]
    past = [int(m.group(1)) for t in texts if (m := re.search(
        r"^step (\d+) of at most 100 · [\d.]+ s · \d+ steps/s · past step 50, where it usually stops: at most \d+ s left",
        t or ""))]
    assert before and past and max(step for step, *_ in before) <= 50 < min(past), texts
    for step, elapsed, left, most in before:  # this run's own rate, as shown beside it (elapsed to 0.1 s)
        slack = 0.5 + 0.05 * (100 - step) / step
        assert abs(left - (50 - step) * elapsed / step) <= slack and abs(most - (100 - step) * elapsed / step) <= slack
