"""The start page: the lesson path's links, each opening its page at the step's first stop, and in presentation
mode a title slide whose Next opens the lesson."""

import pytest

from tests.app.helpers import open_page
from classroom import lessons


def links(at) -> list[tuple[str, str, str]]:
    """(label, page's URL path, query string) of every page link the run drew, in order."""
    return [(link.proto.label, link.proto.page, link.proto.query_string) for link in at.get("page_link")]


def step_links(at) -> list[str]:
    return [label for label, _, _ in links(at) if label.startswith("Step ")]


def test_the_lesson_path_lists_every_step_with_both_plans_minutes():
    at = open_page("app_pages/home.py")
    assert step_links(at) == [
        f"Step {n}: {s.topic} ({f'{s.class_minutes} min in class' if s.class_minutes else 'lab only'}, "
        f"{s.lab_minutes} min in the lab)" for n, s in enumerate(lessons.STEPS, 1)]
    assert any("SHAP" in md.value and "LIME" in md.value for md in at.markdown)


def test_in_presentation_mode_the_start_page_is_a_title_slide_whose_next_opens_the_first_step():
    at = open_page("app_pages/home.py", present=True)
    assert len(step_links(at)) == len(lessons.STEPS)
    assert not any("SHAP" in md.value for md in at.markdown)  # the title slide only
    assert links(at)[0] == ("Next", "equivalence", "")  # lessons.ROUTE[0], in the top row before the steps
    assert "Previous" in [b.label for b in at.button if b.disabled]  # nothing comes before the title slide


@pytest.mark.parametrize("step", [step for step in lessons.STEPS if len(step.pages) > 1], ids=lambda step: step.topic)
def test_a_steps_pages_each_open(step):
    for page in step.pages:
        at = open_page(page)
        assert not at.exception and not at.error