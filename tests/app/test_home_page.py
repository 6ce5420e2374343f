"""The start page: the lesson path's table and links, each opening its page at the step's section."""

import pytest

from tests.app.helpers import open_page
import lessons


def test_the_lesson_path_lists_every_step_with_both_plans_minutes():
    at = open_page("app_pages/home.py")
    table = at.dataframe[0].value
    assert list(table["topic"]) == [step.topic for step in lessons.STEPS]
    assert list(table["class (50 min)"]) == [f"{s.class_minutes} min" if s.class_minutes else "lab only"
                                             for s in lessons.STEPS]
    assert any("SHAP" in md.value and "LIME" in md.value for md in at.markdown)


@pytest.mark.parametrize("step", [step for step in lessons.STEPS if step.query], ids=lambda step: step.topic)
def test_a_steps_settings_open_its_section(step):
    at = open_page(step.page, **step.query)
    for key, value in step.query.items():
        assert at.session_state[key] == value
    assert not at.exception and not at.error
