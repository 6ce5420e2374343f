"""The LSTM analogy (the reading “Mechanistic view of transformers: patterns, messages, residual stream… and LSTMs”):
cell state ~ residual stream, input gate ~ patterns, output gate ~ messages, computed on two models trained on the
same data, and where the analogy breaks: the separating test, and controls on the copying task (a two-layer model
beside a one-layer model and an LSTM trained the same way)."""

import numpy as np
import pandas as pd
import streamlit as st

from classroom import keys
from classroom.experiments import compute
from classroom.page.attention_text import attention_text
from classroom.page.layout import beside, figure, prose, show, table
from classroom.page.part import derived, record
from classroom.page.questions import predict
from classroom.page.slides import controls
from classroom.page.text import check_line, literal
from classroom.page.widgets import slider
from mechlib import analogy, checks, copying, figures
from mechlib.checks import LOSS_TIE, UNK_SHARE_MAX


def ranking(ranked: analogy.Ranking, what: str, unit: str, losses: dict[str, float]) -> str:
    if ranked.tie:
        return f"{what} neither model predicts better: their losses are within {LOSS_TIE} {unit}."
    return (f"{what} the {ranked.better} predicts better: {losses[ranked.better]:.3f} against "
            f"{losses[ranked.worse]:.3f} {unit}, {ranked.margin:.2f} lower.")


sizes = compute(analogy.pair)
seed = st.session_state[keys.SEED]
st.title("The LSTM analogy")
prose(
    "An LSTM and a transformer both carry a state forward and update it by **adding**. The LSTM's cell state is "
    "its long-term memory, passed from step to step; the transformer's residual stream is passed from layer to "
    "layer. Both models below were trained here on the same data (text with repeated spans and repeated random "
    f"characters): the LSTM `{analogy.RNN}` with {sizes.rnn_params:,} parameters and `{analogy.TRANSFORMER}` with "
    f"{sizes.transformer_params:,}."
)
st.latex(r"\text{LSTM: } c_t = f_t \odot c_{t-1} + i_t \odot g_t,\ \ h_t = o_t \odot \tanh(c_t)"
         r"\qquad \text{transformer: } x_{\ell+1} = x_\ell + \textstyle\sum_h h_\ell(x_\ell)")

st.table(pd.DataFrame({
    "LSTM": ["cell state c_t", "input gate i_t", "output gate o_t"],
    "transformer": ["residual stream x_ℓ", "attention patterns A", "messages x_j W_OV"],
    "what both do": ["carry memory forward; every update is added", "decide what is relevant to take in now",
                     "decide what is emitted, and how strongly"],
}).set_index("LSTM"))

with controls():
    kind = st.radio("tokens", ["repeated random sequence", "prompt"], index=0, key="l_input", bind="query-params",
                    horizontal=True)
    if kind == "prompt":
        text = st.text_input("prompt", "def f(x): return x + 1 ; def f(x): return x", key="l_prompt", bind="query-params")
        prompt = analogy.prompt(text)
        if prompt.full_length > sizes.n_ctx:
            st.info(f"The prompt is {prompt.full_length} characters with <bos>, longer than the models' context of "
                    f"{sizes.n_ctx}; only the first {sizes.n_ctx} are used.")
        if prompt.unknown_share > UNK_SHARE_MAX:
            st.warning(f"{prompt.unknown_share:.0%} of the prompt's characters are <unk>: the models never saw them.")
        ids = prompt.ids
    else:
        segment = slider("segment length", 4, sizes.max_segment, 12, key="l_seg")
        ids = analogy.repeated_ids(segment, seed)
view = compute(analogy.side_by_side, ids)


def cell_and_stream() -> None:
    left, right = beside(2)
    with left:
        figure("cell state", figures.time_heatmap, view.cell, view.labels, "LSTM cell state c_t over time", "c")
    with right:
        figure("residual stream through depth", figures.depth_heatmap, view.depth, view.labels)


def gates_and_patterns() -> None:
    left, right = beside(2)
    with left:
        figure("input gate", figures.time_heatmap, view.input_gate, view.labels, "LSTM input gate i_t over time", "i",
               scale="gate")
    with right:
        title = f"{analogy.TRANSFORMER}'s attention patterns"
        figure("attention patterns", figures.patterns_grid, view.patterns, title)
    attention_text(f"{analogy.TRANSFORMER}'s patterns on the text: point at (or tap) a character to shade what each "
                   "head reads from there.", view.patterns, view.labels, None, len(view.labels) - 1,
                   key="hover lstm page")


def gates_and_messages() -> None:
    left, right = beside(2)
    with left:
        figure("output gate", figures.time_heatmap, view.output_gate, view.labels, "LSTM output gate o_t over time",
               "o", scale="gate")
    with right:
        figure("message sizes", figures.time_heatmap, view.messages, view.labels,
               "‖message‖ each last-layer head sends", "‖h(x)‖", scale="size", rows="head")


def additive_update() -> None:
    largest = int(np.argmax(view.step_shares))
    if not predict("largest step", f"Of the {len(view.labels)} steps, which one left the most in the LSTM's final "
                   "cell state, measured along ĉ_T?", list(analogy.STEPS_BACK), [analogy.largest_step(view.step_shares)],
                   f"Step {largest} ('{literal(view.labels[largest])}') of {len(view.labels)}, with "
                   f"{view.step_shares[largest]:.3f} of the final length {view.cell_norm:.3f}. Each later forget gate "
                   f"multiplies what a step wrote, and their median here is {view.forget_median:.2f}. Other tokens "
                   "can answer differently."):
        return
    left, right = beside(2)
    with left:
        figure("forget gates", figures.histogram, view.forget, "Forget-gate values over every step and cell", "f")
        st.markdown(f"Median forget gate **{view.forget_median:.2f}**; {view.forget_open_share:.0%} of values above "
                    f"{analogy.FORGET_OPEN}.")
        record("median forget gate", f"{view.forget_median:.2f}")
        prose("At f = 1 the update would be pure addition, as in the residual stream.")
    with right:
        figure("steps in the final cell", figures.component_bars, view.step_shares,
               [f"{i}: {l}" for i, l in enumerate(view.labels)], "What each step left in the final cell, along ĉ_T",
               "length along ĉ_T", total=view.cell_norm, categories="time step: token")
        st.markdown(check_line("The steps' contributions (Π f) ⊙ i ⊙ g against the final cell state", view.cell_check))
        st.markdown(check_line(f"{analogy.TRANSFORMER}'s components against its residual after the last block",
                               view.resid_check))
    title = (f"What each component left in {analogy.TRANSFORMER}'s final residual (last position), along x̂_final")
    figure("components in the final residual", figures.component_bars, view.component_shares, view.component_labels,
           title, "length along x̂_final", total=view.resid_norm)


def analogy_breaks() -> None:
    table(pd.DataFrame({
        "LSTM": ["sequential: step t waits for step t − 1", "a forget gate f_t < 1 shrinks what the cell holds",
                 "gates multiply element-wise, within one position", "a fixed-width memory (d_hidden numbers)"],
        "transformer": ["parallel over the whole sequence", "no gate multiplies the stream, but a layer can cancel a "
                        "direction by adding its negative", "attention moves information between positions",
                        "attention can reach any earlier token directly"],
    }), "where the analogy breaks", static=True)
    record("components writing against x̂_final", str(len(view.cancelling)))
    if not predict("cancelling", f"How many of the {len(view.component_labels)} components of {analogy.TRANSFORMER}'s "
                   "final residual (last position) write against its direction x̂_final, cancelling part of what the "
                   "others wrote?", [name for _, name in analogy.CANCEL_BANDS],
                   [analogy.band(len(view.cancelling), analogy.CANCEL_BANDS)],
                   f"{len(view.cancelling)}: " + (f"{', '.join(view.cancelling)}, {view.cancelled:.2f} along x̂_final "
                                                  "in all." if view.cancelling else "every component adds along x̂_final.")
                   + " Other tokens can answer differently."):
        return
    if view.cancelling:
        st.markdown(f"Here {len(view.cancelling)} of {len(view.component_labels)} components write against "
                    f"x̂_final (the red bars of the additive update's last chart: {', '.join(view.cancelling)}), "
                    f"**{view.cancelled:.2f}** along it in all, against a final length of {view.resid_norm:.2f}.")
    else:
        st.markdown("Here no component writes against x̂_final: nothing was cancelled along it.")


def separating() -> None:
    length = slider("segment length for the test", 4, sizes.max_segment, sizes.test_segment, key="l_test")
    test, text = compute(analogy.separating_test, length, seed), compute(analogy.heldout)
    name = analogy.NAMES[analogy.TRANSFORMER]
    shed = test.reduction[name]
    if not predict("shed", f"With segments of {length} random characters, how much of {name}'s loss on the first occurrence "
            "is gone on the second?", [band for _, band in analogy.SHED_BANDS], [analogy.band(shed, analogy.SHED_BANDS)],
            f"{test.first_repeat[name]:.2f} → {test.second_repeat[name]:.2f} nats: {shed:.0%} gone (the LSTM: "
            f"{test.reduction[analogy.NAMES[analogy.RNN]]:.0%}). Another segment length can answer differently."):
        return
    figure("loss by position", figures.loss_curves, test.losses, test.labels, length + 1)
    table(pd.DataFrame([{"model": name, "first occurrence (nats)": round(test.first_repeat[name], 2),
                         "second occurrence (nats)": round(test.second_repeat[name], 2),
                         "held-out text (nats per character)": round(text.losses[name], 3)}
                        for name in test.losses]), "losses")
    st.markdown("Loss from the first occurrence to the second: " + ", ".join(
        f"{name} {test.first_repeat[name]:.2f} → {test.second_repeat[name]:.2f} nats ({-test.reduction[name]:+.0%})"
        for name in test.losses) + ". " + ranking(test.repeat, "On the second occurrence", "nats", test.second_repeat)
        + "\n\n" + ranking(text.text, "On ordinary held-out text", "nats per character", text.losses))
    prose("An induction head can look up each token's earlier copy; the LSTM would have to hold the whole random "
          "segment in its fixed-size state." if test.transformer_wins else
          "Here the transformer does not use the earlier copy to beat the LSTM on the repeat.")


def copying_controls() -> None:
    c = compute(copying.controls, seed)
    prose(
        "Three models trained here by one recipe, for the same number of steps, on the copying task (random ids, a "
        "segment copied once; the Train page's preset): two attention layers of one head (`copying-2l`, "
        f"{c.params['two layers']:,} parameters), one layer of the same width (`copying-1l`, {c.params['one layer']:,}) "
        f"and an LSTM of about the same size (`copying-lstm`, {c.params['LSTM']:,}). Below, their loss at each position "
        f"of a random segment of {c.length} ids and its copy. The recipe trains the loss on the copy only, so on the "
        "first copy, where nothing tells the next id, no model was trained to guess well.")
    s2 = c.second_copy
    for role, value in s2.items():
        record(f"second-copy loss, {role} (nats)", f"{value:.2f}")
    lowest = min(s2, key=s2.get)
    if not predict("controls", "On the second copy, which of the three models has the lowest loss?", list(s2), [lowest],
            "; ".join(f"{role}: {value:.2f} nats" for role, value in s2.items()) + "."):
        return
    figure("copying task losses", figures.copy_losses, derived(copying.losses_by_label, c), c.length, c.d_vocab,
           c.earlier)
    ordered = (f"On the second copy: two layers **{s2['two layers']:.2f}** nats, one layer **{s2['one layer']:.2f}**, "
               f"the LSTM **{s2['LSTM']:.2f}**. " + (
                   f"Each control is at least {checks.GAP_MIN} nats worse than the model before it." if c.ordered else
                   f"Here they do not rise by {checks.GAP_MIN} nats or more from two layers to one layer to the LSTM."))
    rnn = (f"The LSTM stays within {checks.NOTHING_MARGIN} nats of ln {c.d_vocab} = {c.knows_nothing:.2f}, the "
           f"loss of knowing nothing: it has not learned to keep {c.length} random ids in its fixed-size state."
           if c.lstm_knows_nothing else
           f"The LSTM is more than {checks.NOTHING_MARGIN} nats from ln {c.d_vocab} = "
           f"{c.knows_nothing:.2f}, the loss of knowing nothing.")
    one_layer = (f"The one-layer model {'stays within' if c.one_layer_earlier else 'is more than'} "
                 f"{checks.EARLIER_MARGIN} nats {'of' if c.one_layer_earlier else 'from'} {c.earlier:.2f}, the loss of "
                 "\"some earlier token comes next\" (every id seen so far equally likely).")
    st.markdown("\n\n".join([ordered, rnn, one_layer]))  # one text: a slide spaces its lines, not three elements
    if c.one_layer_earlier:
        prose("One layer can find where a token occurred, but reading what followed it takes a previous-token head "
              "composed with an induction head.")


show([("Memory carried forward: the cell state and the residual stream", cell_and_stream),
      ("What to take in: the input gate and the attention patterns", gates_and_patterns),
      ("What to emit: the output gate and the messages", gates_and_messages),
      ("The additive update in both", additive_update),
      ("Where the analogy breaks", analogy_breaks),
      ("The test that separates them", separating),
      ("Controls on the copying task", copying_controls)])
