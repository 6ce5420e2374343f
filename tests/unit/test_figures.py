"""Figure builders: the data drawn is the data given, labelled."""

import numpy as np

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
