"""One registry of pages: every page file is in it once, with its own URL path, and the lesson path, the start
page's links and the Circuits page's keys come from it."""

from pathlib import Path

from classroom import lessons
from classroom import pages

ROOT = Path(__file__).resolve().parents[2]


def test_every_page_file_is_registered_once_with_its_own_path():
    assert sorted(page.file for page in pages.PAGES) == sorted(f"app_pages/{p.name}" for p in (ROOT / "app_pages").glob("*.py"))
    assert pages.PAGES[0] is pages.HOME and pages.HOME.url_path == ""
    paths = [page.url_path for page in pages.PAGES[1:]]
    assert all(paths) and len(set(paths)) == len(paths)
    assert all(page.teaches and page.runs_on for page in pages.PAGES[1:])


def test_the_lesson_path_opens_registered_pages_at_registered_parts():
    registered = {page.file for page in pages.PAGES}
    assert {step.page for step in lessons.STEPS} <= registered
    parts = [stop[pages.CIRCUITS_PART] for page, stop in lessons.ROUTE if page == pages.CIRCUITS.file]
    assert parts == list(pages.CIRCUITS_PARTS)  # the lesson walks every part of the Circuits page, in order
