"""Circuits, two layers (Elhage et al. 2021; Olsson et al. 2022): composition, virtual heads, induction heads, the
ablation that proves the circuit, and activation patching that finds it from the other side."""

import pandas as pd
import streamlit as st

from classroom import keys
from classroom.admission import budget_mb
from classroom.experiments import compute
from classroom.page.attention_text import attention_text
from classroom.page.layout import beside, figure, prose, show, source, table
from classroom.page.part import derived, record
from classroom.page.questions import exercise, predict
from classroom.page.text import verdict
from classroom.session import part_model
from mechlib import checks, circuits, data, figures, induction, patching

NONE = "none of them"

st.title("Circuits: two layers")
prose("With two layers, a later head can read what an earlier one wrote: heads compose. This page measures "
      "composition from the weights and finds the induction circuit, a previous-token head and the head whose "
      "keys read it.")
seed = st.session_state[keys.SEED]

key, model, name = part_model(
    "attn-only-2l", lambda m: m.cfg.n_layers >= 2 and circuits.composition_mb(m) <= budget_mb()
    and induction.scorable(m.cfg), f"it needs two layers or more, composition scores within {budget_mb():,.0f} MB; "
    + induction.SIZES_NEEDED)


def composition() -> None:
    comp = compute(induction.two_layers, model, seed, key=key).composition
    prose("A later head composes with an earlier one when it reads what the earlier one wrote: through its queries "
          "(Q-composition), its keys (K-composition) or its values (V-composition). The score is ‖W_A W_B‖_F / "
          "(‖W_A‖_F ‖W_B‖_F), with W_A the earlier head's W_OV and W_B the later head's W_QKᵀ, W_QK (the reading's W_p) or W_OV.")
    wide = len(comp.readers) > figures.HEAD_TICKS  # GPT-2 small's 132 × 132 pairs: one heatmap per row
    for col, mode in zip([st.container()] * 3 if wide else beside(3), "QKV"):
        with col:
            figure(f"{mode}-composition", figures.composition_heatmap, comp.scores[mode], comp.writers, comp.readers,
                   comp.random, mode)
    st.markdown(f"Random heads compose at about 1/√d_model = **{comp.random:.3f}** (random factors of these sizes: "
                f"**{comp.chance.mean:.3f}** ± {comp.chance.sd:.3f}). Strongest: "
                + "; ".join(f"{w} → {r} by {m}: **{s:.2f}**" for m, w, r, s in comp.strongest) + ".")


def virtual_heads() -> None:
    comp = compute(induction.two_layers, model, seed, key=key).composition
    prose("When a later head reads, through its values, what an earlier head wrote, the two act as one virtual "
          "head whose OV circuit is W_OV^A W_OV^B.")
    st.markdown(f"The strongest pairs by V-composition, picked from {comp.tested}: a pair is above random past "
                f"**{comp.bar:.3f}**, the mean + z·sd of random factors' scores with z for {comp.tested} pairs at "
                f"once, so that a random model passes with a chance of {checks.FAMILY_ALPHA:.0%} at most:")
    table(pd.DataFrame([{"virtual head": f"{v.writer} → {v.reader}", "V-composition": round(v.v_composition, 3),
                         "‖W_OV^A W_OV^B‖_F": round(v.norm, 2),
                         "above random?": "✓ yes" if v.above_random else "✗ no"} for v in comp.virtual]),
          "virtual heads")
    if not comp.any_virtual_above_random:
        st.markdown(f"None of these pairs V-composes above random factors ({comp.bar:.3f}): {name} forms no "
                    "virtual head stronger than chance.")


def heads() -> None:
    t = compute(induction.two_layers, model, seed, key=key)
    title = "Every head on a repeated random sequence: induction heads attend one token after each earlier copy"
    figure("patterns on a repeated sequence", figures.patterns_grid, t.patterns, title)
    attention_text("The same patterns on the sequence's tokens: point at (or tap) a token of the second copy. A "
                   "previous-token head shades the token just before it; an induction head the token after its "
                   "earlier copy.", t.patterns, data.token_labels(model.tokenizer, t.example), None, len(t.example) - 1,
                   key="hover heads")
    prev = t.scores["prev_token"].flatten()
    if not exercise("previous-token head", "Find the previous-token head in this model: a head that puts at least "
             f"{checks.PREV_TOKEN_MIN} of its attention on the position just before the query. Read the patterns "
             "in this section.", t.heads + [NONE], t.previous_token_heads or [NONE],
             "Mean attention to the previous position over a batch of repeated sequences: the highest, "
             + ", ".join(f"{h} **{s:.2f}**" for h, s in sorted(zip(t.heads, prev), key=lambda p: -p[1])[:3])
             + f". A previous-token head scores {checks.PREV_TOKEN_MIN} or more."):
        return
    table(pd.DataFrame({"head": t.heads, "previous-token": prev.round(3),
                        "duplicate-token": t.scores["duplicate_token"].flatten().round(3),
                        "induction (prefix matching)": t.scores["induction"].flatten().round(3)}), "head scores")
    prose(f"A role is claimed only past its threshold: previous-token ≥ {checks.PREV_TOKEN_MIN}, induction ≥ "
          f"{checks.INDUCTION_MIN}, K-composition and an OV copying score each above what random heads reach "
          f"(their mean + z·sd, z for one test), and an induction score that falls by at least "
          f"{checks.ABLATION_DROP_MIN:.0%} when the previous-token head is ablated.")


def the_circuit() -> None:
    c = compute(induction.two_layers, model, seed, key=key).circuit
    if not predict("ablation", f"Set the output of {c.previous}, the best previous-token head (score "
                   f"{c.previous_score:.2f}), to zero. Which later head's induction score will the ablation break? "
                   "(Several can.)", list(c.ablation) + [NONE], c.broken or [NONE],
            "Induction scores before → after the ablation: "
            + "; ".join(f"{h} {before:.2f} → {after:.2f}" for h, (before, after) in c.ablation.items())
            + f". A head breaks when it is an induction head (≥ {checks.INDUCTION_MIN}) whose score falls by "
            f"{checks.ABLATION_DROP_MIN:.0%} or more; every head that breaks is a right answer."):
        return
    if c.found:
        st.markdown(
            f"**The circuit, as found in {name}.** {c.previous} is a previous-token head (score {c.previous_score:.2f}): "
            f"it writes \"my previous token was A\" into each position. {c.induction} K-composes with it: its keys "
            f"read that, so a query for A finds the position after the earlier A (induction score "
            f"{c.induction_score:.2f}), and its OV circuit copies the token found there (copying score "
            f"{c.copying:.2f} against {c.copying_bar:.2f} for a random head — "
            f"{verdict(c.copies, 'copies', 'does not copy')}). Their K-composition is **{c.k_composition:.2f}**, "
            f"against {c.baseline:.3f} for random factors on average (the bar for one pair: {c.threshold:.3f}) and "
            f"a ceiling of **{c.k_ceiling:.2f}** for these two heads: with σ and τ their singular values, no "
            "alignment of the two can score above √(Σ σᵢ² τᵢ²) / (‖σ‖ ‖τ‖).")
        st.markdown(f"**Ablation proof.** With {c.previous}'s output set to zero (a functional argument; the shared "
                    f"model is untouched), {c.induction}'s induction score falls from **{c.induction_score:.3f}** to "
                    f"**{c.ablated_score:.3f}**, a drop of {c.drop:.0%} — "
                    f"{verdict(c.depends, 'it depends on the previous-token head')}.")
        record("K-composition of the circuit", f"{c.k_composition:.3f}")
        record("induction score after the ablation", f"{c.induction_score:.3f} → {c.ablated_score:.3f}")
    else:
        st.markdown(f"**No induction circuit found in {name}.** Missing: " + "; ".join(c.missing) + ".")


def activation_patching() -> None:
    t = compute(induction.two_layers, model, seed, key=key)  # first: the figures' snippets read the patching result
    p = compute(patching.patching, model, seed, key=key)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    labels = [circuits.head_label(layer, head) for layer in range(L) for head in range(H)]
    prose(f"Activation patching runs the model on a clean input, a random segment of {p.length} tokens repeated, "
          "with one activation taken from a corrupted input, the same but with the first copy replaced by other "
          "random tokens, and measures the logit difference on the second copy: the logit of the token after the "
          "earlier copy minus that of the corrupted input's token there. A patch's effect is (clean − patched) / "
          "(clean − corrupted): 1 when that activation alone, corrupted, breaks the prediction as much as the "
          "corrupted input does, 0 when it changes nothing.")
    keys = ", ".join(f"{label} **{value:.0%}**" for label, value in sorted(
        zip(labels, p.inputs["k"].flatten()), key=lambda pair: -pair[1])[:4])
    if not predict("patching", "Corrupt one head's keys at a time, everything else clean. Whose keys carry the "
                   f"prediction: corrupting them alone costs at least {p.effect_min:.0%} of what the corrupted input "
                   "costs? (Several can.)", labels + [NONE], p.carriers or [NONE],
                   f"The effect of corrupting each head's keys, largest first: {keys}. A head's keys carry the "
                   f"prediction from {p.effect_min:.0%} on, when the model predicts the second copy at all (its "
                   f"clean and corrupted logit differences at least {p.gap_min:g} apart)."):
        return
    if not p.measurable:
        st.markdown(f"**Nothing to break.** {name}'s logit difference is {p.clean:.2f} on the clean input and "
                    f"{p.corrupted:.2f} on the corrupted one, less than {p.gap_min:g} apart: it does not predict the "
                    "second copy, so no patch can show what carries the prediction.")
    else:
        sender, receiver, value = p.strongest
        prev = t.scores["prev_token"].flatten()[t.heads.index(sender)]
        score = t.scores["induction"].flatten()[t.heads.index(receiver)]
        found = verdict(p.stands_out, f"it carries the prediction (≥ {p.effect_min:.0%})",
                        f"no path carries {p.effect_min:.0%} or more")
        roles = (verdict(prev >= checks.PREV_TOKEN_MIN, f"a previous-token head (score {prev:.2f})",
                         f"not a previous-token head (score {prev:.2f} < {checks.PREV_TOKEN_MIN})"),
                 verdict(score >= checks.INDUCTION_MIN, f"an induction head (score {score:.2f})",
                         f"not an induction head (score {score:.2f} < {checks.INDUCTION_MIN})"))
        needs = (" An induction head's keys need the previous-token head's output: what the ablation above found "
                 "by removing it." if p.stands_out and prev >= checks.PREV_TOKEN_MIN and score >= checks.INDUCTION_MIN
                 else "")
        st.markdown(f"Logit difference: **{p.clean:.2f}** clean, **{p.corrupted:.2f}** corrupted. The strongest path "
                    f"into a head's keys: **{sender} → {receiver}**, effect **{value:.0%}** — {found}. {sender}: "
                    f"{roles[0]}; {receiver}: {roles[1]}.{needs}")
        record("strongest K path", f"{sender} → {receiver}: {value:.3f}")
    layers, columns = [f"layer {layer}" for layer in range(L)], [f"H{h}" for h in range(H)]
    rows = [f"L{layer} {part}" for layer in range(L) for part in ("queries", "keys", "values")]
    titles = ("A head's output, corrupted", "A head's queries, keys or values, corrupted")
    left, right = beside(2)
    with left:
        figure("patching head outputs", figures.patching_heatmap, p.heads, layers, columns, titles[0], "head", "layer")
    with right:
        figure("patching q, k, v", figures.patching_heatmap, derived(patching.inputs_by_row, p), rows, columns,
               titles[1], "head", "what is corrupted")
    title = "Path patching: an earlier head's output corrupted on its way into a later head's keys only"
    figure("path patching into keys", figures.patching_heatmap, derived(patching.key_paths_grid, p),
           labels[: (L - 1) * H], labels[H:], title, "later head (its keys)", "earlier head")
    positions = list(range(2 * p.length + 1))
    streams = [f"into layer {layer}" for layer in range(L)]
    axis = f"position (0: <bos>; 1–{p.length}: the first copy)"
    figure("patching the residual stream", figures.patching_heatmap, p.resid, streams, positions,
           "The residual stream, corrupted at one position", axis, "residual stream")


show([("Two layers: how heads compose", composition),
      ("Virtual heads", virtual_heads),
      ("Induction heads on a repeated sequence", heads),
      ("The induction circuit, and the ablation that proves it", the_circuit),
      ("Activation patching: what carries the prediction", activation_patching)])

with st.expander("Under the hood"):
    st.markdown("The composition score as Elhage et al. (2021) define it; the page uses a fast version of it.")
    st.code(source(circuits.composition_score_reference))
    if st.toggle("show the fast implementation", False, key="c_fast", bind="query-params"):
        st.caption("Every pair at once, no d_model × d_model matrix; tested against the reference to 1e-10 in float64.")
        st.code(source(circuits.composition_scores, circuits._writers_and_readers, circuits._orthonormal_left,
                       circuits._squared_norms_by_gram, circuits._squared_norms_directly, circuits.composition_ceiling))
