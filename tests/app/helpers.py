"""Shared AppTest helpers."""

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from classroom import keys
from classroom.page.export_menu import export_key

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def open_page(path: str, read: bool = True, **state) -> AppTest:
    """The app with ``state`` preset, switched to the page at ``path``, after its first run; in reading mode
    (every answer drawn at once) unless ``read`` is False, where each question hides its evidence until revealed."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["read"] = read
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(path)
    at.run()
    assert not at.exception, at.exception
    return at


def open_exports(at: AppTest) -> AppTest:
    """Open every part's "Export this section" menu, as a student's click does (its contents are drawn only
    while it is open), and rerun."""
    for heading in at.subheader:
        at.session_state[export_key(heading.value)] = True
    at.run()
    assert not at.exception, at.exception
    return at


# classroom.page.text.check_line, as every page writes it: (max |difference|, scaled, tolerance, colour, mark)
CHECK_LINE = re.compile(r": max \|difference\| \*\*([-+.e\d]+)\*\*, scaled \*\*([-+.e\d]+)\*\* against a "
                        r"tolerance of \*\*([-+.e\d]+)\*\* · max\(1, \|reference\|\) — :(green|red)\[\*\*(✓ pass|✗ FAIL)\*\*\]")


def shown_checks(at: AppTest) -> list[tuple[float, float, float, bool]]:
    """(max |difference|, scaled, tolerance, shown as passed) of every check line on the page, in order."""
    return [(float(d), float(s), float(t), mark == "✓ pass")
            for md in at.markdown for d, s, t, _, mark in CHECK_LINE.findall(md.value)]


def open_page_with_model(path: str, model, **state) -> AppTest:
    """``open_page`` with ``model`` among this session's models and chosen in the sidebar, as after an upload: kept
    in the server's store, listed by its id."""
    from classroom.state.store import STORE, short_id
    from mechlib import io

    data = io.to_bytes(model)
    label = STORE.put("uploaded", "test.safetensors", data, "a test's browser").label
    return open_page(path, session_models={label: short_id(data)}, model=label, **state)


def reveal(at: AppTest, key: str) -> tuple[str, str]:
    """Answer the question ``key`` (its first option), reveal it, and read what the page now says: (the answer in
    bold after "This run:", the whole line). Earlier revealed questions stay open, so the new line is the one
    that was not there before."""
    def said() -> list[str]:
        return [m.value for m in at.markdown if m.value.startswith("This run: **")]

    radio = at.radio(key=f"predict {key}")
    radio.set_value(radio.options[0]).run()
    if at.session_state[keys.reveal(key)]:  # hidden first, where an earlier call revealed it
        at.button(key=f"reveal button {key}").click().run()
    before = said()
    at.button(key=f"reveal button {key}").click().run()
    assert not at.exception, at.exception
    (line,) = [line for line in said() if line not in before]
    return re.match(r"This run: \*\*(.+?)\*\*", line)[1], line


def next_part(at: AppTest) -> list[str]:
    """Press Next in presentation mode until the slide's heading changes (a part may be several slides: one per
    figure placed side by side); returns the captions seen on the way ("part k of n · slide j of m")."""
    heading, seen = [h.value for h in at.subheader], []
    for _ in range(6):
        seen += [c.value for c in at.caption if c.value.startswith("part ")]
        next(b for b in at.button if b.label == "Next").click().run()
        assert not at.exception, at.exception
        if [h.value for h in at.subheader] != heading:
            return seen
    raise AssertionError(f"Next stayed on {heading}: {seen}")
