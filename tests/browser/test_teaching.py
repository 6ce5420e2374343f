"""Teaching a class with the app, in headless Chromium: links that restore the view in a fresh browser,
presentation mode at a projector's size, and slide-ready downloads."""

import re
import struct
import time

import pytest

from bench.slides_walk import IDLE
from tests.browser.conftest import ARTIFACTS, wait_for_app

# Widgets that are a student's own and never go into a link (a link must not reveal answers), and those the
# round trip sets on its own.
PERSONAL = {"your prediction", "Reveal the answer", "your answer", "Show the answer", "Present", "Reading mode",
            "examples whose every token this model knows", "file upload"}
SIDEBAR = {"seed", "model"}  # tested on their own: a new model changes every page's widgets


def settle(page) -> None:
    """Until the script run that the last action started has finished, the main area has stopped changing, and two
    frames have painted since. A widget registers its link binding in an effect after it first paints, and one that
    the run remounted (Circuits: two layers' switch remounts when the page's model changes) turns at a key pressed
    before then but leaves the address as it was: two CI runs lost "show the fast implementation" from the link so,
    on a machine busy drawing the charts."""
    time.sleep(0.5)  # a slider sends its value a moment after the key
    page.wait_for_function(IDLE, timeout=120_000)
    page.evaluate(QUIET)
    page.wait_for_function(IDLE, timeout=120_000)


QUIET = """() => new Promise(done => {
    const frames = () => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 0)));
    const root = document.querySelector('[data-testid="stMain"]');
    let last = setTimeout(stop, 250);
    const cap = setTimeout(stop, 10000);  // a page that never stops changing: go on after 10 s
    const watch = new MutationObserver(() => { clearTimeout(last); last = setTimeout(stop, 250); });
    function stop() { watch.disconnect(); clearTimeout(last); clearTimeout(cap); frames(); }
    watch.observe(root, {childList: true, subtree: true, attributes: true, characterData: true});
})"""


def open_expanders(page) -> None:
    """Open every closed expander of the main area, so the widgets inside ("Under the hood") can be reached, and
    let what they hold mount (see settle)."""
    closed = main(page).locator("details:not([open]) > summary")
    opened = closed.count()
    while closed.count():  # the locator is live: an opened one leaves it, so always open the first left
        closed.first.click()
    if opened:
        settle(page)


def main(page):
    return page.locator('[data-testid="stMain"]')


def widgets(page) -> dict[str, dict]:
    """Every widget of the page's main area: label -> {kind, value, min, max, options}."""
    return main(page).evaluate("""root => {
        const out = {};
        for (const e of root.querySelectorAll('input[type=range]'))
            out[e.getAttribute('aria-label')] = {kind: 'slider', value: e.getAttribute('aria-valuetext') ?? e.value,
                                                 at: +e.value, min: +e.min, max: +e.max};
        for (const g of root.querySelectorAll('[role=radiogroup]')) {
            const inputs = [...g.querySelectorAll('input[type=radio]')];
            out[g.getAttribute('aria-label')] = {kind: 'radio', value: inputs.findIndex(i => i.checked), count: inputs.length};
        }
        for (const e of root.querySelectorAll('input[role=combobox]'))
            out[e.getAttribute('aria-label')] = {kind: 'select', value: e.value};
        for (const e of root.querySelectorAll('input[role=switch]'))
            out[e.getAttribute('aria-label')] = {kind: 'toggle', value: e.checked};
        for (const e of root.querySelectorAll('input[type=number], input[type=text]:not([role=combobox])'))
            out[e.getAttribute('aria-label')] = {kind: 'input', value: e.value};
        return out;
    }""")


def move_away_from_default(page, label: str, widget: dict) -> None:
    """Set a widget to a value a fresh session does not show: its minimum or first option where the fresh value
    is another, else its maximum or last option; the address must follow."""
    scope, before = main(page), page.url
    if widget["kind"] == "slider":
        thumb = scope.locator(f'input[type=range][aria-label="{label}"]')
        thumb.focus()
        thumb.press("Home" if widget["at"] != widget["min"] else "End")
    elif widget["kind"] == "radio":
        group = scope.locator(f'[role=radiogroup][aria-label="{label}"]')
        group.locator("label").nth(0 if widget["value"] != 0 else widget["count"] - 1).click()
    elif widget["kind"] == "select":
        options = page.locator("[role=listbox] [role=option]")
        for _ in range(3):  # a click that lands while the page redraws does not open the list: click again
            scope.locator(f'input[role=combobox][aria-label="{label}"]').click()
            try:
                options.first.wait_for(timeout=5_000)
                break
            except Exception:  # noqa: BLE001 (playwright's TimeoutError)
                page.keyboard.press("Escape")
        texts = options.all_inner_texts()
        options.nth(0 if texts[0] != widget["value"] else min(1, len(texts) - 1)).click()
    elif widget["kind"] == "toggle":  # by the keyboard, as the sliders: a click while the page redraws can find
        switch = scope.locator(f'input[role=switch][aria-label="{label}"]')  # the switch outside the viewport (a CI
        switch.focus()                                                        # run failed so)
        switch.press("Space")
    elif widget["kind"] == "input":
        field = scope.locator(f'input[aria-label="{label}"]')
        field.fill(widget["value"] + " again" if field.get_attribute("type") == "text" else "1")
        field.press("Enter")
    settle(page)
    if widget["kind"] == "toggle":
        assert switch.is_checked() != widget["value"], label  # the switch the branch above turned
    try:
        page.wait_for_function("before => location.href !== before", arg=before, timeout=10_000)
    except Exception:  # noqa: BLE001 (playwright's TimeoutError)
        raise AssertionError(f"{label!r} moved, and the address stayed {before}") from None


def headline(page) -> list[str]:
    """The numbers a page states: its metrics and its checks' lines."""
    metrics = main(page).locator('[data-testid="stMetricValue"]').all_inner_texts()
    checks = [line for line in main(page).inner_text().splitlines() if "max |difference|" in line]
    return metrics + checks


def bound_values(page) -> dict[str, dict]:
    return {label: w["value"] for label, w in widgets(page).items() if label not in PERSONAL | SIDEBAR}


def open_fresh(browser, url: str):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(url)
    page.get_by_text("Copy link to this view").wait_for(timeout=120_000)  # drawn after the page's own elements
    settle(page)
    return context, page


ROUND_TRIPS = ["equivalence", "patterns", "residual", "circuits-zero", "circuits-one", "circuits-two", "phase-change",
               "lstm", "train"]


@pytest.mark.parametrize("path", ROUND_TRIPS)
def test_a_link_restores_every_widget_and_the_headline_numbers(browser, server, path):
    """Set every widget away from its fresh value (minimums and first options included, one at a time as a
    student would, picking up widgets that appear on the way), then open the copied link in a new browser."""
    # in reading mode (its own toggle left alone, as the link keeps it): every number a widget moves is on screen
    context, page = open_fresh(browser, f"{server}/{path}{'&' if '?' in path else '?'}read=true")
    done: set[str] = set()
    while True:
        open_expanders(page)
        todo = {label: w for label, w in widgets(page).items() if label not in PERSONAL | SIDEBAR | done}
        if not todo:
            break
        label, widget = next(iter(todo.items()))
        move_away_from_default(page, label, widget)
        done.add(label)
    assert page.locator('[data-testid="stException"]').count() == 0
    expected, numbers = bound_values(page), headline(page)
    page.get_by_text("Copy link to this view").click()
    link = page.locator('[data-testid="stPopoverBody"] [data-testid="stCode"]').first.inner_text().strip()
    assert link == page.url, (link, page.url)
    context.close()

    context, fresh = open_fresh(browser, link)
    open_expanders(fresh)
    assert bound_values(fresh) == expected, link
    assert headline(fresh) == numbers, link
    context.close()


def test_the_first_model_and_a_seed_survive_a_link(browser, server):
    context, page = open_fresh(browser, f"{server}/residual")
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.locator('input[role=combobox][aria-label="model"]').click()
    page.locator("[role=option]").first.click()
    settle(page)
    seed = sidebar.locator('input[aria-label="seed"]')
    seed.fill("0")  # the minimum, and the fresh value: it must not appear, the model must
    seed.press("Enter")
    settle(page)
    model = sidebar.locator('input[role=combobox][aria-label="model"]').input_value()
    assert model == "zoo: attn-only-0l" and "model=" in page.url
    numbers = headline(page)
    context.close()
    context, fresh = open_fresh(browser, page.url)
    assert fresh.locator('[data-testid="stSidebar"] input[role=combobox][aria-label="model"]').input_value() == model
    assert headline(fresh) == numbers
    context.close()


def test_a_link_to_a_model_that_does_not_exist_says_so(browser, server):
    context, page = open_fresh(browser, f"{server}/patterns?model=attn-only-9l")
    assert "The link's model “attn-only-9l” does not exist on this server" in page.inner_text("body")
    context.close()
    context, page = open_fresh(browser, f"{server}/patterns?model=attn-only-2l")  # a zoo model named bare
    assert page.locator('[data-testid="stSidebar"] input[aria-label="model"]').input_value() == "zoo: attn-only-2l"
    context.close()


# ---------------------------------------------------------------------------------------------------------------
# Presentation mode

PROJECTOR = {"width": 1280, "height": 720}


def figure_font_sizes(page) -> list[float]:
    """The font size, in CSS px, of every piece of text in every plotly chart on screen."""
    return page.evaluate("""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] svg text')]
        .filter(t => t.textContent.trim()).map(t => parseFloat(getComputedStyle(t).fontSize))""")


@pytest.mark.parametrize("path", ["equivalence", "patterns", "residual", "circuits-one", "lstm"])
def test_presentation_mode_shows_one_section_in_large_type(browser, server, path):
    context = browser.new_context(viewport=PROJECTOR, device_scale_factor=1.25)  # 125 % zoom
    page = context.new_page()
    page.goto(f"{server}/{path}?present=1")
    page.get_by_role("button", name="Next", exact=True).wait_for(timeout=120_000)
    settle(page)
    assert page.locator('[data-testid="stSidebar"]').get_attribute("data-collapsed") == "true"
    assert page.get_by_role("switch", name="Present").is_checked()
    first = main(page).locator("h3").first.inner_text()
    assert main(page).locator("h3").count() == 1
    sizes = figure_font_sizes(page)
    if sizes:
        assert min(sizes) >= 18, sorted(sizes)[:5]
    widths = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
        .map(c => c.getBoundingClientRect().width / document.querySelector('[data-testid="stMain"] h3').offsetParent
        .getBoundingClientRect().width)""")
    assert all(width > 0.9 for width in widths), widths  # side-by-side charts stack: every label has room
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"present-{path}.png"))
    for _ in range(4):  # a part whose charts sit side by side is one slide per chart: Next walks them first
        page.get_by_role("button", name="Next", exact=True).click()
        settle(page)
        if main(page).locator("h3").first.inner_text() != first:
            break
    assert main(page).locator("h3").count() == 1 and main(page).locator("h3").first.inner_text() != first
    assert "part=" in page.url and "present=true" in page.url
    context.close()


# ---------------------------------------------------------------------------------------------------------------
# Export


def test_an_example_prompt_follows_the_class_to_the_next_page(browser, server):
    """An example prompt picked on one page, then Next past the page's last slide (a link to the lesson's next page,
    with no prompt of its own): the next page draws the example, and its address holds it, so the page reloaded
    shows the same. The load script's students, which open a page with an empty address in the same session (no
    browser does), saw the default prompt drawn there while the session held the example."""
    context = browser.new_context(viewport=PROJECTOR)
    page = context.new_page()
    page.goto(f"{server}/patterns?present=true")
    page.get_by_text("Link").first.wait_for(timeout=120_000)
    settle(page)
    page.get_by_role("button", name="Settings").click()
    page.locator('input[role=combobox][aria-label="examples whose every token this model knows"]').click()
    page.locator("[role=option]").nth(1).click()
    settle(page)
    example = page.locator('input[aria-label="prompt"]').input_value()
    for _ in range(30):  # Next through the page's slides to the link to the next page
        if (link := page.get_by_role("link", name="Next")).count():
            break
        page.get_by_role("button", name="Next").click()
        settle(page)
    link.click()
    settle(page)
    assert "/residual" in page.url and re.search(r"[?&]prompt=", page.url), page.url
    page.get_by_role("button", name="Settings").click()
    settle(page)
    assert page.locator('input[aria-label="prompt"]').input_value() == example
    page.reload()  # a new session from the address alone
    page.get_by_text("Link").first.wait_for(timeout=120_000)
    settle(page)
    page.get_by_role("button", name="Settings").click()
    settle(page)
    assert page.locator('input[aria-label="prompt"]').input_value() == example
    context.close()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_a_section_exports_a_large_png_an_svg_a_csv_and_a_zip(page, server):
    page.goto(f"{server}/patterns?read=true")  # reading mode: every section's evidence drawn, no reveal needed
    wait_for_app(page, charts=4)
    menu = main(page).get_by_text("Export this section")
    menu.nth(4).click()  # the messages section: a figure and a table
    body = page.locator('[data-testid="stPopoverBody"]')
    with page.expect_download() as png:
        body.get_by_role("button", name=re.compile(r"^PNG, \d+ × \d+ px$")).first.click()
    screen = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] .main-svg')]
        .filter(svg => svg.querySelector('.gtitle')?.textContent.startsWith('Attention from position'))
        .map(svg => [svg.getBoundingClientRect().width, svg.getBoundingClientRect().height])""")[0]
    assert png_size(open(png.value.path(), "rb").read()) == (screen[0] * 3, screen[1] * 3)  # the screen's, at 3×
    with page.expect_download() as svg:
        body.get_by_role("button", name="SVG").first.click()
    assert b"<svg" in open(svg.value.path(), "rb").read()[:500]
    with page.expect_download() as csv:
        body.get_by_role("button", name="messages (CSV)").click()
    assert open(csv.value.path(), encoding="utf-8").readline().startswith("source,attention weight,‖message‖")
    with page.expect_download() as bundle:
        body.get_by_role("button", name="Everything in this section (zip)").click()
    import zipfile

    names = set(zipfile.ZipFile(bundle.value.path()).namelist())
    assert {"figures/attention_from_the_destination.png", "figures/attention_from_the_destination.svg",
            "tables/messages.csv", "numbers.csv", "snippets/attention_from_the_destination.py"} <= names, names
