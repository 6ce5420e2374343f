"""Text shaded token by token: a latent's top-activating contexts, each token's background as dark as the latent's
activation on it (Bricken et al. 2023's feature view), drawn as static HTML (no rerun, nothing to hover)."""

import html

import numpy as np
import streamlit as st

from classroom.page.slides import presenting

__all__ = ["shaded_lines"]

PAGE_PX, SLIDE_PX = 16, 24  # a page's text, and a slide's (every text at least 24 px)
SHADE = "31, 119, 180"      # the hover view's blue


def _token(label: str, weight: float, peak: bool) -> str:
    outline = "outline: 2px solid #d62728; " if peak else ""
    return (f'<span class="token" data-weight="{weight:.3f}" style="background: rgba({SHADE}, {weight:.3f}); '
            f'{outline}padding: 1px 3px; border-radius: 3px; white-space: pre">{html.escape(label)}</span>')


def shaded_lines(lines: list[tuple[list[str], np.ndarray, int]], scale: float) -> None:
    """One line per context (its tokens' labels, the activation on each [token], the index of its top token, which
    is outlined), every activation shaded against ``scale`` (the largest: full colour)."""
    size = SLIDE_PX if presenting() else PAGE_PX
    rows = []
    for labels, activations, peak in lines:
        weights = np.clip(np.asarray(activations, float) / max(scale, 1e-12), 0, 1)
        tokens = "".join(_token(label, w, i == peak) for i, (label, w) in enumerate(zip(labels, weights)))
        rows.append(f'<div style="display: flex; flex-wrap: wrap; gap: 2px; margin: 4px 0">{tokens}</div>')
    st.html(f'<div class="shaded-text" style="font-size: {size}px; color: #31333f">{"".join(rows)}</div>')
