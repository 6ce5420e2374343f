"""Every page in headless Chromium, in reading mode (every answer drawn): loads without an exception box, draws its
charts, reacts to a slider."""

import re
import time

import numpy as np

from tests.browser.conftest import ARTIFACTS, wait_for_app


def save_whole_page(page, name: str, height: int, charts: int) -> None:
    """A screenshot of the whole page in artifacts/NAME.png. Streamlit scrolls inside its own container,
    so the viewport is made tall enough to show everything first."""
    page.set_viewport_size({"width": 1400, "height": height})
    wait_for_app(page, charts=charts)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def press_slider(page, name: str, key: str) -> None:
    """Move the slider labelled ``name`` by one key press (ArrowLeft, ArrowRight, Home, End), as a keyboard user would."""
    thumb = page.get_by_role("slider", name=name)
    thumb.focus()
    thumb.press(key)


def no_exception(page) -> bool:
    """True when the page shows no Streamlit exception box."""
    return page.locator('[data-testid="stException"]').count() == 0


def plot_text(page) -> str:
    return page.locator('[data-testid="stPlotlyChart"]').first.inner_text()


PATHS = {"": "Addition Machines", "equivalence": "Multi-head attention is a sum over heads",
         "patterns": "Patterns and messages", "residual": "The residual stream", "circuits-zero": "Circuits: zero layers",
         "circuits-one": "Circuits: one layer", "circuits-two": "Circuits: two layers",
         "phase-change": "Circuits: the phase change",
         "lstm": "The LSTM analogy", "train": "Train a transformer"}


def test_every_page_has_its_own_url_path(browser, server):
    """Each path, opened first in a fresh browser context, shows its own page (a link a teacher shares), and the
    browser asks nothing of any other server (nothing is downloaded at run time: the tab's icon neither)."""
    elsewhere = []
    for path, title in PATHS.items():
        context = browser.new_context()
        page = context.new_page()
        page.on("request", lambda request: request.url.removeprefix("blob:").startswith((server, "data:"))
                or elsewhere.append(request.url))  # blob:SERVER/…: a component's inline script, in the page's memory
        page.goto(f"{server}/{path}")
        page.locator("h1").first.wait_for(timeout=60_000)
        assert page.locator("h1").first.inner_text() == title, path
        assert "Page not found" not in page.inner_text("body"), path
        page.wait_for_load_state("networkidle")
        context.close()
    assert not elsewhere, elsewhere


def test_equivalence_page_loads_draws_and_reacts(page, server):
    page.goto(f"{server}/equivalence?read=true")  # the fresh server's first request: a deep link
    wait_for_app(page, charts=3)
    assert no_exception(page)
    assert "Page not found" not in page.inner_text("body")
    assert "Σ heads against concat → W_O in float32" in page.inner_text("body")
    assert page.locator('[data-testid="stSidebar"]').get_by_text("seed").count() >= 1
    assert "row 70 → head 1, row 6" in plot_text(page)

    press_slider(page, "a row of the concatenated W_O", "ArrowRight")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stPlotlyChart\"]').innerText.includes('row 71 → head 1, row 7')",
        timeout=30_000)
    wait_for_app(page, charts=3)
    assert no_exception(page)
    # The sidebar survives the rerun, and the URL now carries the setting.
    assert page.locator('[data-testid="stSidebar"]').get_by_text("seed").count() >= 1
    assert "row=71" in page.url

    save_whole_page(page, "equivalence", height=3400, charts=3)


def test_url_reproduces_the_screen(page, server):
    page.goto(f"{server}/equivalence?D=256&H=4&row=130&dtype=float64&read=true")
    wait_for_app(page, charts=3)
    assert no_exception(page)
    charts = page.locator('[data-testid="stPlotlyChart"]').all_inner_texts()
    assert any("row 130 → head 2, row 2" in chart for chart in charts), charts  # the W_O row-block chart
    assert "d_head = D / H = 256 / 4 = 64" in page.inner_text("body")
    assert "per head → Σ, float64" in page.inner_text("body")


def test_the_preset_forms_an_induction_head_live_and_opens_on_the_circuits_page(page, server):
    page.goto(f"{server}/train")
    button = page.get_by_role("button", name="Watch an induction head form")
    button.wait_for(timeout=60_000)
    page.wait_for_function("document.body.innerText.includes('The copying task')", timeout=60_000)  # a CI run once
    # read the body before the page's prose had drawn
    assert no_exception(page)
    button.click()
    page.get_by_text("Every head's attention at step").first.wait_for(timeout=60_000)  # drawn while it trains
    page.get_by_text("The circuit check finds it").wait_for(timeout=120_000)
    wait_for_app(page, charts=2)
    assert no_exception(page)
    sidebar = page.locator('[data-testid="stSidebar"]')
    label = sidebar.locator('input[aria-label="model"]').input_value()
    assert re.match(r"trained [a-z2-7]{16}: watch an induction head form", label), label
    save_whole_page(page, "train", height=1500, charts=2)
    hovered_induction_head(page)
    page.get_by_text("Read its circuit on Circuits: two layers").click()
    page.get_by_role("button", name="Reveal the answer").first.click()  # the ablation question (the page's first,
    # before activation patching's) hides the circuit
    page.get_by_text(f"The circuit, as found in {label}").wait_for(timeout=60_000)
    assert no_exception(page)

    # The class opens the teacher's link in their own browsers: the server keeps the model under its id.
    context = page.context.browser.new_context(viewport={"width": 1400, "height": 1000})
    student = context.new_page()
    student.goto(page.url)
    student.get_by_role("button", name="Reveal the answer").first.click(timeout=120_000)  # each student reveals
    student.get_by_text(f"The circuit, as found in {label}").wait_for(timeout=120_000)
    assert student.locator('[data-testid="stSidebar"] input[aria-label="model"]').input_value() == label
    student.reload()  # and a reload does not lose it
    student.get_by_role("button", name="Reveal the answer").first.click(timeout=120_000)
    student.get_by_text(f"The circuit, as found in {label}").wait_for(timeout=120_000)
    assert no_exception(student)
    context.close()


def hovered_induction_head(page) -> None:
    """The trained model's hover view: pointing at a token of the watched sequence's second copy, the induction head
    the circuit check named shades the token after that token's earlier copy most, at most such tokens."""
    induction = re.search(r"(L\d+H\d+) an induction head", page.inner_text("body"))[1]
    page.wait_for_selector(".attention-text .token", timeout=30_000)  # the component mounts after the charts
    line = page.locator(".attention-text .line", has=page.locator(".name", has_text=re.compile(f"^{induction}$")))
    tokens = line.locator(".token")
    length = (tokens.count() - 1) // 2  # <bos>, a segment, the segment again
    hits = 0
    for dest in range(length + 1, 2 * length + 1):
        tokens.nth(dest).hover()
        weights = tokens.evaluate_all("spans => spans.map(span => +span.dataset.weight)")
        assert abs(sum(weights) - 1) < 2e-3 and not any(weights[dest + 1:])  # a causal pattern's row
        hits += int(np.argmax(weights)) == dest - length + 1
    assert hits > length // 2, (induction, hits, length)


def test_your_own_model_trains_and_shows_live_curves(page, server):
    page.goto(f"{server}/train?t_task=your+own+model&t_data=random&t_d_model=32&t_ctx=32&t_steps=100")
    page.get_by_role("button", name="Train").wait_for(timeout=60_000)
    assert no_exception(page)
    assert "at most 2 trainings run at once" in page.inner_text("body")
    page.get_by_role("button", name="Train").click()
    page.get_by_text("Final loss").wait_for(timeout=120_000)
    wait_for_app(page, charts=2)
    assert no_exception(page)
    page.get_by_text("Download as .safetensors").wait_for(timeout=30_000)
    # The trained model is now the sidebar's choice.
    label = page.locator('[data-testid="stSidebar"] input[aria-label="model"]').input_value()
    assert re.match(r"trained [a-z2-7]{16}: 2L×2H d32 ctx 32", label), label


def running_trainings(page, server) -> int:
    page.goto(f"{server}/train")
    page.get_by_text("running now").wait_for(timeout=60_000)
    return int(re.search(r"(\d+) running now", page.inner_text("body")).group(1))


def wait_until_running(page, server, count: int, within_s: float = 30) -> int:
    """The server-wide number of trainings, polled until it equals ``count`` or time runs out.

    A stopped training ends at its next progress report, a few seconds away on a busy machine."""
    deadline = time.monotonic() + within_s
    while (found := running_trainings(page, server)) != count and time.monotonic() < deadline:
        page.wait_for_timeout(1000)
    return found


def test_moving_a_slider_or_closing_the_tab_stops_training(browser, server):
    trainer, watcher = browser.new_page(), browser.new_page()
    trainer.goto(f"{server}/train?t_task=your+own+model&t_steps=5000")
    trainer.get_by_role("button", name="Train").click()
    trainer.get_by_text("of at most 5,000").wait_for(timeout=60_000)  # training has started
    assert running_trainings(watcher, server) == 1
    press_slider(trainer, "layers", "ArrowLeft")  # the rerun stops the training at its next progress report
    assert wait_until_running(watcher, server, 0) == 0
    trainer.get_by_role("button", name="Train").click()
    trainer.get_by_text("of at most 5,000").wait_for(timeout=60_000)
    assert running_trainings(watcher, server) == 1
    trainer.close()  # the session ends; its script run is stopped
    assert wait_until_running(watcher, server, 0) == 0
    watcher.close()


def test_patterns_page_loads_draws_and_reacts(page, server):
    page.goto(f"{server}/patterns?read=true")
    wait_for_app(page, charts=4)
    assert no_exception(page)
    assert "Scores recomputed" in page.inner_text("body")
    pattern = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="the pattern A")
    before = pattern.inner_text()
    press_slider(page, "head", "ArrowRight")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
        ".some(chart => chart.innerText.includes('Layer 1, head 1: the pattern A'))", timeout=30_000)
    wait_for_app(page, charts=4)
    assert no_exception(page)
    assert "head=1" in page.url and pattern.inner_text() != before
    save_whole_page(page, "patterns", height=3800, charts=4)


def test_residual_page_loads_draws_and_reacts(page, server):
    page.goto(f"{server}/residual?read=true")
    wait_for_app(page, charts=4)
    assert no_exception(page)
    assert "At position 14 ('object'):" in page.inner_text("body")
    press_slider(page, "position", "ArrowLeft")
    page.get_by_text("At position 13 ('an'):").wait_for(timeout=30_000)
    wait_for_app(page, charts=4)
    assert no_exception(page)
    save_whole_page(page, "residual", height=4200, charts=4)


def test_the_circuits_pages_load_and_draw(page, server):
    for path, charts in (("circuits-two", 4), ("circuits-zero", 2), ("circuits-one", 3), ("phase-change", 2)):
        page.goto(f"{server}/{path}?read=true")
        wait_for_app(page, charts=charts)
        assert no_exception(page), path
    press_slider(page, "training step", "Home")
    page.get_by_text("At step 0:").wait_for(timeout=30_000)
    page.goto(f"{server}/circuits-two?read=true")
    save_whole_page(page, "circuits", height=3000, charts=4)


def test_lstm_page_loads_draws_and_reacts(page, server):
    page.goto(f"{server}/lstm?read=true")
    wait_for_app(page, charts=10)
    assert no_exception(page)
    assert "The test that separates them" in page.inner_text("body")
    assert "Controls on the copying task" in page.inner_text("body")
    press_slider(page, "segment length for the test", "End")
    page.wait_for_function("() => new URL(location.href).searchParams.get('l_test') === '23'", timeout=30_000)
    wait_for_app(page, charts=10)
    assert no_exception(page)
    save_whole_page(page, "lstm", height=5400, charts=10)


def test_a_sparse_autoencoder_trains_in_a_worker_and_its_link_opens_it_for_the_class(page, server):
    page.goto(f"{server}/dictionary")
    page.get_by_role("button", name="Train a sparse autoencoder").click(timeout=120_000)
    page.wait_for_url("**d_sae_id=**", timeout=300_000)  # trained in a worker, kept in the store, named by the link
    page.get_by_text("held-out activations").first.wait_for(timeout=120_000)
    page.wait_for_function("document.querySelectorAll('[data-testid=\"stMetricValue\"]').length >= 4",
                           timeout=120_000)
    assert no_exception(page)
    shown = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
    context = page.context.browser.new_context(viewport={"width": 1400, "height": 1000})
    student = context.new_page()
    student.goto(page.url)
    student.get_by_text("held-out activations").first.wait_for(timeout=120_000)
    student.wait_for_function("n => document.querySelectorAll('[data-testid=\"stMetricValue\"]').length >= n",
                              arg=len(shown), timeout=120_000)
    assert student.locator('[data-testid="stMetricValue"]').all_inner_texts() == shown  # the same SAE, graded alike
    assert no_exception(student)
    context.close()
