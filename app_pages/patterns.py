"""Patterns and messages: attention = (QKᵀ)(VO). W_QK decides where to look, W_OV what moves (the reading “Mechanistic
view of transformers: patterns, messages, residual stream… and LSTMs”)."""

import numpy as np
import pandas as pd
import streamlit as st

from classroom import keys
from classroom.experiments import compute
from classroom.page.attention_text import attention_text
from classroom.page.layout import beside, figure, metric, prose, show, source, table
from classroom.page.part import record
from classroom.page.questions import predict
from classroom.page.slides import controls
from classroom.page.text import check_line, literal
from classroom.page.widgets import slider
from classroom.session import current_model, input_tokens
from mechlib import circuits, data, figures, patterns
from mechlib.checks import EFFECTIVE_SHARE, RANK_ZERO

st.title("Patterns and messages")
prose(
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
with controls():
    left, right = st.columns(2)
    with left:
        layer = slider("layer", 0, cfg.n_layers - 1, cfg.n_layers - 1, key="layer")
        head = slider("head", 0, cfg.n_heads - 1, 0, key="head")
    with right:
        ids, labels = input_tokens(model)
    dest = slider("destination position for the messages", 0, len(ids) - 1, len(ids) - 1, key="dest")


def regrouping() -> None:
    reg = compute(patterns.regrouping, model, ids, layer, head, key=key)
    st.markdown(check_line(f"A (V W_O) of each of layer {layer}'s {cfg.n_heads} heads against the per-head results the "
                           "model computed as ((A V) W_O) in its own forward pass", reg.check))
    prose(f"n = {len(ids)} positions, d_head = {cfg.d_head}, d_model = {cfg.d_model}. Matrix products associate, so "
          "the two groupings give the same numbers; only the cost differs.")
    (first, first_macs), (second, second_macs) = reg.macs.items()
    cheaper = "the same" if first_macs == second_macs else f"{first if first_macs < second_macs else second} needs fewer"
    if not predict("regrouping", f"For these {len(ids)} positions, which grouping needs fewer multiply-adds?",
                   [f"{first} needs fewer", "the same", f"{second} needs fewer"], [cheaper],
                   f"{first}: {first_macs:,}; {second}: {second_macs:,}. Their difference is n²(d_head − d_model) = "
                   f"{len(ids)}² × ({cfg.d_head} − {cfg.d_model}) = {first_macs - second_macs:,}: the prompt's length "
                   "scales it, but its sign is the model's, so a model with one head (d_head = d_model) answers "
                   "differently."):
        return
    for col, (name, macs) in zip(st.columns(2), reg.macs.items()):
        metric(col, f"{name}: multiply-adds", f"{macs:,}", help=f"For this sequence, head {head}.")
        col.caption(f"measured {reg.time_ms[name]:.3f} ms (median of 5)")


def rank() -> None:
    ranks = compute(patterns.ranks, model, layer, head, key=key)
    for name, value in ranks.ranks.items():
        record(f"rank of {name}", str(value))
    ov = next(name for name in ranks.ranks if "W_O" in name)
    used, bins = patterns.effective_rank(ranks.spectra[ov]), patterns.effective_rank_bins(cfg.d_head, cfg.d_model)
    options = [f"{first}" if first == last else f"{first} to {last}" for first, last in bins]
    energy = ranks.spectra[ov] ** 2
    if not predict("rank", f"W_OV = W_V W_O of layer {layer}, head {head} is a {cfg.d_model} × {cfg.d_model} matrix "
                   f"and d_head = {cfg.d_head}. How many directions does the head really use: the fewest singular "
                   f"values of W_OV that hold {EFFECTIVE_SHARE:.0%} of ‖W_OV‖_F²?", options,
                   [options[patterns.bin_of(bins, used)]],
                   f"{used} singular values hold {energy[:used].sum() / energy.sum():.1%} of ‖W_OV‖_F² (its rank, "
                   f"counted above {RANK_ZERO:.0e} × σ₁, is {ranks.ranks[ov]}). No count past d_head = {cfg.d_head} "
                   "is possible: the head writes through d_head dimensions. How many of those it uses is the "
                   "model's own; another head or model answers differently."):
        return
    left, right = beside([3, 2])
    with left:
        figure("singular values", figures.singular_values, ranks.spectra, cfg.d_head)
    with right:
        if ranks.vacuous:
            st.markdown(f"Here d_head = {cfg.d_head} ≥ d_model = {cfg.d_model}: a d_model × d_model matrix has only "
                        f"{cfg.d_model} singular values, none past d_head, so rank ≤ d_head holds for any matrix and "
                        "says nothing about this head. " + "; ".join(f"**{name}**: rank {ranks.ranks[name]}"
                                                                    for name in ranks.spectra) + ".")
        else:
            st.markdown("This is linear algebra, not a finding about the model: W_Q W_Kᵀ (the reading's W_p) and "
                        "W_V W_O each pass through d_head dimensions, so neither can have a rank above d_head. The "
                        "spectra show the cut:\n"
                        + "\n".join(f"- **{name}**: σ₁ = {values[0]:.3g}, σ_{cfg.d_head} = {values[cfg.d_head - 1]:.3g}, "
                                    f"the largest past d_head {ranks.beyond[name]:.1e} × σ₁ (numerically zero below "
                                    f"{RANK_ZERO:.0e}): rank {ranks.ranks[name]}"
                                    for name, values in ranks.spectra.items()))


def only_products() -> None:
    nonu = compute(patterns.non_uniqueness, model, ids, layer, head, st.session_state[keys.SEED], key=key)
    st.markdown("With a random invertible R (d_head × d_head, from the sidebar's seed), in float64:\n"
                f"- {check_line('The pattern after W_Q R, W_K R⁻ᵀ against the pattern', nonu.pattern)}\n"
                f"- {check_line('The messages after W_V R, R⁻¹ W_O against the messages', nonu.messages)}")


def pattern_matching() -> None:
    scores = compute(patterns.scores, model, ids, layer, head, key=key)
    st.markdown(check_line("Scores recomputed as x_i W_QK x_jᵀ / √d_head (with the query and key biases) against "
                           "the model's cached scores", scores.check))
    prose("Rows are queries (destinations), columns keys (sources); above the diagonal a position would look ahead, "
          "so those scores are masked and their weights are 0. Softmax turns each row of scores into a row of weights.")
    if cfg.positional == "shortformer":
        prose("Shortformer: the positional embedding is added to the queries' and keys' input only, so it shapes "
              "the pattern but never travels in the messages.")
    looked = patterns.where_looked(scores.pattern, dest)
    if not predict("pattern", f"Where does position {dest} ('{literal(labels[dest])}') put the most attention in "
                   f"layer {layer}, head {head}?", list(patterns.LOOKS), [looked],
                   f"Its largest weight, {scores.pattern[dest].max():.2f}, is on position "
                   f"{int(scores.pattern[dest].argmax())} ('{literal(labels[int(scores.pattern[dest].argmax())])}'). "
                   "Another head, layer or prompt can answer differently."):
        return
    left, right = beside(2)
    with left:
        title = f"Layer {layer}, head {head}: the pattern A"
        figure("pattern", figures.pattern_heatmap, scores.pattern, labels, title)
    with right:
        figure("scores", figures.pattern_heatmap, scores.scores, labels, "Scores x_i W_QK x_jᵀ / √d_head",
               scores=True)
    attention_text(f"The same patterns on the text, every head of layer {layer}: point at a token (or tap it) to "
                   "shade the tokens it attends to by their weight.", scores.layer_patterns[None], labels,
                   circuits.head_label(layer, head), dest, key="hover", first_layer=layer)


def message_passing() -> None:
    st.markdown(f"Into position **{dest}** ('{literal(labels[dest])}'), layer {layer}, head {head}: each earlier "
                "position's message, weighted by the attention it gets.")
    msgs = compute(patterns.messages, model, ids, layer, head, dest, key=key)
    frame = pd.DataFrame({"source": [f"{j}: {labels[j]}" for j in range(dest + 1)],
                          "attention weight": np.round(msgs.weights, 4), "‖message‖": np.round(msgs.norms, 3),
                          "tokens it pushes most (via W_U)": [", ".join(data.token_labels(model.tokenizer, t))
                                                              for t in msgs.top_tokens]})
    left, right = beside(2)
    with left:
        figure("attention from the destination", figures.source_bars, msgs.weights, labels[: dest + 1],
               f"Attention from position {dest}", "attention weight")
    with right:
        table(frame, "messages", height=360)
    st.markdown(check_line(f"Σ_j A[{dest}, j] · message_j against the head's output the model cached at position {dest}",
                           msgs.check))


show([("Regrouping: ((QKᵀ)V)O = (QKᵀ)(VO)", regrouping),
      ("Two d_model × d_model matrices per head, each of rank ≤ d_head", rank),
      ("Only the products matter", only_products),
      ("Pattern matching: where each position looks", pattern_matching),
      ("Messages into one position", message_passing)])

with st.expander("Under the hood"):
    st.markdown("`mechlib.patterns`: the checks on this page.")
    st.code(source(patterns.regrouping, patterns.messages))
