"""Patterns and messages: attention = (QKᵀ)(VO). W_QK decides where to look, W_OV what moves (seed 002)."""

import inspect

import numpy as np
import pandas as pd
import streamlit as st
import torch

from mechlib import figures, patterns
from mechlib.checks import compare, model_tolerance
from shell import current_model, input_tokens, slider, verdict


@st.cache_data(max_entries=64, show_spinner="Running the model…")
def analyse(key: tuple, _model, ids: tuple[int, ...], layer: int, head: int, dest: int, seed: int) -> dict:
    tolerance = model_tolerance(_model)
    _, cache = _model.run_with_cache(torch.tensor([ids]))
    cached = cache[f"blocks.{layer}.attn.hook_attn_scores"][0, head]
    mine = patterns.scores_from_W_QK(_model, cache, layer, head)[0]
    causal = torch.isfinite(cached)
    return {
        "tolerance": tolerance,
        "regrouping": patterns.regrouping(_model, cache, layer, head, tolerance),
        "spectra": patterns.spectra(_model, layer, head),
        "non_uniqueness": patterns.non_uniqueness(_model, cache, layer, head, seed),
        "scores": compare(mine[causal], cached[causal], tolerance),
        "score_matrix": mine.cpu().double().numpy(),
        "pattern": cache[f"blocks.{layer}.attn.hook_pattern"][0, head].cpu().double().numpy(),
        "messages": patterns.messages(_model, cache, layer, head, dest, tolerance),
    }


st.title("Patterns and messages")
st.markdown(
    "A head works like a soft lookup table: each position's **query** asks a question, every earlier **key** "
    "advertises what its position holds, and each **value** carries the content to hand over. So a head does two "
    "separate jobs. Its **pattern** (query against key) says where each position looks; its **messages** (value, "
    "then W_O) say what moves, and the destination receives their weighted sum. The first job lives entirely in "
    "W_QK = W_Q W_Kᵀ, the second in W_OV = W_V W_O."
)
st.latex(r"h(x) = \underbrace{\operatorname{softmax}\!\Big(\tfrac{x W_Q W_K^{\top} x^{\top}}{\sqrt{d_\text{head}}}\Big)}_{A:\ \text{pattern}}"
         r"\;\underbrace{x\, W_V W_O}_{\text{messages}}, \qquad W_{QK}=W_QW_K^{\top},\; W_{OV}=W_VW_O \in \mathbb{R}^{d_\text{model}\times d_\text{model}}")

key, model = current_model()
cfg = model.cfg
if cfg.n_layers == 0:
    st.info("This model has no attention layers. Choose a model with layers in the sidebar.")
    st.stop()
left, right = st.columns(2)
with left:
    layer = slider("layer", 0, cfg.n_layers - 1, cfg.n_layers - 1, key="layer")
    head = slider("head", 0, cfg.n_heads - 1, 0, key="head")
with right:
    ids, labels = input_tokens(model)
dest = slider("destination position for the messages", 0, len(ids) - 1, len(ids) - 1, key="dest")
result = analyse(key, model, ids, layer, head, dest, st.session_state["seed"])
tol = result["tolerance"]

st.subheader("Regrouping: ((QKᵀ)V)O = (QKᵀ)(VO)")
reg = result["regrouping"]
cols = st.columns(3)
cols[0].metric("max |difference|", f"{reg.check.max_abs_diff:.2e}", help=f"Passes when |a − b| ≤ {tol:.0e} · max(1, |b|).")
cols[0].caption(f"{verdict(reg.check.passed)}: scaled {reg.check.max_scaled_diff:.1e} ≤ {tol:.0e}")
for col, (name, macs) in zip(cols[1:], reg.macs.items()):
    col.metric(f"{name}: multiply-adds", f"{macs:,}", help="For one sequence of this prompt, one head.")
    col.caption(f"measured {reg.time_ms[name]:.3f} ms (median of 5)")
st.caption(f"n = {len(ids)} positions, d_head = {cfg.d_head}, d_model = {cfg.d_model}. Matrix products associate, so "
           "the two groupings give the same numbers; only the cost differs.")

st.subheader("Two d_model × d_model matrices per head, each of rank ≤ d_head")
spectra = result["spectra"]
left, right = st.columns([3, 2])
with left:
    st.plotly_chart(figures.singular_values(spectra, cfg.d_head))
with right:
    for name, values in spectra.items():
        beyond = values[cfg.d_head:].max(initial=0.0) / values[0]
        st.markdown(f"**{name}**: σ₁ = {values[0]:.3g}, σ_{cfg.d_head} = {values[cfg.d_head - 1]:.3g}; largest beyond "
                    f"d_head = {beyond:.1e} × σ₁ — rank {int((values > 1e-10 * values[0]).sum())} ≤ {cfg.d_head} "
                    f"{verdict(beyond <= 1e-10, 'rank ≤ d_head', 'rank > d_head')}")
    nonu = result["non_uniqueness"]
    st.markdown("**Only the products matter.** With a random invertible R (d_head × d_head), float64:")
    st.markdown(f"- W_Q R, W_K R⁻ᵀ: pattern changes by at most **{nonu['pattern']:.1e}** "
                f"{verdict(nonu['pattern'] <= 1e-10)}\n"
                f"- W_V R, R⁻¹ W_O: messages change by at most **{nonu['messages']:.1e}** "
                f"{verdict(nonu['messages'] <= 1e-10)}")

st.subheader("Pattern matching: where each position looks")
scores = result["scores"]
st.markdown(f"Scores recomputed as x_i W_QK x_jᵀ / √d_head (with the query and key biases) against the model's "
            f"cached scores: max |difference| **{scores.max_abs_diff:.1e}** — {verdict(scores.passed)}")
left, right = st.columns(2)
with left:
    st.plotly_chart(figures.pattern_heatmap(result["score_matrix"], labels, "Scores x_i W_QK x_jᵀ / √d_head", scores=True))
with right:
    st.plotly_chart(figures.pattern_heatmap(result["pattern"], labels, f"Layer {layer}, head {head}: the pattern A"))
st.caption("Rows are queries (destinations), columns keys (sources); above the diagonal a position would look ahead, "
           "so those scores are masked and their weights are 0. Softmax turns each row of scores into a row of weights.")

st.subheader(f"Messages into position {dest} ('{labels[dest]}')")
msgs = result["messages"]
vocab = model.tokenizer.labels if model.tokenizer else (lambda ids_: [str(i) for i in ids_])
table = pd.DataFrame({"source": [f"{j}: {labels[j]}" for j in range(dest + 1)],
                      "attention weight": np.round(msgs.weights, 4), "‖message‖": np.round(msgs.norms, 3),
                      "tokens it pushes most (via W_U)": [", ".join(vocab(t)) for t in msgs.top_tokens]})
left, right = st.columns(2)
with left:
    st.plotly_chart(figures.source_bars(msgs.weights, labels[: dest + 1], f"Attention from position {dest}", "attention weight"))
with right:
    st.dataframe(table, hide_index=True, height=360)
st.markdown(f"Σ_j A[{dest}, j] · message_j against the head's output at position {dest}: max |difference| "
            f"**{msgs.check.max_abs_diff:.1e}** — {verdict(msgs.check.passed)}")

with st.expander("Under the hood"):
    st.markdown("`mechlib.patterns`: the checks on this page.")
    st.code(inspect.getsource(patterns.regrouping) + "\n" + inspect.getsource(patterns.messages))
