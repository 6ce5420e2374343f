"""The LSTM analogy (seed 002): cell state ~ residual stream, input gate ~ patterns, output gate ~ messages,
computed on two models trained on the same data, and where the analogy breaks: the separating test, and controls
on the copying task (a two-layer model beside a one-layer model and an LSTM trained the same way)."""

import pandas as pd
import streamlit as st

from mechlib import analogy, checks, copying, figures
from mechlib.checks import LOSS_TIE, UNK_SHARE_MAX
from shell import check_line, slider

pair = st.cache_data(max_entries=1)(analogy.pair)
side_by_side = st.cache_data(max_entries=32, show_spinner="Running both models…")(analogy.side_by_side)
separating_test = st.cache_data(max_entries=16, show_spinner="Running the test…")(analogy.separating_test)
heldout = st.cache_data(max_entries=1, show_spinner="Reading the held-out text…")(analogy.heldout)
controls = st.cache_data(max_entries=16, show_spinner="Running the copying task's three models…")(copying.controls)


def ranking(ranked: analogy.Ranking, what: str, unit: str, losses: dict[str, float]) -> str:
    if ranked.tie:
        return f"{what} neither model predicts better: their losses are within {LOSS_TIE} {unit}."
    return (f"{what} the {ranked.better} predicts better: {losses[ranked.better]:.3f} against "
            f"{losses[ranked.worse]:.3f} {unit}, {ranked.margin:.2f} lower.")


sizes = pair()
st.title("The LSTM analogy")
st.markdown(
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
    "figure": ["[the cell and the stream](#cell-and-stream)", "[the input gate and the patterns](#gates-and-patterns)",
               "[the output gate and the messages](#gates-and-messages)"],
}).set_index("LSTM"))

kind = st.radio("tokens", ["repeated random sequence", "prompt"], key="l_input", bind="query-params", horizontal=True)
if kind == "prompt":
    prompt = analogy.prompt(st.text_input("prompt", "def f(x): return x + 1 ; def f(x): return x", key="l_prompt",
                                          bind="query-params"))
    if prompt.full_length > sizes.n_ctx:
        st.info(f"The prompt is {prompt.full_length} characters with <bos>, longer than the models' context of "
                f"{sizes.n_ctx}; only the first {sizes.n_ctx} are used.")
    if prompt.unknown_share > UNK_SHARE_MAX:
        st.warning(f"{prompt.unknown_share:.0%} of the prompt's characters are <unk>: the models never saw them.")
    ids = prompt.ids
else:
    ids = analogy.repeated_ids(slider("segment length", 4, sizes.max_segment, 12, key="l_seg"), st.session_state["seed"])
view = side_by_side(ids)

st.subheader("Memory carried forward: the cell state and the residual stream", anchor="cell-and-stream")
left, right = st.columns(2)
left.plotly_chart(figures.time_heatmap(view.cell, view.labels, "LSTM cell state c_t over time", "c"))
right.plotly_chart(figures.depth_heatmap(view.depth, view.labels))
st.subheader("What to take in: the input gate and the attention patterns", anchor="gates-and-patterns")
left, right = st.columns(2)
left.plotly_chart(figures.time_heatmap(view.input_gate, view.labels, "LSTM input gate i_t over time", "i", scale="gate"))
right.plotly_chart(figures.patterns_grid(view.patterns, f"{analogy.TRANSFORMER}'s attention patterns"))
st.subheader("What to emit: the output gate and the messages", anchor="gates-and-messages")
left, right = st.columns(2)
left.plotly_chart(figures.time_heatmap(view.output_gate, view.labels, "LSTM output gate o_t over time", "o", scale="gate"))
right.plotly_chart(figures.time_heatmap(view.messages, view.labels, "‖message‖ each last-layer head sends",
                                        "‖h(x)‖", scale="size", rows="head"))

st.subheader("The additive update in both")
left, right = st.columns(2)
left.plotly_chart(figures.histogram(view.forget, "Forget-gate values over every step and cell", "f"))
left.markdown(f"Median forget gate **{view.forget_median:.2f}**; {view.forget_open_share:.0%} of values above "
              f"{analogy.FORGET_OPEN}. At f = 1 the update would be pure addition, as in the residual stream.")
right.plotly_chart(figures.component_bars(view.step_shares, [f"{i}: {l}" for i, l in enumerate(view.labels)],
                                          "What each step left in the final cell, along ĉ_T", "length along ĉ_T",
                                          total=view.cell_norm, categories="time step: token"))
right.markdown(check_line("The steps' contributions (Π f) ⊙ i ⊙ g against the final cell state", view.cell_check))
right.markdown(check_line(f"{analogy.TRANSFORMER}'s components against its residual after the last block",
                          view.resid_check))
st.plotly_chart(figures.component_bars(view.component_shares, view.component_labels,
                                       f"What each component left in {analogy.TRANSFORMER}'s final residual "
                                       "(last position), along x̂_final", "length along x̂_final", total=view.resid_norm))

st.subheader("Where the analogy breaks")
st.table(pd.DataFrame({
    "LSTM": ["sequential: step t waits for step t − 1", "a forget gate f_t < 1 shrinks what the cell holds",
             "gates multiply element-wise, within one position", "a fixed-width memory (d_hidden numbers)"],
    "transformer": ["parallel over the whole sequence", "no gate multiplies the stream, but a layer can cancel a "
                    "direction by adding its negative", "attention moves information between positions",
                    "attention can reach any earlier token directly"],
}))
if view.cancelling:
    st.markdown(f"Here {len(view.cancelling)} of {len(view.component_labels)} components write against x̂_final "
                f"(the red bars above: {', '.join(view.cancelling)}), **{view.cancelled:.2f}** along it in all, "
                f"against a final length of {view.resid_norm:.2f}.")
else:
    st.markdown("Here no component writes against x̂_final: nothing was cancelled along it.")

st.subheader("The test that separates them")
length = slider("segment length for the test", 4, sizes.max_segment, sizes.test_segment, key="l_test")
test, text = separating_test(length, st.session_state["seed"]), heldout()
st.plotly_chart(figures.loss_curves(test.losses, test.labels, length + 1))
st.dataframe(pd.DataFrame([{"model": name, "first occurrence (nats)": round(test.first_repeat[name], 2),
                            "second occurrence (nats)": round(test.second_repeat[name], 2),
                            "held-out text (nats per character)": round(text.losses[name], 3)}
                           for name in test.losses]), hide_index=True)
st.markdown("Loss from the first occurrence to the second: " + ", ".join(
    f"{name} {test.first_repeat[name]:.2f} → {test.second_repeat[name]:.2f} nats ({-test.reduction[name]:+.0%})"
    for name in test.losses) + ". " + ranking(test.repeat, "On the second occurrence", "nats", test.second_repeat))
st.markdown("An induction head can look up each token's earlier copy; the LSTM would have to hold the whole random "
            "segment in its fixed-size state." if test.transformer_wins else
            "Here the transformer does not use the earlier copy to beat the LSTM on the repeat.")
st.markdown(ranking(text.text, "On ordinary held-out text", "nats per character", text.losses))

st.subheader("Controls on the copying task", anchor="controls")
c = controls(st.session_state["seed"])
st.markdown(
    "Three models trained here by one recipe, for the same number of steps, on the copying task (random ids, a "
    "segment copied once; the Train page's preset): two attention layers of one head (`copying-2l`, "
    f"{c.params['two layers']:,} parameters), one layer of the same width (`copying-1l`, {c.params['one layer']:,}) "
    f"and an LSTM of about the same size (`copying-lstm`, {c.params['LSTM']:,}). Below, their loss at each position "
    f"of a random segment of {c.length} ids and its copy. The recipe trains the loss on the copy only, so on the first "
    "copy, where nothing tells the next id, no model was trained to guess well.")
st.plotly_chart(figures.copy_losses({f"{role} ({c.params[role]:,} parameters)": values for role, values in c.losses.items()},
                                    c.length, c.d_vocab, c.earlier))
s2 = c.second_copy
st.markdown(f"On the second copy: two layers **{s2['two layers']:.2f}** nats, one layer **{s2['one layer']:.2f}**, "
            f"the LSTM **{s2['LSTM']:.2f}**. " + (
                f"Each control is at least {checks.GAP_MIN} nats worse than the model before it." if c.ordered else
                f"Here they do not rise by {checks.GAP_MIN} nats or more from two layers to one layer to the LSTM."))
st.markdown(f"The LSTM stays within {checks.NOTHING_MARGIN} nats of ln {c.d_vocab} = "
            f"{c.knows_nothing:.2f}, the loss of knowing nothing: it has not learned to keep {c.length} random ids in its fixed-size "
            "state." if c.lstm_knows_nothing else
            f"The LSTM is more than {checks.NOTHING_MARGIN} nats from ln {c.d_vocab} = "
            f"{c.knows_nothing:.2f}, the loss of knowing nothing.")
st.markdown(f"The one-layer model stays within {checks.EARLIER_MARGIN} nats of {c.earlier:.2f}, the loss of \"some "
            "earlier token comes next\" (every id seen so far equally likely): one layer can find where a token "
            "occurred, but reading what followed it takes a previous-token head composed with an induction head."
            if c.one_layer_earlier else
            f"The one-layer model is more than {checks.EARLIER_MARGIN} nats from {c.earlier:.2f}, the loss of \"some "
            "earlier token comes next\" (every id seen so far equally likely).")
