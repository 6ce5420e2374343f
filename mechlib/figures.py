"""Plotly figure builders: numpy arrays and labels in, ``go.Figure`` out. No Streamlit here."""

import copy
import functools
import math
import textwrap

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

__all__ = ["plain", "head_colour", "wo_blocks", "head_norms_bar", "head_contributions_heatmap", "element_terms",
           "training_curves",
           "pattern_heatmap", "singular_values", "source_bars", "component_bars", "depth_heatmap", "overlap_heatmap",
           "token_heatmap", "eigenvalues_plot", "composition_heatmap", "patching_heatmap", "patterns_grid",
           "time_heatmap", "histogram", "loss_curves", "copy_losses", "for_slides", "fit_width"]

FONT = {"size": 14}
TITLE_FONT = 17     # px, a figure's title
SLIDE_FONT = 24     # px, presentation mode: every chart text, read from the back of a room at 1280 × 720
SLIDE_ROW_PX = 32   # px per labelled row of a heatmap in presentation mode: a 24 px label with room around it
SLIDE_HEIGHT_PX = 385  # px of a slide's figure: what a 1280 × 720 slide has under its top rows, heading and checks
SLIDE_FRAME_PX = 130   # px of that height a chart's title and x-axis take: the rows' labels share the rest
CHAR_EM = 0.62      # a character's mean width in em, in the widest font plotly falls back to (DejaVu Sans for verdana)
CELL_PX = 56        # px per cell of a heatmap sized by its cells (composition scores): a 1 × 1 matrix draws small
CELLS_PX = 840      # px the cells of such a heatmap take at most: GPT-2 small's 132 × 132 pairs get 6 px each
GRID_WIDTH_PX = 900  # the width a page gives a grid of every head's pattern
HEAD_TICKS = 24     # heads labelled one by one on an axis at most; past it, each layer's first head only


def head_colour(head: int) -> str:
    """One colour per head, the same on every figure."""
    palette = qualitative.Plotly + qualitative.D3 + qualitative.Light24
    return palette[head % len(palette)]


def plain(text: str) -> str:
    """``text`` (a token, a title naming one) shown as typed: plotly draws a few HTML tags (<b>, <a href>, <br>) in
    titles, ticks and hover text, and decodes entities, so &, < and > become entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


X_AXIS = {"automargin": True, "autotickangles": [0, -45, -90],  # labels turn as far as they must not to meet
          "ticklabelstandoff": 4}  # clear of the y axis's lowest label, which sits on the same corner
Y_AXIS = {"automargin": True}


def _figure(data: list, title: str, height: int, axes: dict[str, dict] | None = None, title_pad: float | None = None,
            **layout) -> go.Figure:
    """A figure built whole, in one constructor: plotly validates it once, where every ``update_*`` call on a built
    figure parses its paths and runs its callbacks again (3–10 ms each: a heatmap took 12 ms to build, now 2.5).
    Title, height and type; every axis (``axes``: name -> its settings, "xaxis", "yaxis2", …) and the title push
    the margins out as far as their text needs, so no label is cut at the figure's edge and no axis title sits on
    its tick labels. ``title_pad``: px between the title and the plot (a grid's: ``_raised_title``)."""
    axes = {"xaxis": {}, "yaxis": {}, **(axes or {})}
    pad = {} if title_pad is None else {"pad": {"b": title_pad}}
    return go.Figure(data=data, layout={
        "title": {"text": plain(title), "font": {"size": TITLE_FONT}, "automargin": True, "yref": "paper", **pad},
        "height": height, "font": FONT, "margin": {"l": 10, "r": 10, "t": 10, "b": 10}, **layout,
        **{name: {**(X_AXIS if name.startswith("x") else Y_AXIS), **settings} for name, settings in axes.items()}})


def _vline(x: float, text: str | None = None, **line) -> dict:
    """A vertical line at ``x`` across the plot (``fig.add_vline``'s shape), and the layout's annotation for
    ``text`` at its top right: {"shapes": [...], "annotations": [...]} to merge into a layout."""
    shape = {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain", "line": line}
    notes = [] if text is None else [{"text": text, "x": x, "xref": "x", "y": 1, "yref": "y domain",
                                       "xanchor": "left", "yanchor": "top", "showarrow": False}]
    return {"shapes": [shape], "annotations": notes}


@functools.lru_cache(maxsize=32)
def _grid_layout(rows: int, cols: int, titles: tuple[str, ...], horizontal: float, vertical: float) -> dict:
    """``make_subplots``' layout for a grid (each panel's axes, their domains, the panels' titles), built once per
    shape: making the subplots took 31 ms of a grid's 83."""
    from plotly.subplots import make_subplots

    return make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=horizontal,
                         vertical_spacing=vertical).layout.to_plotly_json()


def _grid(rows: int, cols: int, titles: list[str], horizontal: float, vertical: float) -> tuple[dict, list[tuple]]:
    """(a copy of the grid's layout, each panel's (row, col, x-axis name, y-axis name, trace's xaxis, yaxis),
    row by row)."""
    layout = copy.deepcopy(_grid_layout(rows, cols, tuple(titles), horizontal, vertical))
    panels = []
    for r in range(rows):
        for c in range(cols):
            n = r * cols + c + 1
            suffix = "" if n == 1 else str(n)
            panels.append((r, c, "xaxis" + suffix, "yaxis" + suffix, "x" + suffix, "y" + suffix))
    return layout, panels


def _raised_title(annotations: list[dict]) -> float:
    """The title's pad (px) that raises it above a grid's panel titles, which sit just above the panels."""
    return 1.6 * max((note.get("font", {}).get("size") or FONT["size"]) for note in annotations)


def _colorbar(title: str) -> dict:
    """A colour bar whose title runs along its side, clear of the tick labels at its ends."""
    return {"title": {"text": title, "side": "right"}}


def _legend_below() -> dict:
    """A horizontal legend at the figure's foot: it pushes the bottom margin out, below the x-axis title."""
    return {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0, "xanchor": "left"}


def _subplots_title(fig: go.Figure) -> go.Figure:
    """``fig`` (subplots) with its title raised above the panels' own titles, which sit just above the panels."""
    fig.update_layout(title_pad_b=_raised_title([note.to_plotly_json() for note in fig.layout.annotations]))
    return fig


def _wrap(text: str, width: float, size: float) -> str:
    """``text`` broken at spaces (plotly's <br>) into lines of at most ``width`` px at ``size`` px type."""
    per_line = max(8, int(width / (CHAR_EM * size)))
    return "<br>".join(textwrap.wrap(text.replace("<br>", " "), per_line, break_long_words=False,
                                     break_on_hyphens=False))


def fit_width(fig: go.Figure, width: int) -> go.Figure:
    """``fig`` itself, made at most ``width`` px wide (narrower where the figure asks for less: a heatmap of few
    cells), its title wrapped to that width: the size a page draws the figure at and the size its export renders.
    In place: a page builds each figure for one draw, and a copy (plotly validates it whole) took 60 ms a figure,
    as long as building it."""
    width = min(fig.layout.width or width, width)
    title = fig.layout.title
    if title.text:  # assigned, not update_layout: a fifth of the cost
        title.text = _wrap(title.text, width - 20, title.font.size or TITLE_FONT)
    fig.layout.width = width
    return fig


def wo_blocks(n_heads: int, d_head: int, d_model: int, row: int) -> go.Figure:
    """W_O drawn as H stacked row blocks of d_head × d_model, one colour per head; ``row`` marked."""
    bars, notes = [], []
    for h in range(n_heads):
        top, bottom = h * d_head, (h + 1) * d_head - 1
        bars.append(go.Bar(
            x=[0], y=[d_head], base=[top], width=[d_model], offset=0,
            marker={"color": head_colour(h), "line": {"color": "white", "width": 1}},
            name=f"head {h}", showlegend=n_heads <= 16,
            hovertemplate=f"head {h}<br>rows {top}–{bottom} of W_O<br>= W_O[{h}], {d_head} × {d_model}<extra></extra>",
        ))
        if n_heads <= 16:
            notes.append({"x": d_model / 2, "y": top + d_head / 2, "text": f"head {h}: rows {top}–{bottom}",
                          "showarrow": False, "font": {"size": 12, "color": "white"}})
    notes.append({"x": d_model, "y": row + 0.5, "xanchor": "left", "showarrow": False, "font": {"size": 12},
                  "text": f"row {row} → head {row // d_head}, row {row % d_head}"})
    marked = {"type": "line", "x0": 0, "x1": d_model, "y0": row + 0.5, "y1": row + 0.5,
              "line": {"color": "black", "width": 3}}
    return _figure(bars, f"W_O ({n_heads * d_head} × {d_model}) = {n_heads} stacked blocks of {d_head} × {d_model}",
                   420, {"xaxis": {"title": "column of W_O (d_model index)", "range": [0, d_model * 1.45]},
                         "yaxis": {"title": "row of the concatenated W_O", "autorange": "reversed"}},
                   bargap=0, barmode="overlay", legend={"title": "block"}, shapes=[marked], annotations=notes)


def head_norms_bar(norms: np.ndarray, total_norm: float, position: int) -> go.Figure:
    """‖result_h‖ for each head at one position, beside ‖attention output‖ (their vector sum)."""
    labels = [f"head {h}" for h in range(len(norms))] + ["Σ heads = output"]
    colours = [head_colour(h) for h in range(len(norms))] + ["#444444"]
    bars = go.Bar(x=labels, y=list(norms) + [total_norm], marker_color=colours,
                  hovertemplate="%{x}: ‖·‖ = %{y:.4f}<extra></extra>")
    return _figure([bars], f"Each head's contribution at position {position}, and their sum", 380,
                   {"xaxis": {"title": "component"}, "yaxis": {"title": "L2 norm (no unit)"}})


def head_contributions_heatmap(head_results: np.ndarray, summed: np.ndarray, attn_out: np.ndarray, position: int) -> go.Figure:
    """Rows: result_h for each head, their sum, and concat-then-project's output, over d_model."""
    rows = np.vstack([head_results, summed[None], attn_out[None]])  # [head + 2, d_model]
    labels = [f"head {h}" for h in range(len(head_results))] + ["Σ_h result_h", "concat → W_O"]
    limit = float(np.abs(rows).max()) or 1.0
    cells = go.Heatmap(z=rows, y=labels, colorscale="RdBu", zmid=0, zmin=-limit, zmax=limit, colorbar=_colorbar("value"),
                       hovertemplate="%{y}<br>d_model index %{x}<br>value %{z:.4f}<extra></extra>")
    return _figure([cells], f"Per-head vectors at position {position}: the last two rows match", 120 + 26 * len(labels),
                   {"xaxis": {"title": "d_model index"}, "yaxis": {"autorange": "reversed"}})


def element_terms(terms: np.ndarray, partial_sums: np.ndarray, i: int, j: int) -> go.Figure:
    """The D terms h[i, k] W_O[k, j] of one output element R[i, j] [d_model], one bar per k of the concatenated
    heads, coloured by the head k belongs to; each head's partial sum [head] in its legend entry."""
    n_heads = len(partial_sums)
    d_head = len(terms) // n_heads
    bars = []
    for h in range(n_heads):
        ks = np.arange(h * d_head, (h + 1) * d_head)
        bars.append(go.Bar(
            x=ks, y=terms[ks], marker={"color": head_colour(h), "line": {"width": 0}},
            name=f"head {h}: Σ = {partial_sums[h]:.4g}",
            showlegend=n_heads <= 16,
            hovertemplate=f"k = %{{x}}: head {h}, row %{{x}} − {h * d_head} of its block<br>"
                          f"h[{i}, k] · W_O[k, {j}] = %{{y:.4g}}<extra></extra>"))
    return _figure(bars, f"R[{i}, {j}] as {len(terms)} terms, {n_heads} runs of {d_head}, one per head", 420,
                   {"xaxis": {"title": "k: index into the concatenated heads (row of W_O)"},
                    "yaxis": {"title": f"h[{i}, k] · W_O[k, {j}]"}}, bargap=0, legend={"title": "head: partial sum"})


def training_curves(history: list[dict[str, float]], step: int | None = None) -> go.Figure:
    """Loss (nats per token) and the induction / previous-token scores against the training step; ``step`` marked."""
    steps = [row["step"] for row in history]
    layout, _ = _grid(1, 2, ["loss", "best head scores"], 0.12, 0.3)
    lines = [go.Scatter(x=steps, y=[row[key] for row in history], name=name, mode="lines+markers", meta=key,
                        line={"color": colour}, xaxis="x", yaxis="y",
                        hovertemplate=f"step %{{x}}<br>{name} %{{y:.3f}} nats<extra></extra>")
             for key, name, colour in (("loss", "training loss", "#636EFA"),
                                       ("repeat_loss", "loss on second repeats", "#EF553B"))]
    lines += [go.Scatter(x=steps, y=[row[key] for row in history], name=name, mode="lines+markers", meta=key,
                         line={"color": colour}, xaxis="x2", yaxis="y2",
                         hovertemplate=f"step %{{x}}<br>{name} %{{y:.3f}}<extra></extra>")
              for key, name, colour in (("induction", "induction score", "#00CC96"),
                                        ("prev_token", "previous-token score", "#AB63FA"))
              if history and key in history[0]]
    ends = [min(steps, default=0), max(steps, default=1)]
    pad = 0.02 * (ends[1] - ends[0])  # room for the end markers, and no more: the axis ends where the data does
    steps_axis = {"title": "training step", "range": [ends[0] - pad, ends[1] + pad]}
    axes = {"xaxis": {**layout["xaxis"], **steps_axis}, "xaxis2": {**layout["xaxis2"], **steps_axis},
            "yaxis": {**layout["yaxis"], "title": "nats per token"},
            "yaxis2": {**layout["yaxis2"], "title": "mean attention (0–1)", "range": [0, 1.05]}}
    notes, shapes = layout["annotations"], []
    if step is not None:
        late = step > (ends[0] + ends[1]) / 2  # its label on the side with room: before a late step, after an early one
        for x, y in (("x", "y"), ("x2", "y2"))[:1 + (len(lines) > 2)]:  # on each panel with lines
            shapes.append({"type": "line", "x0": step, "x1": step, "xref": x, "y0": 0, "y1": 1, "yref": f"{y} domain",
                           "line": {"dash": "dash", "color": "black"}})
            notes.append({"text": f"step {step:,}", "x": step, "xref": x, "y": 0, "yref": f"{y} domain",
                          "xanchor": "right" if late else "left", "yanchor": "bottom", "showarrow": False})
    return _figure(lines, "Training", 420, axes, _raised_title(layout["annotations"]), legend=_legend_below(),
                   annotations=notes, shapes=shapes)


def pattern_heatmap(pattern: np.ndarray, labels: list[str], title: str, scores: bool = False) -> go.Figure:
    """A [query_pos key_pos] matrix with token labels on both axes: the pattern (0 to 1, the causal mask shows
    as 0) or, with ``scores``, the raw scores (diverging around 0, masked entries blank)."""
    labels = [plain(label) for label in labels]
    n = len(labels)
    ticks = [f"{i}: {label}" for i, label in enumerate(labels)]
    hover = [[f"query {i} '{labels[i]}' → key {j} '{labels[j]}'" for j in range(n)] for i in range(n)]
    if scores:
        z = np.where(np.isfinite(pattern), pattern, np.nan)
        limit = float(np.nanmax(np.abs(z))) or 1.0
        colours = {"colorscale": "RdBu", "zmid": 0, "zmin": -limit, "zmax": limit, "colorbar": _colorbar("score")}
    else:
        z, colours = pattern, {"colorscale": "Blues", "zmin": 0, "zmax": 1, "colorbar": _colorbar("attention")}
    cells = go.Heatmap(z=z, x=ticks, y=ticks, text=hover, **colours, hovertemplate="%{text}<br>%{z:.3f}<extra></extra>")
    return _figure([cells], title, 560, {
        "xaxis": {"title": "key (source) position", "tickfont": {"size": 11}},
        "yaxis": {"title": "query (destination) position", "autorange": "reversed", "tickfont": {"size": 11}}})


def singular_values(spectra: dict[str, np.ndarray], d_head: int) -> go.Figure:
    """Singular values of W_QK and W_OV on a log scale, with d_head marked: the rank can be at most d_head."""
    lines = []
    for name, colour in (("W_QK", "#636EFA"), ("W_OV", "#EF553B")):
        values = np.maximum(spectra[name], 1e-18)
        lines.append(go.Scatter(x=np.arange(1, len(values) + 1), y=values, mode="markers+lines", name=name,
                                line={"color": colour}, hovertemplate=f"{name}: σ_%{{x}} = %{{y:.3g}}<extra></extra>"))
    return _figure(lines, "Singular values of W_QK and W_OV", 380, {
        "xaxis": {"title": "index of the singular value"},
        "yaxis": {"title": "singular value (log scale)", "type": "log", "exponentformat": "e"}},  # 1e−18: exponents full size
        **_vline(d_head + 0.5, f"d_head = {d_head}", dash="dash"))


def source_bars(values: np.ndarray, labels: list[str], title: str, axis: str) -> go.Figure:
    """One bar per source position, hover naming the token."""
    ticks = [f"{i}: {plain(label)}" for i, label in enumerate(labels)]
    bars = go.Bar(x=ticks, y=values, marker_color="#636EFA",
                  hovertemplate="source %{x}<br>" + axis + " %{y:.4f}<extra></extra>")
    return _figure([bars], title, 380, {"xaxis": {"title": "source position: token"}, "yaxis": {"title": axis}})


def component_bars(values: np.ndarray, labels: list[str], title: str, axis: str, total: float | None = None,
                   categories: str = "component") -> go.Figure:
    """A waterfall of scalar shares, one bar per label (``categories`` names them on the axis: "component",
    "time step: token"); with ``total`` the last bar shows the real value."""
    measures = ["relative"] * len(values) + (["total"] if total is not None else [])
    steps = go.Waterfall(x=[plain(label) for label in labels] + (["sum"] if total is not None else []),
                         y=list(values) + ([total] if total is not None else []),
                         measure=measures, hovertemplate="%{x}: %{y:.4f}<extra></extra>",
                         increasing={"marker": {"color": "#00CC96"}}, decreasing={"marker": {"color": "#EF553B"}},
                         totals={"marker": {"color": "#636EFA"}})
    return _figure([steps], title, 420, {"xaxis": {"title": categories}, "yaxis": {"title": axis}})


def depth_heatmap(norms: np.ndarray, labels: list[str]) -> go.Figure:
    """‖residual‖ at each layer boundary (rows: the embeddings, then after each block) and position (columns)."""
    ticks = [f"{i}: {plain(label)}" for i, label in enumerate(labels)]
    rows = ["the embeddings"] + [f"after block {l}" for l in range(norms.shape[0] - 1)]
    cells = go.Heatmap(z=norms, x=ticks, y=rows, colorscale="Viridis", colorbar=_colorbar("‖residual‖"),
                       hovertemplate="%{y}<br>position %{x}<br>‖residual‖ %{z:.3f}<extra></extra>")
    return _figure([cells], "The residual stream's size through depth", 200 + 40 * norms.shape[0],
                   {"xaxis": {"title": "position: token"}, "yaxis": {"autorange": "reversed"}})


def overlap_heatmap(overlap: np.ndarray, labels: list[str], baseline: float) -> go.Figure:
    """Mean squared cosine of principal angles between every pair of heads' output subspaces."""
    cells = go.Heatmap(z=overlap, x=labels, y=labels, colorscale="Blues", zmin=0, zmax=1, colorbar=_colorbar("overlap"),
                       hovertemplate="%{y} vs %{x}<br>overlap %{z:.3f}<extra></extra>")
    return _figure([cells], f"Heads' output subspaces overlap (random subspaces: {baseline:.3f})", 480,
                   {"yaxis": {"autorange": "reversed"}})


def token_heatmap(matrix: np.ndarray, rows: list[str], columns: list[str], title: str, x_title: str, y_title: str,
                  value: str, diverging: bool = True) -> go.Figure:
    """A token × token matrix (a bigram table, a QK or OV circuit) with the tokens named on both axes."""
    colours = ({"colorscale": "RdBu", "zmid": 0} if diverging else {"colorscale": "Blues", "zmin": 0})
    cells = go.Heatmap(z=matrix, x=[plain(c) for c in columns], y=[plain(r) for r in rows], colorbar=_colorbar(value),
                       **colours, hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>{value} %{{z:.3f}}<extra></extra>")
    return _figure([cells], title, 520, {"xaxis": {"title": x_title, "tickfont": {"size": 11}},
                                         "yaxis": {"title": y_title, "autorange": "reversed", "tickfont": {"size": 11}}})


def eigenvalues_plot(eigenvalues: dict[str, np.ndarray]) -> go.Figure:
    """Each head's OV-circuit eigenvalues in the complex plane: a copying head's lie mostly to the right."""
    points = [go.Scatter(x=values.real, y=values.imag, mode="markers", name=name, marker={"color": head_colour(i), "size": 8},
                         hovertemplate=f"{name}<br>λ = %{{x:.3f}} + %{{y:.3f}}i<extra></extra>")
              for i, (name, values) in enumerate(eigenvalues.items())]
    axes = [_vline(0, color="grey")["shapes"][0],
            {"type": "line", "x0": 0, "x1": 1, "xref": "x domain", "y0": 0, "y1": 0, "yref": "y", "line": {"color": "grey"}}]
    return _figure(points, "OV-circuit eigenvalues (positive real part: the head copies)", 440,
                   {"xaxis": {"title": "real part"}, "yaxis": {"title": "imaginary part"}}, shapes=axes)


def composition_heatmap(scores: np.ndarray, earlier: list[str], later: list[str], baseline: float, mode: str) -> go.Figure:
    """[earlier head, later head] composition scores; the colour scale is centred on the random baseline,
    so heads that compose more than chance show blue and less than chance red. NaN (a pair whose "earlier"
    head is not in an earlier layer) is left blank."""
    limit = max(float(np.nanmax(np.abs(scores - baseline))), 1e-6)
    cells = go.Heatmap(z=scores, x=later, y=earlier, colorscale="RdBu", zmid=baseline, zmin=baseline - limit,
                       zmax=baseline + limit, hoverongaps=False, colorbar=_colorbar("score"),
                       hovertemplate="earlier %{y} → later %{x}<br>score %{z:.3f}<br>"
                                     f"random ≈ {baseline:.3f}<extra></extra>")
    cell = min(CELL_PX, CELLS_PX / max(scores.shape))  # sized by its cells: a 1 × 1 matrix draws small
    return _figure([cells], f"{mode}-composition (random baseline {baseline:.3f})", round(200 + cell * len(earlier)),
                   {"xaxis": {"title": "later head (reads)", **_head_ticks(later)},
                    "yaxis": {"title": "earlier head (writes)", "autorange": "reversed", **_head_ticks(earlier)}},
                   width=round(260 + cell * len(later)))


def _head_ticks(heads: list[str]) -> dict:
    """Every head's label on an axis of a few heads; of many (GPT-2 small's 144), each layer's first only."""
    if len(heads) <= HEAD_TICKS:
        return {}
    firsts = [head for head in heads if head.endswith("H0")]
    return {"tickmode": "array", "tickvals": firsts, "ticktext": firsts}


def patching_heatmap(effects: np.ndarray, rows: list[str], columns: list[str], title: str, x_title: str,
                     y_title: str) -> go.Figure:
    """Activation patching's effects [row, column] ((clean − patched) / (clean − corrupted)): red where corrupting
    that activation alone breaks the prediction (1: as much as the corrupted input), blue where it helps, white at 0;
    NaN (a path that cannot exist) blank. Sized by its cells up to the place's width."""
    limit = max(float(np.nanmax(np.abs(effects))) if np.isfinite(effects).any() else 0.0, 1.0)
    cells = go.Heatmap(z=effects, x=columns, y=rows, colorscale="RdBu_r", zmid=0, zmin=-limit, zmax=limit,
                       hoverongaps=False, colorbar=_colorbar("effect"),
                       hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>effect %{{z:.2f}}<extra></extra>")
    n_rows, n_columns = effects.shape
    return _figure([cells], title, 200 + CELL_PX * n_rows,
                   {"xaxis": {"title": x_title}, "yaxis": {"title": y_title, "autorange": "reversed"}},
                   width=min(260 + CELL_PX * n_columns, 1200))


def patterns_grid(patterns: np.ndarray, title: str) -> go.Figure:
    """Every head's attention pattern [layer head q k] as small multiples: rows about as tall as a panel of the
    page's width is wide (a layer of 4 heads 260 px, of GPT-2's 12 heads 120), 50 px between them for the titles."""
    layers, heads = patterns.shape[:2]
    row = min(260, max(120, GRID_WIDTH_PX // heads + 40))
    height = row * layers + 100
    layout, panels = _grid(layers, heads, [f"L{l}H{h}" for l in range(layers) for h in range(heads)],
                           min(0.03, 0.24 / max(1, heads - 1)), min(0.3, 50 / height))
    cells, axes = [], {}
    for l, h, xaxis, yaxis, x, y in panels:
        cells.append(go.Heatmap(z=patterns[l, h], colorscale="Blues", zmin=0, zmax=1, showscale=False, xaxis=x, yaxis=y,
                                hovertemplate=f"L{l}H{h}<br>query %{{y}} → key %{{x}}<br>%{{z:.3f}}<extra></extra>"))
        axes[xaxis] = {**layout.pop(xaxis), "showticklabels": False}
        axes[yaxis] = {**layout.pop(yaxis), "autorange": "reversed", "showticklabels": False}
        if h == 0:  # the first column's only: beside each other, the panels' titles would meet
            axes[yaxis]["title"] = "query position"
            if l == layers - 1:
                axes[xaxis]["title"] = "key position"
    return _figure(cells, title, height, axes, _raised_title(layout["annotations"]), annotations=layout["annotations"])


def time_heatmap(matrix: np.ndarray, labels: list[str], title: str, value: str, scale: str = "signed",
                 rows: str = "dimension") -> go.Figure:
    """A [row, position] matrix over time, hover naming the token at each position; ``rows`` names what a row
    is ("dimension", "head"). ``scale``: "signed" (diverging around 0), "gate" (0 to 1) or "size" (0 to the
    largest value)."""
    ticks = [f"{i}: {plain(label)}" for i, label in enumerate(labels)]
    colours = {"signed": {"colorscale": "RdBu", "zmid": 0}, "gate": {"colorscale": "Viridis", "zmin": 0, "zmax": 1},
               "size": {"colorscale": "Viridis", "zmin": 0}}[scale]
    cells = go.Heatmap(z=matrix, x=ticks, colorbar=_colorbar(value), **colours,
                       hovertemplate="position %{x}<br>" + rows + " %{y}<br>" + value + " %{z:.3f}<extra></extra>")
    return _figure([cells], title, 420, {"xaxis": {"title": "position: token", "tickfont": {"size": 10}},
                                         "yaxis": {"title": rows}})


def histogram(values: np.ndarray, title: str, axis: str) -> go.Figure:
    bars = go.Histogram(x=values, nbinsx=40, marker_color="#636EFA", hovertemplate=axis + " %{x}<br>count %{y}<extra></extra>")
    return _figure([bars], title, 360, {"xaxis": {"title": axis}, "yaxis": {"title": "count"}})


def loss_curves(losses: dict[str, np.ndarray], labels: list[str], split: int) -> go.Figure:
    """Loss (nats) at each position for several models, the start of the repeat marked."""
    lines = [go.Scatter(x=list(range(1, len(values) + 1)), y=values, mode="lines+markers", name=name,
                        line={"color": head_colour(i)}, text=[plain(label) for label in labels[1:]],
                        hovertemplate=name + "<br>predicting position %{x} ('%{text}')<br>loss %{y:.2f} nats<extra></extra>")
             for i, (name, values) in enumerate(losses.items())]
    return _figure(lines, "Loss at each position of a repeated random sequence", 400,
                   {"xaxis": {"title": "position predicted"}, "yaxis": {"title": "loss (nats per token)"}},
                   **_vline(split, "the repeat starts", dash="dash"))


def heads_forming(patterns: np.ndarray, step: int, length: int) -> go.Figure:
    """Every head's attention on one repeated sequence (<bos>, a segment of ``length``, the segment again) at a
    training step: patterns [layer head query_pos key_pos], one panel per head. A previous-token head lights the
    diagonal just below the main one; an induction head a stripe ``length`` − 1 below the main one, in the second copy."""
    layers, heads = patterns.shape[:2]
    layout, panels = _grid(layers, heads, [f"L{l}H{h}" for l in range(layers) for h in range(heads)],
                           min(0.08, 0.5 / max(1, heads - 1)), 0.12)
    middles, names = [1 + (length - 1) / 2, 1 + length + (length - 1) / 2], ["1st copy", "2nd copy"]
    edge, end, dotted = length + 0.5, 2 * length + 0.5, {"color": "grey", "width": 1, "dash": "dot"}
    cells, axes, shapes = [], {}, []
    for layer, head, xaxis, yaxis, x, y in panels:
        cells.append(go.Heatmap(z=patterns[layer, head], zmin=0, zmax=1, colorscale="Blues", showscale=False, xaxis=x,
                                yaxis=y, hovertemplate="query %{y} → key %{x}<br>attention %{z:.2f}<extra></extra>"))
        # tick labels on the outer panels only: inside, they would meet the next panel's, and its title
        axes[xaxis] = {**layout.pop(xaxis), "tickvals": middles, "ticktext": names, "showticklabels": layer == layers - 1}
        axes[yaxis] = {**layout.pop(yaxis), "tickvals": middles, "ticktext": names, "showticklabels": head == 0,
                       "autorange": "reversed"}
        if head == 0:
            axes[yaxis]["title"] = "query position"
            if layer == layers - 1:
                axes[xaxis]["title"] = "key position"
        shapes += [{"type": "line", "x0": edge, "x1": edge, "y0": -0.5, "y1": end, "xref": x, "yref": y, "line": dotted},
                   {"type": "line", "x0": -0.5, "x1": end, "y0": edge, "y1": edge, "xref": x, "yref": y, "line": dotted}]
    title = f"Every head's attention at step {step:,} (white 0, dark blue 1)"  # where the second copy starts, dotted
    return _figure(cells, title, 300 * layers + 80, axes, _raised_title(layout["annotations"]),
                   annotations=layout["annotations"], shapes=shapes)


class LiveTraining:
    """The Train page's live view of heads forming: ``heads_forming`` (when there are patterns) and
    ``training_curves``, built once and then updated in place at each evaluation. An update costs about 1.5 ms of
    Python against about 35 ms to build both anew, so one session's redraws take little from the other sessions
    sharing the server's interpreter."""

    def __init__(self, history: list[dict[str, float]], patterns: np.ndarray | None, step: int, length: int):
        self.heads = None if patterns is None else heads_forming(patterns, step, length)
        self.curves = training_curves(history)

    def update(self, history: list[dict[str, float]], patterns: np.ndarray | None,
               step: int) -> tuple[go.Figure | None, go.Figure]:
        """Both figures at ``step``: patterns [layer head query_pos key_pos], history one row per evaluation."""
        if self.heads is not None:
            for trace, pattern in zip(self.heads.data, patterns.reshape(-1, *patterns.shape[2:])):
                trace.z = pattern
            self.heads.layout.title.text = f"Every head's attention at step {step:,} (white 0, dark blue 1)"
        steps = [row["step"] for row in history]
        for trace in self.curves.data:
            trace.x, trace.y = steps, [row[trace.meta] for row in history]
        return self.heads, self.curves


def copy_losses(losses: dict[str, np.ndarray], length: int, d_vocab: int, earlier: float) -> go.Figure:
    """Loss (nats) by position on <bos>, a segment of ``length``, the segment again, one line per model: losses
    name -> [2·length], position p predicting token p + 1. The two copies are shaded; dotted, ln d_vocab (a uniform
    guess: knowing nothing) everywhere; dashed, ``earlier`` ("some earlier token comes next") on the second copy."""
    shades, notes = [], []
    for start, end, name, colour in ((0.5, length + 0.5, "first copy", "rgba(99,110,250,0.08)"),
                                     (length + 0.5, 2 * length + 0.5, "second copy", "rgba(239,85,59,0.08)")):
        shades.append({"type": "rect", "x0": start, "x1": end, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain",
                       "fillcolor": colour, "line": {"width": 0}})
        notes.append({"text": name, "x": start, "xref": "x", "y": 1, "yref": "y domain", "xanchor": "left",
                      "yanchor": "top", "showarrow": False})
    x = list(range(1, 2 * length + 1))  # the position of the token predicted
    lines = [go.Scatter(x=x, y=values, mode="lines+markers", name=name, line={"color": head_colour(i)},
                        hovertemplate=name + "<br>predicting position %{x}<br>loss %{y:.2f} nats<extra></extra>")
             for i, (name, values) in enumerate(losses.items())]
    lines += [go.Scatter(x=[0.5, 2 * length + 0.5], y=[np.log(d_vocab)] * 2, mode="lines",
                         line={"color": "grey", "dash": "dot"}, name=f"knows nothing: ln {d_vocab} = {np.log(d_vocab):.2f}",
                         hovertemplate="a uniform guess: %{y:.2f} nats<extra></extra>"),
              go.Scatter(x=[length + 1.5, 2 * length + 0.5], y=[earlier] * 2, mode="lines",
                         line={"color": "black", "dash": "dash"}, name=f"some earlier token comes next: {earlier:.2f}",
                         hovertemplate="uniform over the ids seen so far: %{y:.2f} nats<extra></extra>")]
    return _figure(lines, "Loss by position on a repeated random sequence", 460,
                   {"xaxis": {"title": "position of the token predicted", "range": [0.5, 2 * length + 0.5]},
                    "yaxis": {"title": "loss (nats per token)", "rangemode": "tozero"}},
                   legend=_legend_below(), shapes=shades, annotations=notes)


def for_slides(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` for presentation mode: every font at least ``SLIDE_FONT`` px; every category label on
    its axis shown (plotly thins crowded ticks), or every k-th where the slide's height or width has no room for
    each at that size; the slide's height; a figure sized by its cells grown with its type."""
    slides = go.Figure(fig)  # a copy: the figure passed in is not touched
    for trace in slides.data:  # text drawn on the marks (bar values, cell values) has its own font, 12 px unless set
        if getattr(trace, "text", None) is not None or getattr(trace, "texttemplate", None) is not None:
            trace.update(textfont_size=max(SLIDE_FONT, trace.textfont.size or 0))
    # Streamlit's plotly theme sizes ticks (12 px) and titles (14-16 px) in its template, which wins over
    # layout.font: every text the figure draws gets its size here, each kind by name.
    for axes in (slides.for_each_xaxis, slides.for_each_yaxis):
        axes(lambda axis: axis.update(tickfont_size=max(SLIDE_FONT, axis.tickfont.size or 0), title_font_size=SLIDE_FONT))
    slides.for_each_annotation(lambda note: note.update(font_size=max(SLIDE_FONT, note.font.size or 0)))
    slides.update_layout(font_size=max(SLIDE_FONT, slides.layout.font.size or 0), title_font_size=SLIDE_FONT + 2,
                         legend_font_size=SLIDE_FONT, legend_title_font_size=SLIDE_FONT)
    slides.update_traces(colorbar_tickfont_size=SLIDE_FONT, colorbar_title_font_size=SLIDE_FONT,
                         selector=lambda trace: "colorbar" in trace)
    slides.update_coloraxes(colorbar_tickfont_size=SLIDE_FONT, colorbar_title_font_size=SLIDE_FONT)
    titled = [axis for axis in slides.select_yaxes() if axis.title.text]
    for k, axis in enumerate(titled):  # a title longer than the plot's height wraps; a grid's rows share one
        shared = k and axis.title.text == titled[0].title.text
        axis.update(title_text=None if shared else _wrap(axis.title.text, SLIDE_HEIGHT_PX - SLIDE_FRAME_PX, SLIDE_FONT))
    if slides.layout.legend.orientation == "h":  # a legend at the foot takes a slide's short height from the plot:
        slides.update_layout(legend={"orientation": "v", "yref": "paper", "y": 1, "yanchor": "top", "x": 1.02,
                                     "xanchor": "left"})  # at the side, it takes the wide slide's width instead
    # One height, the slide's: a heatmap of more tokens than its rows (or columns) have room for labels every k-th
    # (each label still at slide size; hovering shows every one); a figure sized by its cells grows with its type,
    # whose margins would otherwise take its cells' room.
    room = {"x": (fig.layout.width or 1100) - SLIDE_FRAME_PX, "y": SLIDE_HEIGHT_PX - SLIDE_FRAME_PX}
    for trace in fig.data:
        for axis in ("x", "y"):
            values = getattr(trace, axis, None)
            if values is not None and len(values) and isinstance(values[0], str):
                name = f"{axis}axis{(getattr(trace, axis + 'axis', None) or axis)[1:]}"
                slides.layout[name].update(tickmode="linear", dtick=max(1, math.ceil(len(values) * SLIDE_ROW_PX
                                                                                     / room[axis])))
    slides.update_layout(height=SLIDE_HEIGHT_PX, width=fig.layout.width and round(fig.layout.width * SLIDE_FONT / FONT["size"]))
    return _subplots_title(slides) if slides.layout.title.pad.b else slides  # raised as far as the panels' titles grew


# Shapley values: which component, or which input token, gets the credit (the page "Which input, or which mechanism?")
__all__ += ["SHAPLEY_BARS", "shapley_bars", "token_credit", "attention_row"]

SHAPLEY_BARS = 16  # players drawn one by one at most; past it, the largest by |φ| in either game, the rest as one bar
ROLE_COLOURS = ("#EF553B", "#00CC96", "#AB63FA", "#FFA15A")  # token_credit's marked positions, in the order given
OTHER_COLOUR = "#9DB2D6"  # token_credit's unmarked positions


def shapley_bars(players: list[str], direct: np.ndarray, total: np.ndarray, direct_errors: np.ndarray,
                 total_errors: np.ndarray, title: str, axis: str) -> go.Figure:
    """Each player's Shapley value [player] in the direct and the total game, side by side, in ``axis``'s unit; a
    sampled game's standard errors [player] as error bars (all zero: exact, none drawn). Of more than SHAPLEY_BARS
    players, the SHAPLEY_BARS − 1 with the largest |φ| in either game, in the players' order, and the rest summed
    into one bar (their errors added in quadrature, as independent estimates' would be)."""
    players, games = list(players), [np.asarray(direct, float), np.asarray(total, float)]
    errors = [np.asarray(direct_errors, float), np.asarray(total_errors, float)]
    ticks = [plain(name) for name in players]
    if len(players) > SHAPLEY_BARS:
        size = np.maximum(np.abs(games[0]), np.abs(games[1]))
        kept = np.sort(np.argsort(-size, kind="stable")[: SHAPLEY_BARS - 1])
        rest = np.setdiff1d(np.arange(len(players)), kept)
        ticks = [ticks[k] for k in kept] + [f"the other {len(rest)}"]
        games = [np.append(values[kept], values[rest].sum()) for values in games]
        errors = [np.append(error[kept], np.sqrt((error[rest] ** 2).sum())) for error in errors]
    bars = []
    for name, values, error, colour in zip(("direct game", "total game"), games, errors, ("#636EFA", "#EF553B")):
        bars.append(go.Bar(x=ticks, y=values, name=name, marker_color=colour,
                           error_y={"type": "data", "array": error, "visible": True} if np.any(error) else None,
                           hovertemplate=f"%{{x}}<br>{name}: φ = %{{y:.3f}}<extra></extra>"))
    return _figure(bars, title, 420, {"xaxis": {"title": "player"}, "yaxis": {"title": axis, "zeroline": True}},
                   barmode="group", legend=_legend_below())


def token_credit(values: np.ndarray, labels: list[str], title: str, axis: str,
                 marks: dict[int, str] | None = None) -> go.Figure:
    """One bar per position of a prompt whose tokens are ``labels`` (every position's, <bos> first): ``values``
    [token] belong to its last len(values) positions (a token attribution leaves <bos> out: its bar is blank). The
    positions ``marks`` names ({position: role}) are coloured by role, each role in the legend; the rest are one
    pale colour. One trace holds every bar (a slide thins its ticks by their count); the legend's entries are
    traces without bars."""
    first, marks = len(labels) - len(values), marks or {}
    ticks = [f"{i}: {plain(label)}" for i, label in enumerate(labels)]
    roles = list(dict.fromkeys(marks.values()))
    colour = {role: ROLE_COLOURS[k % len(ROLE_COLOURS)] for k, role in enumerate(roles)}
    named = [plain(marks.get(i, "other tokens")) for i in range(len(labels))]
    bars = go.Bar(x=ticks, y=[None] * first + [float(value) for value in values], customdata=named,
                  marker_color=[colour.get(marks.get(i), OTHER_COLOUR) for i in range(len(labels))], showlegend=False,
                  hovertemplate=f"position %{{x}}<br>%{{customdata}}<br>{axis}: %{{y:.3f}}<extra></extra>")
    keys = [go.Bar(x=[None], y=[None], name=plain(name), marker_color=shade)
            for name, shade in [("other tokens", OTHER_COLOUR)] * (len(marks) < len(labels)) + list(colour.items())]
    return _figure(keys + [bars], title, 400, {"xaxis": {"title": "position: token", "type": "category"},
                                               "yaxis": {"title": axis, "zeroline": True}},
                   barmode="overlay", legend=_legend_below())  # overlay: the legend's traces take no bar's room


def attention_row(pattern: np.ndarray, query: int, labels: list[str], title: str,
                  marks: dict[int, str] | None = None) -> go.Figure:
    """One head's attention [query_pos key_pos] from position ``query`` to each position up to it, drawn as
    ``token_credit`` draws a token attribution: the same positions, ticks and colours, to set beside it."""
    return token_credit(pattern[query, : query + 1], labels[: query + 1], title, "attention weight", marks)


__all__ += ["FATE_COLOURS", "fates", "feature_directions", "feature_bars", "SAE_CURVES", "sae_curves", "ranked_bars"]

FATE_COLOURS = {"a direction of its own": "#00CC96", "shared: in superposition": "#636EFA",
                "not represented": "#BBBBBB"}


def fates(own: np.ndarray, represented: np.ndarray) -> list[str]:
    """Each toy feature's fate [feature] (``superposition``'s verdicts), as ``FATE_COLOURS`` names it."""
    names = list(FATE_COLOURS)
    return [names[0] if o else names[1] if r else names[2] for o, r in zip(own, represented)]


def feature_directions(W: np.ndarray, own: np.ndarray, represented: np.ndarray, title: str) -> go.Figure:
    """The toy model's feature directions W [hidden, feature] (Elhage et al. 2022). In 2 hidden dimensions each
    feature is an arrow from the origin to W_i, coloured by its fate (its own direction, shared, not represented):
    the paper's polygons. In more, the features' overlaps WᵀW [feature, feature] as a heatmap: the diagonal ‖W_i‖²,
    off it the interference between two features."""
    labels = [f"feature {i}" for i in range(W.shape[1])]
    if W.shape[0] != 2:
        gram = W.T @ W
        bound = float(max(np.abs(gram).max(), 1e-9))
        cells = go.Heatmap(z=gram, x=labels, y=labels, colorscale="RdBu", zmid=0, zmin=-bound, zmax=bound,
                           colorbar=_colorbar("Wᵢ · Wⱼ"), hovertemplate="%{y} · %{x} = %{z:.3f}<extra></extra>")
        return _figure([cells], title, 480, {"yaxis": {"autorange": "reversed"}})
    kinds = fates(own, represented)
    arrows = [go.Scatter(x=[0, W[0, i]], y=[0, W[1, i]], mode="lines+markers", showlegend=False,
                         line={"color": FATE_COLOURS[kind], "width": 3}, marker={"size": [0, 10]},
                         hovertemplate=f"{labels[i]}: {kind}<br>W = (%{{x:.2f}}, %{{y:.2f}})<extra></extra>")
              for i, kind in enumerate(kinds)]
    reach = float(max(np.abs(W).max(), 1e-9))
    tips = W / np.maximum(np.linalg.norm(W, axis=0), 1e-9) * 0.15 * reach  # [2, feature]: past each tip, outwards
    names = go.Scatter(x=W[0] + tips[0], y=W[1] + tips[1], mode="text", text=[str(i) for i in range(W.shape[1])],
                       showlegend=False, hoverinfo="skip")  # inside the plot: a slide's large type stays off the title
    keys = [go.Scatter(x=[None], y=[None], mode="lines", name=kind, line={"color": colour, "width": 3})
            for kind, colour in FATE_COLOURS.items() if kind in kinds]
    reach *= 1.35
    return _figure(arrows + [names] + keys, title, 480, {
        "xaxis": {"title": "hidden dimension 1", "range": [-reach, reach], "zeroline": True},
        "yaxis": {"title": "hidden dimension 2", "range": [-reach, reach], "zeroline": True, "scaleanchor": "x"}},
        legend=_legend_below())


def feature_bars(values: np.ndarray, kinds: list[str], colours: dict[str, str], title: str, axis: str,
                 bar: tuple[float, str] | None = None) -> go.Figure:
    """One bar per feature (or latent) [feature], coloured by its kind (``colours``: kind -> colour, each in the
    legend); ``bar``: (value, its name) drawn as a dashed line across, the threshold a verdict reads."""
    labels = [str(i) for i in range(len(values))]
    bars = [go.Bar(x=[labels[i] for i, k in enumerate(kinds) if k == kind],
                   y=[float(values[i]) for i, k in enumerate(kinds) if k == kind], name=plain(kind),
                   marker_color=colour, hovertemplate=f"%{{x}}<br>{axis}: %{{y:.3f}}<extra>{plain(kind)}</extra>")
            for kind, colour in colours.items() if kind in kinds]
    layout = {"shapes": [], "annotations": []}
    if bar is not None:
        layout = {"shapes": [{"type": "line", "x0": 0, "x1": 1, "xref": "x domain", "y0": bar[0], "y1": bar[0],
                              "yref": "y", "line": {"dash": "dash", "color": "#444444"}}],
                  "annotations": [{"text": plain(bar[1]), "x": 1, "xref": "x domain", "y": bar[0], "yref": "y",
                                   "xanchor": "right", "yanchor": "bottom", "showarrow": False}]}
    return _figure(bars, title, 400, {"xaxis": {"title": "feature", "type": "category",
                                                "categoryorder": "array", "categoryarray": labels},
                                      "yaxis": {"title": axis}}, legend=_legend_below(), **layout)


SAE_CURVES = (("variance_explained", "variance explained", "#00CC96"), ("dead_fraction", "dead latents", "#AB63FA"))


def sae_curves(history: list[dict[str, float]]) -> go.Figure:
    """A sparse autoencoder's training: L0 (latents active per token) and, as shares (0–1), the variance it explains
    and its dead latents, on held-out activations, against the step (history: one row per evaluation)."""
    steps = [row["step"] for row in history]
    layout, _ = _grid(1, 2, ["L0: latents active per token", "shares of the held-out activations"], 0.12, 0.3)
    lines = [go.Scatter(x=steps, y=[row["l0"] for row in history], name="L0", mode="lines+markers", meta="l0",
                        line={"color": "#636EFA"}, xaxis="x", yaxis="y",
                        hovertemplate="step %{x}<br>L0 %{y:.1f} latents<extra></extra>")]
    lines += [go.Scatter(x=steps, y=[row[key] for row in history], name=name, mode="lines+markers", meta=key,
                         line={"color": colour}, xaxis="x2", yaxis="y2",
                         hovertemplate=f"step %{{x}}<br>{name} %{{y:.3f}}<extra></extra>")
              for key, name, colour in SAE_CURVES]
    steps_axis = {"title": "training step"}
    axes = {"xaxis": {**layout["xaxis"], **steps_axis}, "xaxis2": {**layout["xaxis2"], **steps_axis},
            "yaxis": {**layout["yaxis"], "title": "latents", "rangemode": "tozero"},
            "yaxis2": {**layout["yaxis2"], "title": "share (0–1)", "range": [0, 1.05]}}
    return _figure(lines, "The sparse autoencoder learning, on held-out text", 400, axes,
                   title_pad=_raised_title(layout["annotations"]), annotations=layout["annotations"],
                   legend=_legend_below())


def ranked_bars(values: np.ndarray, labels: list[str], title: str, axis: str, categories: str) -> go.Figure:
    """Horizontal bars [entry], in the order given, largest first at the top: a latent's promoted and suppressed
    tokens, the heads that write along it. Positive bars one colour, negative another."""
    ticks = [plain(label) for label in labels]
    bars = go.Bar(y=ticks, x=[float(v) for v in values], orientation="h",
                  marker_color=["#00CC96" if v >= 0 else "#EF553B" for v in values],
                  hovertemplate=f"%{{y}}<br>{axis}: %{{x:.3f}}<extra></extra>")
    return _figure([bars], title, max(300, 90 + 26 * len(labels)),
                   {"yaxis": {"title": categories, "autorange": "reversed", "type": "category"},
                    "xaxis": {"title": axis, "zeroline": True}})
