"""Plotly figure builders: numpy arrays and labels in, ``go.Figure`` out. No Streamlit here."""

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

__all__ = ["head_colour", "wo_blocks", "head_norms_bar", "head_contributions_heatmap", "training_curves"]

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


def training_curves(history: list[dict[str, float]]) -> go.Figure:
    """Loss (nats per token) and the induction / previous-token scores against the training step."""
    from plotly.subplots import make_subplots

    steps = [row["step"] for row in history]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss", "best head scores"), horizontal_spacing=0.12)
    for key, name, colour in (("loss", "training loss", "#636EFA"), ("repeat_loss", "loss on second repeats", "#EF553B")):
        fig.add_trace(go.Scatter(x=steps, y=[row[key] for row in history], name=name, mode="lines+markers",
                                 line={"color": colour}, hovertemplate=f"step %{{x}}<br>{name} %{{y:.3f}} nats<extra></extra>"),
                      row=1, col=1)
    for key, name, colour in (("induction", "induction score", "#00CC96"), ("prev_token", "previous-token score", "#AB63FA")):
        if history and key in history[0]:
            fig.add_trace(go.Scatter(x=steps, y=[row[key] for row in history], name=name, mode="lines+markers",
                                     line={"color": colour}, hovertemplate=f"step %{{x}}<br>{name} %{{y:.3f}}<extra></extra>"),
                          row=1, col=2)
    fig.update_xaxes(title="training step")
    fig.update_yaxes(title="nats per token", row=1, col=1)
    fig.update_yaxes(title="mean attention (0–1)", range=[0, 1.05], row=1, col=2)
    fig.update_layout(legend={"orientation": "h", "y": -0.25})
    return _layout(fig, "Training", 420)
