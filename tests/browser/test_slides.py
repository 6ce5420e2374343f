"""The whole lesson in presentation mode at a projector's 1280 × 720, walked with Next from the start page by the
teacher of a live class, with a student following in a browser of their own (bench/slides_walk.py, which also
measures 1920 × 1080 and walks without a class): on the teacher's screen no text under 24 px, no question answered
before its reveal, no scroll to see a question and its answer, no slide taller than the screen, no sideways scroll,
a top row of at most 80 px, every part of every stop reached; on both screens no slide goes blank, no browser logs
an error or loses its connection, the student is on every slide the teacher shows and sees no answer before its
reveal, the join card covers nothing, and the teacher opens the sidebar with a pointer click while presenting.
One walk checks both: a walk without a class (97 s in CI) checked nothing the class's walk does not."""

import socket
from urllib.parse import urlsplit

import pytest

from bench.slides_walk import serve, walk
from tests.browser.conftest import ARTIFACTS

SLIDE_PROBLEMS = ("texts under size", "answered before reveal", "scroll for question/answer", "slides that do not fit",
                  "sideways scroll", "top row over 80 px")
CLASS_PROBLEMS = ("slides a follower missed", "blank follower pages", "answers shown before reveal",
                  "reveals not drawn graded", "answers the reveal did not count", "page errors", "disconnects",
                  "join card overlaps")


def assert_slides_fit(report) -> None:
    counts = report.counts()
    assert counts["slides"] >= 50 and counts["questions"] >= 20, counts
    assert report.missed == [], report.missed
    problems = {key: counts[key] for key in SLIDE_PROBLEMS}
    assert problems == dict.fromkeys(problems, 0), (problems, [(s.where, s.small, s.overflow_px) for s in report.slides
                                                                if s.small or not s.fits])
    assert counts["smallest font px"] >= 24


@pytest.fixture(scope="module")
def class_server():
    """A classroom's server: listening on every interface, its public address a second name for this machine
    (127.0.0.2), so the join link a student opens is not the teacher's browser's address."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = serve(port)
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


def test_a_live_class_walks_the_whole_lesson_and_no_screen_goes_blank(browser, class_server):
    report = walk(browser, class_server, 1280, 720, followers=1, shots=ARTIFACTS)
    assert_slides_fit(report)
    counts = report.class_counts()
    assert counts["follows"] >= 50, counts
    problems = {key: counts[key] for key in CLASS_PROBLEMS}
    follower = report.followers[0]
    assert problems == dict.fromkeys(problems, 0), (problems, follower.missed, follower.blank, follower.early,
                                                    follower.ungraded, follower.errors, report.teacher_errors,
                                                    report.overlaps, report.uncounted)
    assert counts["sidebar opened by a click"] == 1
    assert urlsplit(report.join_link).hostname == "127.0.0.2", report.join_link  # opened from a second name
