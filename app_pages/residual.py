"""The residual stream: every component reads from it and adds to it (seed 002; Elhage et al. 2021)."""

import inspect

import numpy as np
import pandas as pd
import streamlit as st

from mechlib import data, figures, residual
from mechlib.checks import OVERLAP_SIGMAS, SEPARATE_MAX
from shell import check_line, current_model, input_tokens, literal, section, slider


def names(model, tokens) -> list[str]:
    return data.token_labels(model.tokenizer, tokens)


st.title("The residual stream")
st.markdown(
    "Every head and every MLP reads the stream and **adds** its output back; nothing is written any other way. "
    "So the last residual is an exact sum of everything that was written, and each term can be read on its own: "
    "through the unembedding at any depth (the logit lens), or as its direct share of one logit (direct logit "
    "attribution). Adding is not keeping: a later term can point against an earlier one and cancel it."
)
st.latex(r"x_{\text{final}} = W_E[t] + W_{pos}[p] + \sum_{\ell}\Big(\sum_h h_{\ell,h}(x) + b_O^{\ell}\Big)"
         r" + \sum_\ell \big(\mathrm{MLP}_\ell(x) + b_{out}^{\ell}\big)")

key, model = current_model()
cfg = model.cfg
readout = "the final LayerNorm and W_U" if cfg.normalization == "LN" else "W_U (this model has no final LayerNorm)"
left, right = st.columns(2)
with left:
    ids, labels = input_tokens(model)
with right:
    position = slider("position", 0, len(ids) - 1, max(0, len(ids) - 2), key="rpos")

st.subheader(f"The ledger at position {position} ('{literal(labels[position])}')")
book = section(residual.ledger_at, key, model, ids, position)
terms = f"The sum of the {len(book.labels)} terms" if len(book.labels) > 1 else "The only term"
lines = [check_line(f"{terms} read through {readout}, against the logits of a separate forward pass at all "
                    f"{len(ids)} positions", book.check.logits)]
if book.check.residual is not None:
    lines.append(check_line("The sum against that pass's residual after its last block", book.check.residual))
else:
    lines.append("With no blocks the residual is the embedding itself, so only the logits are an independent reference.")
st.markdown("\n\n".join(lines))
if cfg.positional == "shortformer":
    st.caption("Shortformer positions enter the queries and keys only, never the stream: no pos_embed term.")
left, right = st.columns(2)
with left:
    st.plotly_chart(figures.component_bars(book.projections, book.labels,
                                           "Each term along x̂_final: they add up to ‖x_final‖",
                                           "length along x̂_final", total=book.final_norm))
with right:
    st.dataframe(pd.DataFrame({"term": book.labels, "‖term‖": np.round(book.norms, 3),
                               "along x̂_final": np.round(book.projections, 3)}), hide_index=True, height=420)

st.subheader("The stream through depth")
stream = section(residual.depth, key, model, ids)
left, right = st.columns([3, 2])
with left:
    st.plotly_chart(figures.depth_heatmap(stream.norms, labels))
with right:
    if stream.components:
        st.dataframe(pd.DataFrame({"component": stream.components,
                                   "mean ‖output‖ over positions": np.round(stream.added, 3)}), hide_index=True)

st.subheader("Logit lens")
lens = section(residual.lens, key, model, ids, position)
following = f"p(actual next: {names(model, [lens.next_token])[0]})" if lens.next_token is not None else "p(actual next: —)"
st.dataframe(pd.DataFrame({
    "read at": ["the embeddings"] + [f"after block {b}" for b in range(cfg.n_layers)],
    "top tokens (probability)": [", ".join(f"{t} ({p:.2f})" for t, p in zip(names(model, top), probs))
                                 for top, probs in zip(lens.top, lens.top_probs)],
    following: [f"{p:.3f}" for p in lens.next_probs] if lens.next_token is not None else "—",
}), hide_index=True)
last = f"after block {cfg.n_layers - 1}" if cfg.n_layers else "the embeddings: there are no blocks"
st.markdown(check_line(f"The last row ({last}) read through {readout}, against the logits of a separate "
                       f"model(tokens) call at all {len(ids)} positions", lens.check))

st.subheader("Direct logit attribution")
left, right = st.columns(2)
with left:
    token = st.selectbox("token", lens.candidates, format_func=lambda t: names(model, [t])[0], key="dla_token",
                         bind="query-params")
with right:
    other = st.selectbox("against", [None] + lens.candidates, format_func=lambda t: "—" if t is None else names(model, [t])[0],
                         key="dla_other", bind="query-params")
dla = section(residual.attribution, key, model, ids, position, token, other)
title = f"Each term's direct share of the logit of '{names(model, [token])[0]}'"
title += f" minus that of '{names(model, [other])[0]}'" if other is not None else ""
st.plotly_chart(figures.component_bars(dla.shares, dla.labels, title, "logit (nats)", total=dla.logit))
st.markdown(check_line("The shares add up to the logit of a separate forward pass", dla.check) + ". "
            + ("Through LayerNorm each term is divided by the scale cached on this input; the scale depends on all "
               "terms together, so a share is a first-order reading, not what removing the term would do."
               if cfg.normalization == "LN" else "Without LayerNorm the read-out is linear, so the shares are exact."))

if cfg.n_layers:
    st.subheader("Do heads write to separate subspaces?")
    sub = section(residual.subspaces, key, model)
    room = (f"together the {len(sub.labels)} heads could write {sub.written} dimensions, "
            + (f"which fit in the {cfg.d_model}-dimensional stream, so they could all be orthogonal."
               if sub.room else f"more than the stream's {cfg.d_model}, so they cannot all be orthogonal."))
    st.markdown(f"Each head writes into a subspace of rank ≤ min(d_head, d_model) = {sub.k}; {room}")
    if not sub.pairs:
        st.markdown("This model has one head: there is no pair to compare.")
    elif sub.versus_random == "vacuous":
        st.markdown(f"Nothing to compare here: with d_head = {cfg.d_head} ≥ d_model = {cfg.d_model} each head can "
                    "write the whole stream, so every pair of heads overlaps completely (1), as every pair of random "
                    "subspaces would. The count of dimensions decides this, not the weights.")
    else:
        st.markdown(
            f"Mean overlap of the {sub.pairs} pairs of different heads: **{sub.mean:.3f}**, largest {sub.largest:.3f}. "
            f"Random {cfg.d_head}-dimensional subspaces overlap {sub.baseline:.3f} (d_head / d_model), and the mean of "
            f"{sub.pairs} random pairs stays within ± {sub.margin:.3f} ({OVERLAP_SIGMAS:.0f} standard deviations). "
            f"So these heads overlap **{sub.versus_random} random**"
            + {"below": ": they avoid each other's subspaces more than chance would.",
               "about": ": as far as this measure shows, their subspaces are placed as if at random.",
               "above": ": they share directions more than chance would."}[sub.versus_random])
        st.markdown(f"Separate subspaces (every pair's overlap ≤ {SEPARATE_MAX}): " + (
            f"impossible with these sizes: {len(sub.labels)} heads writing {sub.written} dimensions into "
            f"{cfg.d_model} overlap {sub.least:.3f} on average at the least, whatever their weights, so this says "
            "nothing about the model." if sub.separate == "impossible" else f"**{sub.separate}**."))
    st.plotly_chart(figures.overlap_heatmap(sub.overlap, sub.labels, sub.baseline))

with st.expander("Under the hood"):
    st.markdown("`mechlib.residual`: the ledger, its check against a separate forward pass, direct logit attribution.")
    st.code("\n".join(inspect.getsource(f) for f in (residual.ledger, residual.ledger_check,
                                                      residual.direct_logit_attribution)))
