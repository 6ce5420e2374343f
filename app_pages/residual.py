"""The residual stream: every component reads from it and adds to it (seed 002; Elhage et al. 2021)."""

import inspect

import numpy as np
import pandas as pd
import streamlit as st
import torch

from mechlib import figures, residual
from mechlib.checks import compare, model_tolerance
from shell import current_model, input_tokens, slider, verdict


@st.cache_data(max_entries=64, show_spinner="Running the model…")
def stream(key: tuple, _model, ids: tuple[int, ...], position: int) -> dict:
    tolerance = model_tolerance(_model)
    logits, cache = _model.run_with_cache(torch.tensor([ids]))
    book = residual.ledger(_model, cache)
    terms = book.terms[:, 0, position]                                        # [component d_model]
    final = residual.final_residual(_model, cache)[0, position]               # [d_model]
    lens = residual.logit_lens(_model, cache)[:, 0, position].double()        # [boundary d_vocab]
    adds = {f"L{l} attention": cache[f"blocks.{l}.hook_attn_out"][0].norm(dim=-1).mean().item() for l in range(_model.cfg.n_layers)}
    adds |= {f"L{l} MLP": cache[f"blocks.{l}.hook_mlp_out"][0].norm(dim=-1).mean().item()
             for l in range(_model.cfg.n_layers) if not _model.cfg.attn_only}
    overlap_labels, overlap = residual.subspace_overlap(_model) if _model.cfg.n_layers else ([], torch.zeros(0, 0))
    return {
        "tolerance": tolerance, "labels": book.labels,
        "ledger_check": compare(terms.sum(0), final, tolerance),
        "projections": (terms @ (final / final.norm())).cpu().double().numpy(), "final_norm": final.norm().item(),
        "term_norms": terms.norm(dim=-1).cpu().double().numpy(),
        "depth": residual.boundaries(_model, cache)[:, 0].norm(dim=-1).cpu().double().numpy(), "adds": adds,
        "lens_probs": lens.softmax(-1).cpu().numpy(), "lens_check": compare(lens[-1], logits[0, position].double(), tolerance),
        "top": logits[0, position].topk(min(10, _model.cfg.d_vocab)).indices.tolist(),
        "overlap_labels": overlap_labels, "overlap": overlap.cpu().numpy(),
    }


@st.cache_data(max_entries=64)
def attribution(key: tuple, _model, ids: tuple[int, ...], position: int, token: int) -> dict:
    tolerance = model_tolerance(_model)
    logits, cache = _model.run_with_cache(torch.tensor([ids]))
    labels, shares = residual.direct_logit_attribution(_model, cache, torch.full((1, len(ids)), token))
    shares = shares[:, 0, position]
    return {"labels": labels, "shares": shares.cpu().double().numpy(),
            "check": compare(shares.sum(), logits[0, position, token], tolerance)}


st.title("The residual stream")
st.markdown(
    "Nothing in a transformer overwrites the stream: the embeddings start it, and every head and every MLP reads "
    "it and **adds** its output back. So the last residual is an exact sum of everything that was written, and "
    "each term can be read on its own: through the unembedding at any depth (the logit lens), or as its direct "
    "share of one logit (direct logit attribution)."
)
st.latex(r"x_{\text{final}} = W_E[t] + W_{pos}[p] + \sum_{\ell}\Big(\sum_h h_{\ell,h}(x) + b_O^{\ell}\Big)"
         r" + \sum_\ell \big(\mathrm{MLP}_\ell(x) + b_{out}^{\ell}\big)")

key, model = current_model()
cfg = model.cfg
left, right = st.columns(2)
with left:
    ids, labels = input_tokens(model)
with right:
    position = slider("position", 0, len(ids) - 1, max(0, len(ids) - 2), key="rpos")
result = stream(key, model, ids, position)
tol = result["tolerance"]
vocab = model.tokenizer.labels if model.tokenizer else (lambda t: [str(i) for i in t])

st.subheader(f"The ledger at position {position} ('{labels[position]}')")
check = result["ledger_check"]
st.markdown(f"Sum of the {len(result['labels'])} terms against the real final residual: max |difference| "
            f"**{check.max_abs_diff:.1e}** — {verdict(check.passed)} (|a − b| ≤ {tol:.0e} · max(1, |b|))")
left, right = st.columns(2)
with left:
    st.plotly_chart(figures.component_bars(result["projections"], result["labels"],
                                           "Each term along x̂_final: they add up to ‖x_final‖",
                                           "length along x̂_final", total=result["final_norm"]))
with right:
    st.dataframe(pd.DataFrame({"term": result["labels"], "‖term‖": np.round(result["term_norms"], 3),
                               "along x̂_final": np.round(result["projections"], 3)}), hide_index=True, height=420)

st.subheader("The stream through depth")
left, right = st.columns([3, 2])
with left:
    st.plotly_chart(figures.depth_heatmap(result["depth"], labels))
with right:
    if result["adds"]:
        st.dataframe(pd.DataFrame({"component": list(result["adds"]), "mean ‖output‖ over positions": np.round(list(result["adds"].values()), 3)}),
                     hide_index=True)

st.subheader("Logit lens")
probs = result["lens_probs"]
actual = ids[position + 1] if position + 1 < len(ids) else None
rows = []
for b, p in enumerate(probs):
    top = np.argsort(-p)[:3]
    rows.append({"read after": "the embeddings" if b == 0 else f"block {b - 1}",
                 "top 3 tokens (probability)": ", ".join(f"{vocab([int(t)])[0]} ({p[t]:.2f})" for t in top),
                 f"p(actual next: {vocab([actual])[0] if actual is not None else '—'})": f"{p[actual]:.3f}" if actual is not None else "—"})
st.dataframe(pd.DataFrame(rows), hide_index=True)
st.markdown(f"The last row read through the final LayerNorm and W_U against the model's own logits: max |difference| "
            f"**{result['lens_check'].max_abs_diff:.1e}** — {verdict(result['lens_check'].passed)}")

st.subheader("Direct logit attribution")
options = result["top"]
left, right = st.columns(2)
with left:
    token = st.selectbox("token", options, format_func=lambda t: vocab([t])[0], key="dla_token", bind="query-params")
with right:
    other = st.selectbox("against", [None] + options, format_func=lambda t: "—" if t is None else vocab([t])[0],
                         key="dla_other", bind="query-params")
dla = attribution(key, model, ids, position, token)
shares = dla["shares"]
title = f"Each term's direct share of the logit of '{vocab([token])[0]}'"
if other is not None:
    shares = shares - attribution(key, model, ids, position, other)["shares"]
    title += f" minus that of '{vocab([other])[0]}'"
st.plotly_chart(figures.component_bars(shares, dla["labels"], title, "logit (nats)", total=float(shares.sum())))
st.markdown(f"The shares add up to the logit: max |difference| **{dla['check'].max_abs_diff:.1e}** — {verdict(dla['check'].passed)}. "
            + ("Through LayerNorm each term is divided by the scale cached on this input; the scale depends on all "
               "terms together, so a share is a first-order reading, not what removing the term would do."
               if cfg.normalization == "LN" else "Without LayerNorm the read-out is linear, so the shares are exact."))

if cfg.n_layers:
    st.subheader("Disjoint subspaces")
    overlap, baseline = result["overlap"], residual.random_overlap(cfg.d_model, cfg.d_head)
    off = overlap[~np.eye(len(overlap), dtype=bool)] if len(overlap) > 1 else np.array([np.nan])
    st.markdown(f"Each head writes into a subspace of rank ≤ d_head = {cfg.d_head} of the {cfg.d_model}-dimensional stream. "
                f"Mean overlap between different heads: **{np.nanmean(off):.3f}**; two random {cfg.d_head}-dimensional "
                f"subspaces overlap **{baseline:.3f}** on average (d_head / d_model).")
    st.plotly_chart(figures.overlap_heatmap(overlap, result["overlap_labels"], baseline))

with st.expander("Under the hood"):
    st.markdown("`mechlib.residual`: the ledger and direct logit attribution.")
    st.code(inspect.getsource(residual.ledger) + "\n" + inspect.getsource(residual.direct_logit_attribution))
