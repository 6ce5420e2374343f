"""The lesson path adds up: 50 minutes for the class, 120 for the lab, every reading and page real."""

from pathlib import Path

from classroom import lessons

ROOT = Path(__file__).resolve().parents[2]


def test_the_minutes_add_up_to_the_class_and_the_lab():
    assert sum(step.class_minutes for step in lessons.STEPS) == lessons.CLASS_MINUTES == 50
    assert sum(step.lab_minutes for step in lessons.STEPS) == lessons.LAB_MINUTES == 120
    assert all(step.lab_minutes >= step.class_minutes for step in lessons.STEPS)


def test_every_step_names_real_readings_and_pages_and_the_issue_topics_are_all_there():
    # The four source documents, by number (they are not in the repository: the keys and titles are the check).
    assert list(lessons.READINGS) == ["000", "001", "002", "003"]
    titles = list(lessons.READINGS.values())
    assert all(title.strip() for title in titles) and len(set(titles)) == len(titles)
    assert "Mathematical Framework for Transformer Circuits" in lessons.READINGS["003"]
    assert {key for step in lessons.STEPS for key in step.readings} == set(lessons.READINGS)  # each one is read
    for step in lessons.STEPS:
        assert step.readings, step.topic
        assert set(step.readings) <= set(lessons.READINGS)
        assert all((ROOT / page).exists() for page in step.pages), step.pages
    topics = " ".join(step.topic for step in lessons.STEPS).lower()
    for topic in ("sum", "patterns and messages", "residual stream", "zero", "one-layer", "two-layer",
                  "induction heads forming", "lstm"):
        assert topic in topics, topic


def test_the_route_walks_every_page_of_every_step_in_order_each_once():
    assert lessons.ROUTE[:4] == ("app_pages/equivalence.py", "app_pages/patterns.py", "app_pages/residual.py",
                                 "app_pages/circuits_zero.py")
    assert [page for page in lessons.ROUTE if page.startswith("app_pages/circuits")] == [
        "app_pages/circuits_zero.py", "app_pages/circuits_one.py", "app_pages/circuits_two.py",
        "app_pages/circuits_phase.py"]
    assert len(lessons.ROUTE) == len(set(lessons.ROUTE)) == sum(len(step.pages) for step in lessons.STEPS)
