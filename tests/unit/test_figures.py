"""Figure builders: the data drawn is the data given, labelled, at a size that fits its text."""

import math

import numpy as np
import plotly.graph_objects as go

from mechlib import figures


def test_wo_blocks_draws_one_block_per_head_at_its_rows():
    fig = figures.wo_blocks(n_heads=8, d_head=64, d_model=512, row=70)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == [f"head {h}" for h in range(8)]
    assert [t.base[0] for t in bars] == [64 * h for h in range(8)]
    assert all(t.y[0] == 64 for t in bars)
    assert len({t.marker.color for t in bars}) == 8
    assert any("row 70 → head 1, row 6" in a.text for a in fig.layout.annotations)
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_head_norms_bar_and_heatmap_carry_the_numbers():
    norms = np.array([1.0, 2.0, 3.0])
    bar = figures.head_norms_bar(norms, 4.5, position=2)
    assert list(bar.data[0].y) == [1.0, 2.0, 3.0, 4.5]
    assert bar.layout.yaxis.title.text == "L2 norm (no unit)"
    results = np.arange(12.0).reshape(3, 4)
    heat = figures.head_contributions_heatmap(results, results.sum(0), results.sum(0), position=2)
    assert np.array_equal(np.asarray(heat.data[0].z), np.vstack([results, results.sum(0), results.sum(0)]))
    assert heat.data[0].zmid == 0


def test_scores_heatmap_blanks_the_masked_entries_and_centres_on_zero():
    scores = np.array([[1.0, -np.inf], [-2.0, 0.5]])
    fig = figures.pattern_heatmap(scores, ["a", "b"], "scores", scores=True)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[1, 0] == -2.0 and fig.data[0].zmid == 0 and fig.data[0].zmin == -2.0
    assert fig.data[0].text[1][0] == "query 1 'b' → key 0 'a'"


def test_the_live_training_view_is_built_once_and_shows_each_update():
    history = [{"step": 25, "loss": 6.0, "repeat_loss": 6.1, "induction": 0.05, "prev_token": 0.1}]
    first = np.random.default_rng(0).random((2, 1, 9, 9))
    live = figures.LiveTraining(history, first, 25, 4)
    history = history + [{"step": 50, "loss": 2.0, "repeat_loss": 1.5, "induction": 0.7, "prev_token": 0.4}]
    later = np.random.default_rng(1).random((2, 1, 9, 9))
    heads, curves = live.update(history, later, 50)
    assert heads is live.heads and curves is live.curves  # updated in place, not rebuilt
    assert [np.asarray(trace.z).tolist() for trace in heads.data] == [later[0, 0].tolist(), later[1, 0].tolist()]
    assert "step 50" in heads.layout.title.text
    assert {trace.meta: list(trace.y) for trace in curves.data} == {
        key: [row[key] for row in history] for key in ("loss", "repeat_loss", "induction", "prev_token")}
    assert figures.LiveTraining(history, None, 50, 4).update(history, None, 50)[0] is None  # no heads: curves only


def test_copy_losses_draws_each_model_and_marks_both_copies_and_the_references():
    losses = {"two layers": np.linspace(6, 0, 8), "one layer": np.full(8, 3.0), "LSTM": np.full(8, 6.2)}
    fig = figures.copy_losses(losses, length=4, d_vocab=512, earlier=1.3)
    lines = {t.name: t for t in fig.data}
    for name, values in losses.items():
        assert list(lines[name].x) == [1, 2, 3, 4, 5, 6, 7, 8] and np.array_equal(lines[name].y, values)
    assert list(lines["knows nothing: ln 512 = 6.24"].y) == [np.log(512)] * 2
    assert list(lines["some earlier token comes next: 1.30"].x) == [5.5, 8.5]  # the second copy after its first token
    shaded = [(s.x0, s.x1) for s in fig.layout.shapes]
    assert shaded == [(0.5, 4.5), (4.5, 8.5)]
    assert [a.text for a in fig.layout.annotations] == ["first copy", "second copy"]
    assert "nats" in fig.layout.yaxis.title.text and fig.layout.xaxis.title.text == "position of the token predicted"


def test_heads_forming_draws_sixteen_heads_a_layer():
    """The Train page offers 16 heads a layer; plotly refuses a gap wider than 1 / (columns − 1)."""
    fig = figures.heads_forming(np.zeros((2, 16, 9, 9)), 10, 4)
    assert len(fig.data) == 32 and fig.layout.annotations[31].text == "L1H15"


def test_token_labels_reach_plotly_as_text_not_html():
    from mechlib import figures

    labels = ["<bos>", "<b>z</b>", "a&lt;b", '<a href="http://example.com">x</a>']
    fig = figures.pattern_heatmap(np.eye(4), labels, "the pattern of '<b>z</b>'")
    assert list(fig.data[0].x) == ["0: &lt;bos&gt;", "1: &lt;b&gt;z&lt;/b&gt;", "2: a&amp;lt;b",
                                   '3: &lt;a href="http://example.com"&gt;x&lt;/a&gt;']
    assert fig.layout.title.text == "the pattern of '&lt;b&gt;z&lt;/b&gt;'"
    assert figures.plain("no tags here") == "no tags here"


def test_for_slides_raises_every_font_labels_as_many_rows_as_fit_and_leaves_the_original_alone():
    labels = [f"tok{i}" for i in range(30)]
    fig = figures.pattern_heatmap(np.tril(np.ones((30, 30))) / np.arange(1, 31)[:, None], labels, "pattern")
    before = fig.to_dict()
    slides = figures.for_slides(fig)
    assert fig.to_dict() == before
    sizes = []

    def walk(node, key=""):
        if isinstance(node, dict):
            if "font" in key and "size" in node:
                sizes.append(node["size"])
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)

    walk(slides.to_dict()["layout"])
    assert sizes and min(sizes) >= figures.SLIDE_FONT == 24  # the 11 px tick labels included
    # 30 token rows at 32 px do not fit a 720 px slide: every k-th is labelled, k the least that fits its height
    rows_room = figures.SLIDE_HEIGHT_PX - figures.SLIDE_FRAME_PX
    assert slides.layout.height == figures.SLIDE_HEIGHT_PX
    assert slides.layout.yaxis.tickmode == "linear" and slides.layout.yaxis.dtick == math.ceil(30 * 32 / rows_room) == 4
    assert slides.layout.xaxis.tickmode == "linear" and slides.layout.xaxis.dtick == 1  # 30 × 32 px fit 1,100 − 130
    assert np.array_equal(slides.data[0].z, fig.data[0].z)


def test_fit_width_draws_at_the_rooms_width_with_its_title_wrapped():
    title = "What each component left in attn-only-2l's final residual (last position), along x̂_final"

    def bars():
        return figures.component_bars(np.ones(3), ["embed", "L0H0", "L0 MLP"], title, "length")

    fig = bars()
    height, shown = fig.layout.height, figures.fit_width(fig, 382)
    assert shown is fig  # in place: a copy cost as much as building the figure
    assert (shown.layout.width, shown.layout.height) == (382, height)
    lines = shown.layout.title.text.split("<br>")
    assert " ".join(lines) == title and len(lines) >= 2
    assert max(len(line) for line in lines) * figures.CHAR_EM * figures.TITLE_FONT <= 382 - 20
    assert figures.fit_width(bars(), 1100).layout.title.text == title  # room for it on one line


def test_patterns_grid_names_its_axes_once():
    layout = figures.patterns_grid(np.full((2, 3, 5, 5), 0.2), "patterns").layout  # [layer head query_pos key_pos]

    def titles(axes: str) -> dict[str, str]:
        return {name: layout[name].title.text for name in layout.to_plotly_json()
                if name.startswith(axes) and layout[name].title.text}

    assert titles("xaxis") == {"xaxis4": "key position"}  # under the bottom row's first panel
    assert titles("yaxis") == {"yaxis": "query position", "yaxis4": "query position"}  # beside each row's first


def test_training_curves_x_axis_ends_where_the_data_does():
    history = [{"step": s, "loss": 5 - s / 2000, "repeat_loss": 5 - s / 1500, "induction": s / 6000,
                "prev_token": s / 7000} for s in range(300, 6001, 300)]
    for step in (None, 300, 6000):
        fig = figures.training_curves(history, step)
        for axis in (fig.layout.xaxis, fig.layout.xaxis2):
            low, high = axis.range
            assert low <= 300 and 6000 <= high <= 6000 + 0.02 * 5700  # markers at the ends, and nothing beyond
    late = figures.training_curves(history, 6000).layout.annotations[-1]
    assert late.text == "step 6,000" and late.xanchor == "right"  # its label inside the axis, left of the line


def test_a_composition_heatmap_is_sized_by_its_cells():
    def heatmap(n: int):
        return figures.composition_heatmap(np.full((n, n), 0.1), [f"L0H{h}" for h in range(n)],
                                           [f"L1H{h}" for h in range(n)], 0.09, "Q")
    one, eight = heatmap(1), heatmap(8)
    assert one.layout.width <= 320 and one.layout.height <= 260  # a trained 2-layer 1-head model: a small square
    assert eight.layout.width - one.layout.width == 7 * figures.CELL_PX
    assert eight.layout.height - one.layout.height == 7 * figures.CELL_PX
    natural = one.layout.width
    assert figures.fit_width(go.Figure(one), 1100).layout.width == natural  # the page keeps it small
    assert figures.fit_width(figures.for_slides(one), 1100).layout.width <= 1100 / 2  # on a slide too, type and all
