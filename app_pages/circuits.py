"""Circuits (Elhage et al. 2021; Olsson et al. 2022) on the zoo's models: zero, one and two layers,
and the phase change in which induction heads form."""

import inspect

import pandas as pd
import streamlit as st

from mechlib import checks, circuits, data, figures, induction, zoo
from mechlib.device import budget_mb
from shell import check_line, current_model, literal, section, slider, verdict

PHASE_MODEL = "attn-only-2l"  # the zoo model whose training snapshots ship
PATH_TOKENS = 8  # random ids the path expansion reads when a model has no tokenizer


def section_model(zoo_name: str, fits, why: str) -> tuple[tuple, object, str]:
    """(cache key, model, name as Markdown) of the section's model: the zoo's, or the sidebar's when ``fits(model)``."""
    choice = st.radio("model for this section", [f"zoo: {zoo_name}", "the sidebar's model"], key=f"c_model_{zoo_name}",
                      horizontal=True)
    if choice == "the sidebar's model":
        key, model = current_model()
        if fits(model):
            if model.tokenizer is None:
                st.info("This model has no tokenizer: token tables use ids 2, 3, … instead of the most frequent tokens.")
            kind, name = st.session_state["model_choice"]
            return key, model, {"random": "the sidebar's random model", "session": literal(name)}.get(kind, name)
        st.info(f"The sidebar's model does not fit this section ({why}); showing zoo: {zoo_name}.")
    return ("zoo", zoo_name), zoo.load(zoo_name), zoo_name


@st.cache_data(max_entries=4, show_spinner="Scoring every checkpoint…")
def checkpoints() -> induction.PhaseChange:
    return induction.phase_change(PHASE_MODEL)


@st.cache_data(max_entries=32)
def snapshot_at(step: int, seed: int) -> induction.Snapshot:
    return induction.snapshot(zoo.load_snapshot(PHASE_MODEL, step), seed)


st.title("Circuits")
st.markdown("This page reads the zoo's attention-only models straight from their weights: what a model with no "
            "layers can know, what one layer of heads adds, and how two layers build an induction head. "
            "Each section starts on the zoo model it names; switch it to the sidebar's model where that fits.")
chosen = st.radio("section", ["zero layers", "one layer", "two layers", "the phase change"], key="section",
                  bind="query-params", horizontal=True)
seed = st.session_state["seed"]

if chosen == "zero layers":
    key, model, name = section_model("attn-only-0l", lambda m: m.cfg.n_layers == 0 and m.tokenizer is not None
                                     and m.cfg.positional == "shortformer" and m.cfg.normalization is None,
                                     "it needs no layers, a tokenizer, shortformer positions and no LayerNorm")
    st.subheader(f"Zero layers: W_E W_U is a bigram table ({name})")
    st.latex(r"\text{logits}(t_{\text{next}} \mid t) = W_E[t]\, W_U + b_U")
    st.caption(f"Positions: {model.cfg.positional}. Shortformer positions enter only queries and keys, never the "
               "residual stream, so the logits of a zero-layer model are W_E W_U + b_U exactly, at every position.")
    z = section(circuits.zero_layer, key, model)
    c, d = z.ceiling, model.cfg.d_model
    for col, (what, value, helps) in zip(st.columns(4), [
            ("KL(corpus ‖ this model)", c.model_kl, "the model's W_E W_U + b_U against the corpus's bigrams"),
            (f"KL of the best rank-{d} fit", c.best_fit_kl, f"softmax(W_E W_U + b_U) fitted full-batch to the corpus's "
             f"bigrams at width {d}: the least a model of this width can reach"),
            ("KL of the unigram baseline", c.unigram_kl, "predicting p(next) whatever the current token"),
            ("bigram entropy H(next | current)", c.entropy, "the corpus's own loss: no model of the current token does better")]):
        col.metric(what, f"{value:.2g} nats" if value < 0.01 else f"{value:.3f} nats", help=helps)
    learned = (f"KL **{c.model_kl:.2g} nats** against a bound of **{z.bound:.3f} nats** ({checks.BIGRAM_KL_SHARE} × "
               f"the entropy) — {verdict(z.learned, 'learned', 'not learned')}: the model "
               f"{'has' if z.learned else 'has not'} learned the bigram statistics")
    best = (f"{'within' if z.at_best else 'more than'} {checks.BIGRAM_GAP_MAX} nats of the best rank-{d} fit — "
            f"{verdict(z.at_best, 'as good as its width allows', 'short of what its width allows')}")
    st.markdown(f"{learned}; {best}. Tables show the {circuits.TABLE_TOKENS} most frequent tokens.")
    label = dict(zip(z.ids, z.labels))
    current = st.selectbox("current token", z.ids, format_func=label.__getitem__, key="z_token", bind="query-params")
    st.dataframe(pd.DataFrame(z.next_tokens[z.ids.index(current)]).round(3), hide_index=True)
    names = z.labels[: circuits.TABLE_TOKENS]
    for col, (table, whose) in zip(st.columns(2), [(z.model_table, "The model"), (z.corpus_table, "The corpus")]):
        col.plotly_chart(figures.token_heatmap(table, names, names, f"{whose}: P(next | current)", "next token",
                                               "current token", "probability", diverging=False))

elif chosen == "one layer":
    key, model, name = section_model("attn-only-1l", lambda m: m.cfg.n_layers >= 1 and m.cfg.d_vocab > 2,
                                     "it needs at least one layer, and a token besides <bos> and <unk>")
    st.subheader(f"One layer: skip-trigrams and copying ({name})")
    if model.cfg.n_layers > 1:
        st.caption("Layer 0's heads are read; with more layers, later ones also act on them, so the one-layer reading "
                   "is the direct part only.")
    head = slider("head", 0, model.cfg.n_heads - 1, 0, key="c_head")
    if model.tokenizer:
        prompt = st.text_input("prompt for the path expansion", "the class of an object is its type . the class of",
                               key="c_prompt", bind="query-params")
        ids = data.prompt_ids(model.tokenizer, prompt, model.cfg.n_ctx).ids
    else:
        ids = data.random_ids(model.cfg.d_vocab, min(PATH_TOKENS, model.cfg.n_ctx), seed)
    o = section(circuits.one_layer, key, model, head, ids)
    head_name = circuits.head_label(0, head)
    left, right = st.columns(2)
    left.plotly_chart(figures.token_heatmap(o.qk, o.labels, o.labels, f"QK circuit of {head_name}: W_E W_QK W_Eᵀ",
                                            "source token", "destination token", "score"))
    right.plotly_chart(figures.token_heatmap(o.ov, o.labels, o.labels, f"OV circuit of {head_name}: W_E W_OV W_U",
                                             "output token (logit raised)", "source token (attended to)", "logit"))
    st.markdown("**Skip-trigrams** read off the two circuits: the destination attends to the source (QK), and "
                "attending to the source raises the output (OV).")
    st.dataframe(pd.DataFrame([{"skip-trigram": f"{s} … {d} → {out}", "QK score": round(q, 2), "OV logit": round(v, 2)}
                               for s, d, out, q, v in o.trigrams]), hide_index=True)
    left, right = st.columns([3, 2])
    left.plotly_chart(figures.eigenvalues_plot(o.eigenvalues))
    right.dataframe(pd.DataFrame({"head": list(o.eigenvalues), "copying score Σλ / Σ|λ|": o.copying.round(3)}), hide_index=True)
    right.markdown(f"**{o.copiers} of {len(o.copying)} heads copy**: a head counts when its copying score is above "
                   f"what a random head reaches, **{o.copying_bar:.2f}** (random heads of these sizes: mean + z·sd, z for "
                   f"{len(o.copying)} heads at once)" + (", so none can: a score is at most 1" * (o.copying_bar >= 1)) + ".")
    if o.path_check is None:
        st.info("Path expansion is exact only without LayerNorm; this model has it, so the paths are not shown.")
    else:
        shortformer = model.cfg.positional == "shortformer"
        st.markdown("**Path expansion**: the logits as the direct path plus one term per head plus biases"
                    + (" (shortformer: positions only steer attention, so no path starts at W_pos)" * shortformer) + ". "
                    + check_line("Their sum against the logits of a separate forward pass, in the model's own precision",
                                 o.path_check) + ".")
        st.dataframe(pd.DataFrame({"path": o.path_labels, "mean ‖logit contribution‖": o.path_norms.round(3)}),
                     hide_index=True)

elif chosen == "two layers":
    key, model, name = section_model(
        "attn-only-2l", lambda m: m.cfg.n_layers >= 2 and circuits.composition_mb(m) <= budget_mb()
        and induction.scorable(m.cfg), f"it needs two layers or more, composition scores within {budget_mb():,.0f} MB; "
        + induction.SIZES_NEEDED)
    st.subheader(f"Two layers: composition and the induction circuit ({name})")
    t = section(induction.two_layers, key, model, seed)
    comp, c = t.composition, t.circuit
    for col, mode in zip(st.columns(3), "QKV"):
        col.plotly_chart(figures.composition_heatmap(comp.scores[mode], comp.writers, comp.readers, comp.random, mode))
    st.markdown(f"Random heads compose at about 1/√d_model = **{comp.random:.3f}** (random factors of these sizes: "
                f"**{comp.chance.mean:.3f}** ± {comp.chance.sd:.3f}). Strongest: "
                + "; ".join(f"{w} → {r} by {m}: **{s:.2f}**" for m, w, r, s in comp.strongest) + ".")
    st.markdown("**Virtual heads.** When a later head reads, through its values, what an earlier head wrote, the two act "
                "as one virtual head whose OV circuit is W_OV^A W_OV^B. The strongest pairs by V-composition, picked from "
                f"{comp.tested}: a pair is above random past **{comp.bar:.3f}**, the mean + z·sd of random factors' scores "
                f"with z for {comp.tested} pairs at once, so that a random model passes with a chance of "
                f"{checks.FAMILY_ALPHA:.0%} at most:")
    st.dataframe(pd.DataFrame([{"virtual head": f"{v.writer} → {v.reader}", "V-composition": round(v.v_composition, 3),
                                "‖W_OV^A W_OV^B‖_F": round(v.norm, 2),
                                "above random?": "✓ yes" if v.above_random else "✗ no"} for v in comp.virtual]),
                 hide_index=True)
    if not comp.any_virtual_above_random:
        st.markdown(f"None of these pairs V-composes above random factors ({comp.bar:.3f}): {name} forms no "
                    "virtual head stronger than chance.")
    st.plotly_chart(figures.patterns_grid(t.patterns, "Every head on a repeated random sequence: "
                                          "induction heads attend one token after each earlier copy"))
    st.dataframe(pd.DataFrame({"head": t.heads, "previous-token": t.scores["prev_token"].flatten().round(3),
                               "duplicate-token": t.scores["duplicate_token"].flatten().round(3),
                               "induction (prefix matching)": t.scores["induction"].flatten().round(3)}), hide_index=True)
    st.caption(f"A role is claimed only past its threshold: previous-token ≥ {checks.PREV_TOKEN_MIN}, induction ≥ "
               f"{checks.INDUCTION_MIN}, K-composition and an OV copying score each above what random heads reach "
               f"(their mean + z·sd, z for one test), and an induction score that falls by at least "
               f"{checks.ABLATION_DROP_MIN:.0%} when the previous-token head is ablated.")
    if c.found:
        st.markdown(
            f"**The circuit, as found in {name}.** {c.previous} is a previous-token head (score {c.previous_score:.2f}): "
            f"it writes \"my previous token was A\" into each position. {c.induction} K-composes with it: its keys read "
            f"that, so a query for A finds the position after the earlier A (induction score {c.induction_score:.2f}), "
            f"and its OV circuit copies the token found there (copying score {c.copying:.2f} against {c.copying_bar:.2f} "
            f"for a random head — {verdict(c.copies, 'copies', 'does not copy')}). Their K-composition is "
            f"**{c.k_composition:.2f}**, against {c.baseline:.3f} for random factors on average (the bar for one pair: "
            f"{c.threshold:.3f}) and a ceiling of **{c.k_ceiling:.2f}** for these two heads: with σ and "
            "τ their singular values, no alignment of the two can score above √(Σ σᵢ² τᵢ²) / (‖σ‖ ‖τ‖).")
        st.markdown(f"**Ablation proof.** With {c.previous}'s output set to zero (a functional argument; the shared model "
                    f"is untouched), {c.induction}'s induction score falls from **{c.induction_score:.3f}** to "
                    f"**{c.ablated_score:.3f}**, a drop of {c.drop:.0%} — "
                    f"{verdict(c.depends, 'it depends on the previous-token head')}.")
    else:
        st.markdown(f"**No induction circuit found in {name}.** Missing: " + "; ".join(c.missing) + ".")

else:
    st.subheader(f"The phase change: when induction heads form ({PHASE_MODEL}'s training)")
    steps = zoo.snapshot_steps(PHASE_MODEL)
    step = st.select_slider("training step", steps, steps[-1], key="c_step", bind="query-params")
    st.plotly_chart(figures.training_curves(zoo.history(PHASE_MODEL), step))
    every, snap = checkpoints(), snapshot_at(step, seed)
    (prev_head, prev_score), (ind_head, ind_score) = snap.best_previous, snap.best_induction
    st.markdown(f"At step {step:,}: best previous-token score **{prev_score:.2f}** ({prev_head}), best induction score "
                f"**{ind_score:.2f}** ({ind_head}), in-context-learning score **{every.icl[every.steps.index(step)]:+.2f} "
                "nats** (loss at the last position minus loss a tenth of the way in, on repeated sequences: negative "
                "when the context helps).")
    st.markdown(f"No checkpoint has an induction head (best score ≥ {checks.INDUCTION_MIN})." if every.formed_at is None
                else f"An induction head (best score ≥ {checks.INDUCTION_MIN}) first appears at step **{every.formed_at:,}**.")
    st.dataframe(pd.DataFrame({"step": every.steps, "best induction score": [round(s, 3) for s in every.induction],
                               "in-context-learning score (nats)": [round(s, 2) for s in every.icl]}),
                 hide_index=True, height=240)
    st.plotly_chart(figures.patterns_grid(snap.patterns, f"Every head at step {step:,}"))

with st.expander("Under the hood"):
    st.markdown("The composition score as Elhage et al. (2021) define it; the page uses a fast version of it.")
    st.code(inspect.getsource(circuits.composition_score_reference))
    if st.toggle("show the fast implementation", key="c_fast"):
        st.caption("Every pair at once, no d_model × d_model matrix; tested against the reference to 1e-10 in float64.")
        st.code("\n".join(inspect.getsource(f) for f in (
            circuits.composition_scores, circuits._writers_and_readers, circuits._orthonormal_left,
            circuits._squared_norms_by_gram, circuits._squared_norms_directly, circuits.composition_ceiling)))
