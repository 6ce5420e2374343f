"""Plotly figure builders: numpy arrays and labels in, ``go.Figure`` out. No Streamlit here."""

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

__all__ = ["head_colour", "wo_blocks", "head_norms_bar", "head_contributions_heatmap"]

FONT = {"size": 14}


def head_colour(head: int) -> str:
    """One colour per head, the same on every figure."""
    palette = qualitative.Plotly + qualitative.D3 + qualitative.Light24
    return palette[head % len(palette)]


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=title, height=height, font=FONT, margin={"l": 70, "r": 20, "t": 60, "b": 60})
    return fig


def wo_blocks(n_heads: int, d_head: int, d_model: int, row: int) -> go.Figure:
    """W_O drawn as H stacked row blocks of d_head × d_model, one colour per head; ``row`` marked."""
    fig = go.Figure()
    for h in range(n_heads):
        top, bottom = h * d_head, (h + 1) * d_head - 1
        fig.add_trace(go.Bar(
            x=[0], y=[d_head], base=[top], width=[d_model], offset=0,
            marker={"color": head_colour(h), "line": {"color": "white", "width": 1}},
            name=f"head {h}", showlegend=n_heads <= 16,
            hovertemplate=f"head {h}<br>rows {top}–{bottom} of W_O<br>= W_O[{h}], {d_head} × {d_model}<extra></extra>",
        ))
        if n_heads <= 16:
            fig.add_annotation(x=d_model / 2, y=top + d_head / 2, text=f"head {h}: rows {top}–{bottom}",
                               showarrow=False, font={"size": 12, "color": "white"})
    fig.add_shape(type="line", x0=0, x1=d_model, y0=row + 0.5, y1=row + 0.5, line={"color": "black", "width": 3})
    fig.add_annotation(x=d_model, y=row + 0.5, xanchor="left", showarrow=False, font={"size": 12},
                       text=f"row {row} → head {row // d_head}, row {row % d_head}")
    fig.update_xaxes(title="column of W_O (d_model index)", range=[0, d_model * 1.45])
    fig.update_yaxes(title="row of the concatenated W_O", autorange="reversed")
    fig.update_layout(bargap=0, barmode="overlay", legend={"title": "block"})
    return _layout(fig, f"W_O ({n_heads * d_head} × {d_model}) = {n_heads} stacked blocks of {d_head} × {d_model}", 420)


def head_norms_bar(norms: np.ndarray, total_norm: float, position: int) -> go.Figure:
    """‖result_h‖ for each head at one position, beside ‖attention output‖ (their vector sum)."""
    labels = [f"head {h}" for h in range(len(norms))] + ["Σ heads = output"]
    colours = [head_colour(h) for h in range(len(norms))] + ["#444444"]
    fig = go.Figure(go.Bar(x=labels, y=list(norms) + [total_norm], marker_color=colours,
                           hovertemplate="%{x}: ‖·‖ = %{y:.4f}<extra></extra>"))
    fig.update_yaxes(title="L2 norm (no unit)")
    fig.update_xaxes(title="component")
    return _layout(fig, f"Each head's contribution at position {position}, and their sum", 380)


def head_contributions_heatmap(head_results: np.ndarray, summed: np.ndarray, attn_out: np.ndarray, position: int) -> go.Figure:
    """Rows: result_h for each head, their sum, and concat-then-project's output, over d_model."""
    rows = np.vstack([head_results, summed[None], attn_out[None]])  # [head + 2, d_model]
    labels = [f"head {h}" for h in range(len(head_results))] + ["Σ_h result_h", "concat → W_O"]
    limit = float(np.abs(rows).max()) or 1.0
    fig = go.Figure(go.Heatmap(z=rows, y=labels, colorscale="RdBu", zmid=0, zmin=-limit, zmax=limit,
                               colorbar={"title": "value"},
                               hovertemplate="%{y}<br>d_model index %{x}<br>value %{z:.4f}<extra></extra>"))
    fig.update_xaxes(title="d_model index")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, f"Per-head vectors at position {position}: the last two rows match", 120 + 26 * len(labels))
