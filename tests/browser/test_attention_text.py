"""Attention you can hover (classroom/page/attention_text.py): on the Patterns page, pointing at a token shades every
token of every head's line by that head's pattern row, as the model computes it."""

import numpy as np

from classroom.session import DEFAULT_PROMPT
from mechlib import data, induction, patterns, zoo
from tests.browser.conftest import wait_for_app


def shown(page, head: int) -> list[float]:
    """The weights the browser shades head ``head``'s tokens with, position by position."""
    return [float(w) for w in page.locator(f'.attention-text .line[data-head="{head}"] .token').evaluate_all(
        "spans => spans.map(span => span.dataset.weight)")]


def test_pointing_at_a_token_shades_the_text_by_its_pattern_row(page, server):
    model = zoo.load("gelu-2l")  # the default model; its last layer is the page's default
    ids = data.prompt_ids(model.tokenizer, DEFAULT_PROMPT, model.cfg.n_ctx).ids
    layer = patterns.scores(model, ids, model.cfg.n_layers - 1, 0).layer_patterns   # [head query_pos key_pos]
    page.goto(f"{server}/patterns?read=true")
    wait_for_app(page, charts=4)
    page.wait_for_selector(".attention-text .token", timeout=30_000)  # the component mounts after the charts
    lines = page.locator(".attention-text .line")
    assert lines.count() == model.cfg.n_heads  # every head at once, first
    for dest in (5, 11, 2):
        page.locator(f'.attention-text .line[data-head="0"] .token[data-pos="{dest}"]').hover()
        for head in range(model.cfg.n_heads):  # the pointer on one line moves every line's destination
            expected = np.where(np.arange(len(ids)) <= dest, layer[head, dest], 0.0)
            assert np.abs(np.array(shown(page, head)) - expected).max() < 1e-4, (dest, head)
        background = page.locator(f'.attention-text .line[data-head="1"] .token[data-pos="{dest}"]').evaluate(
            "span => getComputedStyle(span).backgroundColor")
        alpha = float(background.removeprefix("rgba(31, 119, 180, ").rstrip(")")) if "rgba" in background else 1.0
        assert background.startswith(("rgba(31, 119, 180, ", "rgb(31, 119, 180)"))
        assert abs(alpha - layer[1, dest, dest]) <= 1 / 255  # the browser keeps alpha in 8 bits
    page.locator(".attention-text button", has_text="L1H2").click()
    assert lines.count() == 1 and page.locator('.attention-text .line[data-head="2"]').count() == 1
    page.locator('.attention-text .token[data-pos="7"]').click()  # a tap, as on a tablet
    assert np.abs(np.array(shown(page, 2)) - np.where(np.arange(len(ids)) <= 7, layer[2, 7], 0)).max() < 1e-4
    size = page.locator('.attention-text .token[data-pos="7"]').evaluate("span => getComputedStyle(span).fontSize")
    assert size == "16px"


def test_on_a_repeated_sequence_the_induction_head_shades_the_token_after_the_earlier_copy(page, server):
    t = induction.two_layers(zoo.load("attn-only-2l"), 0)  # the page's model and seed
    flat, length = t.patterns.reshape(-1, *t.patterns.shape[2:]), (len(t.example) - 1) // 2
    page.goto(f"{server}/circuits-two?read=true")
    page.wait_for_selector(".attention-text .token", timeout=90_000)
    segment = t.example[1:length + 1]
    # a token of the second copy that occurs once in the first: it has one earlier copy to find
    dest = max(q for q in range(length + 1, 2 * length + 1) if segment.count(t.example[q]) == 1)
    page.locator(f'.attention-text .line[data-head="0"] .token[data-pos="{dest}"]').hover()
    for head in range(len(t.heads)):
        expected = np.where(np.arange(len(t.example)) <= dest, flat[head, dest], 0.0)
        assert np.abs(np.array(shown(page, head)) - expected).max() < 1e-4, t.heads[head]
    ind, prev = t.heads.index(t.circuit.induction), t.heads.index(t.circuit.previous)
    assert int(np.argmax(shown(page, ind))) == dest - length + 1  # the token after the earlier copy
    assert int(np.argmax(shown(page, prev))) == dest - 1
