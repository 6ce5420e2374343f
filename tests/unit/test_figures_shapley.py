"""The Shapley figures draw the data given: both games' values side by side with their standard errors, many players
summarised as the largest and the rest, a token attribution at its positions with <bos> blank and roles coloured,
and a head's attention row on the same positions, readable on a slide."""

import math

import numpy as np

from mechlib import figures


def test_shapley_bars_draw_both_games_with_error_bars_only_where_sampled():
    players = ["direct path", "L0H0", "L0H1"]
    direct, total = np.array([0.1, 0.2, -0.3]), np.array([0.3, 1.0, 2.0])
    exact = figures.shapley_bars(players, direct, total, np.zeros(3), np.zeros(3), "t", "φ (nats)")
    assert [t.name for t in exact.data] == ["direct game", "total game"] and exact.layout.barmode == "group"
    assert list(exact.data[0].x) == players and list(exact.data[1].y) == [0.3, 1.0, 2.0]
    assert exact.data[0].error_y.array is None  # exact: no error bars
    assert exact.layout.yaxis.title.text == "φ (nats)" and exact.layout.xaxis.title.text == "player"
    sampled = figures.shapley_bars(players, direct, total, np.full(3, 0.01), np.array([0.1, 0.2, 0.3]), "t", "φ")
    assert list(sampled.data[1].error_y.array) == [0.1, 0.2, 0.3] and sampled.data[1].error_y.visible


def test_shapley_bars_of_many_players_keep_the_largest_in_order_and_sum_the_rest():
    n = 40
    players = [f"p{i}" for i in range(n)]
    direct, total = np.zeros(n), np.arange(n, dtype=float) / 100
    direct[3] = 5.0  # large in the direct game only: kept
    errors = np.full(n, 0.1)
    fig = figures.shapley_bars(players, direct, total, errors, errors, "t", "φ")
    kept = [3] + list(range(n - figures.SHAPLEY_BARS + 2, n))  # 3, then the 14 largest totals
    assert list(fig.data[0].x) == [f"p{i}" for i in kept] + [f"the other {n - len(kept)}"]
    rest = [i for i in range(n) if i not in kept]
    assert fig.data[1].y[-1] == np.float64(total[rest].sum()) and fig.data[0].y[0] == 5.0
    assert math.isclose(fig.data[1].error_y.array[-1], 0.1 * math.sqrt(len(rest)))
    assert len(fig.data[0].x) == figures.SHAPLEY_BARS


def test_token_credit_leaves_bos_blank_and_colours_the_roles_it_is_given():
    labels = ["<bos>", "a", "b", "c", "d"]
    fig = figures.token_credit(np.array([0.5, -1.0, 2.0, 0.25]), labels, "SHAP", "φ (nats)",
                               {2: "its earlier copy", 4: "the last token"})
    *keys, bars = fig.data
    assert [k.name for k in keys] == ["other tokens", "its earlier copy", "the last token"]
    assert all(k.x == (None,) for k in keys)  # legend entries, no bars
    assert list(bars.x) == ["0: &lt;bos&gt;", "1: a", "2: b", "3: c", "4: d"] and not bars.showlegend
    assert list(bars.y) == [None, 0.5, -1.0, 2.0, 0.25]
    colours = list(bars.marker.color)
    assert colours[2] == keys[1].marker.color and colours[4] == keys[2].marker.color
    assert colours[0] == colours[1] == colours[3] == figures.OTHER_COLOUR
    assert list(bars.customdata) == ["other tokens", "other tokens", "its earlier copy", "other tokens", "the last token"]
    assert fig.layout.xaxis.type == "category" and fig.layout.barmode == "overlay"
    slide = figures.for_slides(fig)
    assert slide.layout.xaxis.tickfont.size >= figures.SLIDE_FONT and slide.layout.xaxis.dtick >= 1
    everyone = figures.token_credit(np.ones(2), ["<bos>", "a", "b"], "t", "x", {0: "r", 1: "r", 2: "s"})
    assert [k.name for k in everyone.data[:-1]] == ["r", "s"]  # every position marked: no "other tokens" entry


def test_a_slide_thins_a_long_prompts_ticks_by_the_count_of_all_its_bars():
    labels = ["<bos>"] + [f"t{i}" for i in range(39)]
    fig = figures.fit_width(figures.token_credit(np.ones(39), labels, "t", "φ", {39: "the last token"}), 780)
    assert figures.for_slides(fig).layout.xaxis.dtick == 2  # 40 labels at 24 px on a slide: every other one


def test_attention_row_draws_one_query_row_on_the_token_positions():
    pattern = np.tril(np.ones((4, 4)))
    pattern /= pattern.sum(1, keepdims=True)
    fig = figures.attention_row(pattern, 2, ["<bos>", "a", "b", "c"], "L1H1", {1: "its earlier copy"})
    bars = fig.data[-1]
    assert list(bars.x) == ["0: &lt;bos&gt;", "1: a", "2: b"]
    assert list(bars.y) == [1 / 3, 1 / 3, 1 / 3] and fig.layout.yaxis.title.text == "attention weight"
