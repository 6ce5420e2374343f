"""Circuits, one layer (Elhage et al. 2021): a head's QK and OV circuits, skip-trigrams, copying, path expansion."""

import pandas as pd
import streamlit as st

from classroom import keys
from classroom.experiments import compute
from classroom.page.layout import beside, figure, prose, show, table
from classroom.page.part import record
from classroom.page.questions import predict
from classroom.page.slides import controls
from classroom.page.text import check_line
from classroom.page.widgets import slider
from classroom.session import part_model
from mechlib import circuits, data, figures

PATH_TOKENS = 8  # random ids the path expansion reads when a model has no tokenizer

st.title("Circuits: one layer")
prose("One layer of attention heads adds skip-trigrams: a destination token attends to an earlier source token "
      "(QK) and raises the logits of what the source says (OV). This page reads both circuits from the weights.")
seed = st.session_state[keys.SEED]

key, model, name = part_model("attn-only-1l", lambda m: m.cfg.n_layers >= 1 and m.cfg.d_vocab > 2,
                              "it needs at least one layer, and a token besides <bos> and <unk>")
with controls():
    head = slider("head", 0, model.cfg.n_heads - 1, 0, key="c_head")
    words = model.tokenizer is not None and st.toggle(  # on by default in either mode: a link shows the same tables
        "words only", True, key="c_words", bind="query-params",
        help="The tables' tokens: the most frequent words (letters only), or every frequent token, punctuation too.")
    if model.tokenizer:
        prompt = st.text_input("prompt for the path expansion", "the class of an object is its type . the class of",
                               key="c_prompt", bind="query-params")
        ids = data.prompt_ids(model.tokenizer, prompt, model.cfg.n_ctx).ids
    else:
        ids = data.random_ids(model.cfg.d_vocab, min(PATH_TOKENS, model.cfg.n_ctx), seed)
head_name = circuits.head_label(0, head)


def qk_and_ov() -> None:
    o = compute(circuits.token_tables, model, 0, head, words, key=key)
    if model.cfg.n_layers > 1:
        prose("Layer 0's heads are read; with more layers, later ones also act on them, so the one-layer reading "
              "is the direct part only.")
    prose("Two circuits per head, each a token × token table read from the weights alone. QK: W_E W_QK W_Eᵀ, with "
          "W_QK = W_Q W_Kᵀ (the reading's W_p, the pattern weight matrix), scores how much a destination token "
          "attends to a source token. OV: W_E W_OV W_U says which output logits a source token raises when "
          "attended to.")
    st.markdown(f"The {len(o.labels)} {'words' if words else 'tokens'} of the {o.candidates} most frequent that "
                f"{head_name} copies most readily: attending to each raises its own logit among the top "
                f"**{max(o.copy_ranks) + 1}** of all {model.cfg.d_vocab:,} tokens. A head that does not copy would "
                f"reach only about the top **{o.chance_rank:.0f}** with its best {len(o.labels)}.")
    record("copy rank of the tables' tokens", f"top {max(o.copy_ranks) + 1}, chance about {o.chance_rank:.0f}")
    left, right = beside(2)
    for col, (field, title, x, y, value) in zip((left, right), [
            ("qk", f"QK circuit of {head_name}: W_E W_QK W_Eᵀ (W_QK = W_p)", "source token", "destination token",
             "score"),
            ("ov", f"OV circuit of {head_name}: W_E W_OV W_U", "output token (logit raised)",
             "source token (attended to)", "logit")]):
        with col:
            figure(f"{field} circuit of {head_name}", figures.token_heatmap, getattr(o, field), o.labels, o.labels,
                   title, x, y, value)


def trigrams() -> None:
    o = compute(circuits.token_tables, model, 0, head, words, key=key)
    prose("Each row is a skip-trigram read off the two circuits: the destination attends to the source (QK), and "
          "attending to the source raises the output (OV), whatever lies between them.")
    table(pd.DataFrame([{"skip-trigram": f"{s} … {d} → {out}", "QK score": round(q, 2), "OV logit": round(v, 2)}
                        for s, d, out, q, v in o.trigrams]), f"skip-trigrams of {head_name}")


def copying() -> None:
    o = compute(circuits.one_layer, model, ids, key=key)
    prose("A head copies when attending to a token raises that same token's logit: its OV circuit W_E W_OV W_U "
          "then has eigenvalues with a positive real part. The copying score, Σ Re λ / Σ |λ|, is 1 for a pure "
          "copier and −1 for its opposite.")
    values = o.eigenvalues[head_name]
    copies = bool(o.copying[head] > o.copying_bar)
    if not predict(f"copying {head_name}", f"Is {head_name} copying (its copying score above what a random head "
                   "reaches)?", ["yes", "no"], ["yes" if copies else "no"],
            f"{int((values.real > 0).sum())} of its {len(values)} OV eigenvalues have a positive real part; its "
            f"copying score is **{o.copying[head]:.3f}** against **{o.copying_bar:.3f}** for random heads of these "
            f"sizes ({len(o.copying)} heads tested at once)."):
        return
    left, right = beside([3, 2])
    with left:
        figure("OV eigenvalues", figures.eigenvalues_plot, o.eigenvalues)
    with right:
        table(pd.DataFrame({"head": list(o.eigenvalues), "copying score Σλ / Σ|λ|": o.copying.round(3)}),
              "copying scores")
        st.markdown(f"**{o.copiers} of {len(o.copying)} heads copy**: a head counts when its copying score is above "
                    f"what a random head reaches, **{o.copying_bar:.2f}** (random heads of these sizes: mean + z·sd, "
                    f"z for {len(o.copying)} heads at once)"
                    + (", so none can: a score is at most 1" * (o.copying_bar >= 1)) + ".")
    record("heads that copy", f"{o.copiers} of {len(o.copying)}")


def paths() -> None:
    o = compute(circuits.one_layer, model, ids, key=key)
    if o.path_check is None:
        st.info("Path expansion is exact only without LayerNorm; this model has it, so the paths are not shown.")
        return
    prose("The logits as the direct path plus one term per head plus biases"
          + (" (shortformer: positions only steer attention, so no path starts at W_pos)"
             * (model.cfg.positional == "shortformer")) + ".")
    st.markdown(check_line("The paths' sum against the logits of a separate forward pass, in the model's own "
                           "precision", o.path_check) + ".")
    table(pd.DataFrame({"path": o.path_labels, "mean ‖logit contribution‖": o.path_norms.round(3)}), "paths")


show([("One layer: a head's QK and OV circuits", qk_and_ov),
      ("Skip-trigrams", trigrams),
      ("Copying: the OV circuit's eigenvalues", copying),
      ("Path expansion", paths)])
