"""The lesson path adds up: 50 minutes for the class, 120 for the lab, every reading and page real."""

from pathlib import Path

import lessons

ROOT = Path(__file__).resolve().parents[2]


def test_the_minutes_add_up_to_the_class_and_the_lab():
    assert sum(step.class_minutes for step in lessons.STEPS) == lessons.CLASS_MINUTES == 50
    assert sum(step.lab_minutes for step in lessons.STEPS) == lessons.LAB_MINUTES == 120
    assert all(step.lab_minutes >= step.class_minutes for step in lessons.STEPS)


def test_every_step_names_real_readings_and_pages_and_the_issue_topics_are_all_there():
    seeds = ROOT.parent / "shared" / "seeds"  # beside the clone, in CI as for a developer
    assert set(lessons.READINGS) == {path.name[:3] for path in seeds.glob("0*.txt")}
    for step in lessons.STEPS:
        assert set(step.readings) <= set(lessons.READINGS)
        assert (ROOT / step.page).exists(), step.page
    topics = " ".join(step.topic for step in lessons.STEPS).lower()
    for topic in ("sum", "patterns and messages", "residual stream", "zero", "one-layer", "two-layer",
                  "induction heads forming", "lstm"):
        assert topic in topics, topic
