"""One registry of pages: every page file is in it once, with its own URL path, and the lesson path, the start
page's links and the Circuits pages' model keys come from it."""

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


def test_the_lesson_path_opens_registered_pages_and_every_circuits_page_in_order():
    registered = {page.file for page in pages.PAGES}
    assert set(lessons.ROUTE) <= registered
    group = [page.file for page in pages.PAGES if page.group == "Circuits"]
    assert [page for page in lessons.ROUTE if page in group] == group == [
        pages.CIRCUITS_ZERO.file, pages.CIRCUITS_ONE.file, pages.CIRCUITS_TWO.file, pages.PHASE_CHANGE.file]


def test_each_group_of_the_navigation_is_one_run_of_pages():
    groups = [page.group for page in pages.PAGES]
    assert [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g] == ["", "Circuits", "Compare and train"]
