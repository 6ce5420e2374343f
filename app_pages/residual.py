"""The residual stream: every component reads from it and adds to it (the reading “Mechanistic view of transformers:
patterns, messages, residual stream… and LSTMs”; Elhage et al. 2021)."""

import numpy as np
import pandas as pd
import streamlit as st

from classroom.experiments import compute
from classroom.page.layout import beside, figure, prose, show, source, table
from classroom.page.part import record
from classroom.page.questions import exercise, predict
from classroom.page.slides import controls
from classroom.page.text import check_line, literal
from classroom.page.widgets import selectbox, slider
from classroom.session import current_model, input_tokens
from mechlib import data, figures, residual
from mechlib.checks import OVERLAP_SIGMAS, SEPARATE_MAX


def names(model, tokens) -> list[str]:
    return data.token_labels(model.tokenizer, tokens)


LEDGER_TITLE = "Each term along x̂_final: they add up to ‖x_final‖"

st.title("The residual stream")
prose(
    "Every head and every MLP reads the residual stream and **adds** its output back; nothing is written any other "
    "way. So the last residual is an exact sum of everything that was written, and each term can be read on its own: "
    "through the unembedding at any depth (the logit lens), or as its direct share of one logit (direct logit "
    "attribution). Adding is not keeping: a later term can point against an earlier one and cancel it."
)
st.latex(r"x_{\text{final}} = W_E[t] + W_{pos}[p] + \sum_{\ell}\Big(\sum_h h_{\ell,h}(x) + b_O^{\ell}\Big)"
         r" + \sum_\ell \big(\mathrm{MLP}_\ell(x) + b_{out}^{\ell}\big)")

key, model = current_model()
cfg = model.cfg
readout = "the final LayerNorm and W_U" if cfg.normalization == "LN" else "W_U (this model has no final LayerNorm)"
with controls():
    left, right = st.columns(2)
    with left:
        ids, labels = input_tokens(model)
    with right:
        position = slider("position", 0, len(ids) - 1, max(0, len(ids) - 2), key="rpos")
boundary_names = ["the embeddings"] + [f"after block {b}" for b in range(cfg.n_layers)]


def the_ledger() -> None:
    st.markdown(f"At position **{position}** ('{literal(labels[position])}'):")
    book = compute(residual.ledger_at, model, ids, position, key=key)
    terms = f"The sum of the {len(book.labels)} terms" if len(book.labels) > 1 else "The only term"
    lines = [check_line(f"{terms} read through {readout}, against the logits of a separate forward pass at all "
                        f"{len(ids)} positions", book.check.logits)]
    if book.check.residual is not None:
        lines.append(check_line("The sum against that pass's residual after its last block", book.check.residual))
    else:
        lines.append("With no blocks the residual is the embedding itself, so only the logits are an independent "
                     "reference.")
    st.markdown("\n\n".join(lines))
    record(f"‖x_final‖ at position {position}", f"{book.final_norm:.4f}")
    if cfg.positional == "shortformer":
        prose("Shortformer positions enter the queries and keys only, never the stream: no pos_embed term.")
    if len(kinds := residual.kinds_of(book.labels)) > 1:
        largest, longest = book.largest, book.labels[int(np.argmax(book.norms))]
        projection, norm = book.projections[book.labels.index(largest)], book.norms[book.labels.index(longest)]
        if not predict("ledger", f"Which kind of term adds the most to the final residual's norm at position "
                       f"{position} ('{literal(labels[position])}')?", kinds, [residual.term_kind(largest)],
                       f"{largest} lies {projection:.3f} along x̂_final, of ‖x_final‖ = {book.final_norm:.3f}. "
                       + ("It is also the term with the largest norm." if longest == largest else
                          f"By its own norm the largest term is {longest} ({norm:.3f}): a long term can still point "
                          "away from the final residual.") + " Another position, prompt or model can answer differently."):
            return
    left, right = beside(2)
    with left:
        figure("ledger", figures.component_bars, book.projections, book.labels, LEDGER_TITLE, "length along x̂_final",
               total=book.final_norm)
    with right:
        table(pd.DataFrame({"term": book.labels, "‖term‖": np.round(book.norms, 3),
                            "along x̂_final": np.round(book.projections, 3)}), "ledger", height="content")


def through_depth() -> None:
    stream = compute(residual.depth, model, ids, key=key)
    if len(stream.components) > 1 and not predict(
            "depth", f"Averaged over these {len(ids)} positions, which component writes the most into the stream?",
            stream.components, [stream.largest],
            "Mean ‖output‖: " + ", ".join(f"{name} {added:.3f}" for name, added in zip(stream.components, stream.added))
            + ". A larger write need not matter more for the prediction: the ledger and the attributions show "
              "where it points."):
        return
    left, right = beside([3, 2])
    with left:
        figure("stream through depth", figures.depth_heatmap, stream.norms, labels)
    with right:
        if stream.components:
            table(pd.DataFrame({"component": stream.components,
                                "mean ‖output‖ over positions": np.round(stream.added, 3)}),
                  "what each component adds")


def logit_lens() -> None:
    lens = compute(residual.lens, model, ids, position, key=key)
    last = f"after block {cfg.n_layers - 1}" if cfg.n_layers else "the embeddings: there are no blocks"
    st.markdown(check_line(f"The last row ({last}) read through {readout}, against the logits of a separate "
                           f"model(tokens) call at all {len(ids)} positions", lens.check))
    prose("The logit lens reads the stream after each block as if the later blocks were not there: the same read-out, "
          "applied early.")
    if cfg.n_layers:
        top = names(model, [lens.top[-1][0]])[0]
        options = boundary_names[:-1] + ["only at the end"]
        if not predict("lens", f"At which layer does the logit lens first put the model's final top token at position "
                       f"{position}, '{literal(top)}', at rank 1?", options, [options[lens.first_top]],
                       "Its rank read at each boundary: " + ", ".join(f"{name} {rank}" for name, rank in
                                                                        zip(boundary_names, lens.final_ranks)) + "."):
            return
    following = (f"p(actual next: {names(model, [lens.next_token])[0]})" if lens.next_token is not None
                 else "p(actual next: —)")
    table(pd.DataFrame({
        "read at": boundary_names,
        "top tokens (probability)": [", ".join(f"{t} ({p:.2f})" for t, p in zip(names(model, top), probs))
                                     for top, probs in zip(lens.top, lens.top_probs)],
        following: [f"{p:.3f}" for p in lens.next_probs] if lens.next_token is not None else "—",
    }), "logit lens")


def attribution() -> None:
    left, right = st.columns(2)
    candidates = compute(residual.lens, model, ids, position, key=key).candidates
    with left:
        token = selectbox("token", candidates, "dla_token", lambda t: names(model, [t])[0])
    with right:
        other = selectbox("against", [None] + candidates, "dla_other",
                          lambda t: "—" if t is None else names(model, [t])[0])
    dla = compute(residual.attribution, model, ids, position, token, other, key=key)
    what = f"the logit of '{names(model, [token])[0]}'"
    what += f" minus that of '{names(model, [other])[0]}'" if other is not None else ""
    st.markdown(check_line("The shares add up to the logit of a separate forward pass", dla.check))
    record(what, f"{dla.logit:.4f}")
    prose("Through LayerNorm each term is divided by the scale cached on this input; the scale depends on all terms "
          "together, so a share in direct logit attribution is a first-order reading, not what removing the term "
          "would do." if cfg.normalization == "LN" else
          "Without LayerNorm the read-out is linear, so the shares in direct logit attribution are exact.")
    share = dict(zip(dla.labels, dla.shares))
    lowest = dla.labels[int(np.argmin(dla.shares))]
    shown = predict("dla", f"Which kind of component pushes {literal(what)} up the most?", residual.kinds_of(dla.labels),
                    [residual.term_kind(dla.largest)],
                    f"{dla.largest} adds {share[dla.largest]:+.3f} nats of the total {dla.logit:.3f}; {lowest} pushes "
                    f"hardest the other way ({share[lowest]:+.3f}). Another token, position or model can answer "
                    "differently.")
    if dla.top_heads:
        heads = [label for label in dla.labels if residual.term_kind(label) == "a head"]
        ranked = sorted(heads, key=lambda head: -share[head])
        shown &= exercise("dla head", f"Find the head with the largest direct effect on {literal(what)}: the one whose "
                          "own share raises it the most.", heads, dla.top_heads,
                          f"Its direct share is {share[ranked[0]]:+.3f} nats"
                          + (f"; the next head, {ranked[1]}, adds {share[ranked[1]]:+.3f}" if len(ranked) > 1 else "")
                          + ". A direct share leaves out what later layers do with the head's output.")
    if shown:
        title = f"Each term's direct share of {what}"
        figure("direct logit attribution", figures.component_bars, dla.shares, dla.labels, title, "logit (nats)",
               total=dla.logit)


def subspaces() -> None:
    sub = compute(residual.subspaces, model, key=key)
    room = (f"together the {len(sub.labels)} heads could write {sub.written} dimensions, "
            + (f"which fit in the {cfg.d_model}-dimensional stream, so they could all be orthogonal."
               if sub.room else f"more than the stream's {cfg.d_model}, so they cannot all be orthogonal."))
    prose(f"Each head writes into a subspace of rank ≤ min(d_head, d_model) = {sub.k}; {room}")
    if sub.versus_random in ("below", "about", "above") and not predict(
            "subspaces", f"Do these {len(sub.labels)} heads' output subspaces overlap less than, about as much as, or "
            f"more than random {sub.k}-dimensional subspaces would?", ["below random", "about random", "above random"],
            [f"{sub.versus_random} random"], f"Mean overlap {sub.mean:.3f} against {sub.baseline:.3f} ± {sub.margin:.3f} "
            f"for {sub.pairs} random pairs. Another model can answer differently."):
        return
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
    figure("head subspace overlaps", figures.overlap_heatmap, sub.overlap, sub.labels, sub.baseline)


show([("The ledger at one position", the_ledger),
      ("The stream through depth", through_depth),
      ("Logit lens", logit_lens),
      ("Direct logit attribution", attribution)]
     + ([("Do heads write to separate subspaces?", subspaces)] if cfg.n_layers else []))

with st.expander("Under the hood"):
    st.markdown("`mechlib.residual`: the ledger, its check against a separate forward pass, direct logit attribution.")
    st.code(source(residual.ledger, residual.ledger_check, residual.direct_logit_attribution))
