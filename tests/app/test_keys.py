"""The app's session keys and the sidebar's model choice, named and typed: the live class tells the app's own keys
from a teacher's settings by the one rule in ``classroom.keys``, and a choice writes the notebook line that loads it."""

import pytest

from classroom import keys
from classroom.model_choice import ChoiceError, ModelChoice


def test_the_apps_own_keys_are_never_a_teachers_setting_whatever_their_spelling():
    own = [keys.SESSION_ID, keys.MODEL_CHOICE, keys.SESSION_MODELS, keys.SELECT_MODEL, keys.URL_NOTES,
           keys.REFUSED_UPLOADS, keys.TRAIN_TEXT, keys.LAST_TRAINED, keys.BAR_GUESS, keys.ROOM, keys.COUNTS,
           keys.ROOM_FOLLOW, keys.ROOM_NAME, keys.ROOM_SHOW_JOIN, keys.reveal("rank"), keys.guess("rank"),
           keys.asked("rank"), keys.predict("rank"), keys.exercise("rank"), keys.pin("k3q7m2xa4rbt5wzd")]
    assert all(keys.own(key) for key in own)
    settings = [keys.SEED, keys.MODEL, keys.PROMPT, keys.PHASE_STEP, keys.PRESENT, keys.PART, keys.SUB, "layer", "head"]
    assert not any(keys.own(key) for key in settings)
    assert keys.own(("a", "tuple")) and len(set(own)) == len(own)  # one name, one key


def test_each_kind_of_choice_writes_the_line_a_notebook_loads_it_with():
    assert ModelChoice("zoo", "attn-only-2l").snippet_line() == "model = zoo.load('attn-only-2l')"
    random = ModelChoice("random", '{"n_layers": 1}')
    assert random.snippet_line() == """model = zoo.random_model(ModelConfig.from_json('{"n_layers": 1}'))"""
    assert random.snippet_imports() == ["from mechlib.config import ModelConfig"]
    assert ModelChoice("folder", "/models/gpt2", (1, 2)).snippet_line() == (
        "model = zoo.from_folder(Path('/models/gpt2'))  # from the class's models folder")
    assert ModelChoice("stored", "k3q7m2xa4rbt5wzd").snippet_line().startswith("model = zoo.from_checkpoint(")
    assert ModelChoice("zoo", "gelu-2l") == ModelChoice("zoo", "gelu-2l") != ModelChoice("stored", "gelu-2l")


def test_a_choice_that_cannot_be_opened_says_why_and_builds_nothing():
    with pytest.raises(ChoiceError, match="no longer in the models folder"):
        ModelChoice("folder", "gone").load()
    with pytest.raises(ChoiceError):
        ModelChoice("stored", "aaaaaaaaaaaaaaaa").load()
