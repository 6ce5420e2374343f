"""The whole lesson in presentation mode at a projector's 1280 × 720, walked with Next from the start page
(bench/slides_walk.py, which also measures 1920 × 1080): no text under 24 px, no question answered before its
reveal, no scroll to see a question and its answer, no slide taller than the screen, no sideways scroll, a top
row of at most 80 px, every part of every stop reached."""

from bench.slides_walk import walk


def test_next_walks_every_part_in_large_type_and_no_slide_gives_its_answer_away(browser, server):
    report = walk(browser, server, 1280, 720)
    counts = report.counts()
    assert counts["slides"] >= 50 and counts["questions"] >= 20, counts
    assert report.missed == [], report.missed
    problems = {key: counts[key] for key in ("texts under size", "answered before reveal", "scroll for question/answer",
                                             "slides that do not fit", "sideways scroll", "top row over 80 px")}
    assert problems == dict.fromkeys(problems, 0), (problems, [(s.where, s.small, s.overflow_px) for s in report.slides
                                                                if s.small or not s.fits])
    assert counts["smallest font px"] >= 24
