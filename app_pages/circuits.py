"""Circuits (Elhage et al. 2021; Olsson et al. 2022) on the zoo's models: zero, one and two layers,
and the phase change in which induction heads form."""

import numpy as np
import pandas as pd
import streamlit as st

from classroom import pages
from classroom.admission import budget_mb
from classroom.experiments import compute
from classroom.layout import beside, figure, metric, prose, show, source, table
from classroom.part import record
from classroom.questions import exercise, predict
from classroom.session import current_model
from classroom.slides import controls
from classroom.text import check_line, literal, verdict
from classroom.widgets import select_slider, selectbox, slider
from mechlib import bigrams, checks, circuits, data, figures, induction, zoo

PHASE_MODEL = "attn-only-2l"  # the zoo model whose training snapshots ship
PATH_TOKENS = 8  # random ids the path expansion reads when a model has no tokenizer
JUMP_RANGES = 5  # the phase-change question's options: the checkpoints cut into this many ranges of steps
NONE = "none of them"


def section_model(zoo_name: str, fits, why: str) -> tuple[tuple, object, str]:
    """(cache key, model, name as Markdown) of the section's model: the zoo's, or the sidebar's when ``fits(model)``."""
    with controls():
        choice = st.radio("model for this section", [f"zoo: {zoo_name}", pages.SIDEBARS_MODEL], index=0,
                          key=pages.circuits_model_key(zoo_name), bind="query-params", horizontal=True)
    if choice == pages.SIDEBARS_MODEL:
        key, model = current_model()
        if fits(model):
            if model.tokenizer is None:
                st.info("This model has no tokenizer: token tables use ids 2, 3, … instead of the most frequent tokens.")
            kind, name = st.session_state["model_choice"]
            return key, model, {"random": "the sidebar's random model", "session": literal(name)}.get(kind, name)
        st.info(f"The sidebar's model does not fit this section ({why}); showing zoo: {zoo_name}.")
    return ("zoo", zoo_name), zoo.load(zoo_name), zoo_name


def reading(name: str) -> None:
    """The section's model, named once under its radio (section titles stay fixed, so presentation mode keeps its
    place when the model changes)."""
    st.markdown(f"Reading **{name}**.")



st.title("Circuits")
prose("This page reads the zoo's attention-only models straight from their weights: what a model with no layers can "
      "know, what one layer of heads adds, and how two layers build an induction head. Each section starts on the zoo "
      "model it names; switch it to the sidebar's model where that fits.")
with controls():
    chosen = st.radio("section", pages.CIRCUITS_PARTS, index=0, key=pages.CIRCUITS_PART, bind="query-params",
                      horizontal=True)
seed = st.session_state["seed"]

if chosen == "zero layers":
    key, model, name = section_model("attn-only-0l", lambda m: m.cfg.n_layers == 0 and m.tokenizer is not None
                                     and m.cfg.positional == "shortformer" and m.cfg.normalization is None,
                                     "it needs no layers, a tokenizer, shortformer positions and no LayerNorm")
    reading(name)
    V, steps = model.cfg.d_vocab, bigrams.fit_steps(model.cfg.d_vocab, model.cfg.d_model)
    st.caption(f"Cost: about {bigrams.estimate_mb(V):,.0f} MB for the {V:,} × {V:,} bigram tables, of this server's "
               f"{budget_mb():,.0f} MB, and the first time up to {bigrams.FIT_SECONDS:.0f} s for the best fit "
               f"({steps:,} steps); then it is read from the cache.")
    z = compute(circuits.zero_layer, model, key=key)
    label = dict(zip(z.ids, z.labels))
    with controls():
        current = selectbox("current token", z.ids, "z_token", label.__getitem__, z.ids.index(z.example))

    def bigram_table() -> None:
        z = compute(circuits.zero_layer, model, key=key)
        st.latex(r"\text{logits}(t_{\text{next}} \mid t) = W_E[t]\, W_U + b_U")
        prose(f"Positions: {model.cfg.positional}. Shortformer positions enter only queries and keys, never the "
              "residual stream, so the logits of a zero-layer model are W_E W_U + b_U exactly, at every position.")
        c, d = z.ceiling, model.cfg.d_model
        for col, (what, value, helps) in zip(st.columns(4), [
                ("KL(corpus ‖ this model)", c.model_kl, "the model's W_E W_U + b_U against the corpus's bigrams"),
                (f"KL of the best rank-{d} fit", c.best_fit_kl, f"softmax(W_E W_U + b_U) fitted full-batch to the "
                 f"corpus's bigrams at width {d}: the least a model of this width can reach"),
                ("KL of the unigram baseline", c.unigram_kl, "predicting p(next) whatever the current token"),
                ("bigram entropy H(next | current)", c.entropy, "the corpus's own loss: no model of the current token "
                 "does better")]):
            metric(col, what, f"{value:.2g} nats" if value < 0.01 else f"{value:.3f} nats", help=helps)
        learned = (f"KL **{c.model_kl:.2g} nats** against a bound of **{z.bound:.3f} nats** ({checks.BIGRAM_KL_SHARE} × "
                   f"the entropy) — {verdict(z.learned, 'learned', 'not learned')}: the model "
                   f"{'has' if z.learned else 'has not'} learned the bigram statistics")
        best = (f"{'within' if z.at_best else 'more than'} {checks.BIGRAM_GAP_MAX} nats of the best rank-{d} fit — "
                f"{verdict(z.at_best, 'as good as its width allows', 'short of what its width allows')}")
        st.markdown(f"{learned}; {best}.")
        if c.fit_steps < bigrams.FIT_STEPS:
            st.caption(f"The best fit ran {c.fit_steps:,} of {bigrams.FIT_STEPS:,} steps, capped at about "
                       f"{bigrams.FIT_SECONDS:.0f} s for a {V:,}-token vocabulary: its KL is above the floor it "
                       "estimates, so the model may look closer to its width's best than it is.")

    def next_tokens() -> None:
        z = compute(circuits.zero_layer, model, key=key)
        row = z.next_tokens[z.ids.index(current)]
        top, p, corpus_top, q = (row["model's next token"][0], row["model probability"][0],
                                 row["corpus's next token"][0], row["corpus probability"][0])
        if predict("bigram", f"Which token does the bigram table W_E W_U + b_U predict after '{literal(label[current])}'?",
                   sorted(literal(t) for t in row["model's next token"][:4]), [literal(top)],
                f"Row '{literal(label[current])}' of softmax(W_E W_U + b_U) puts **{p:.3f}** on '{literal(top)}'; in "
                f"the corpus, '{literal(corpus_top)}' follows it most often ({q:.3f}). Another current token, or "
                "another model, can answer differently."):
            table(pd.DataFrame(row).round(3), f"next tokens after {label[current]}")

    def side_by_side() -> None:
        z = compute(circuits.zero_layer, model, key=key)
        names = z.labels[: circuits.TABLE_TOKENS]
        prose(f"The {circuits.TABLE_TOKENS} most frequent tokens: each row is a current token, each column a next one.")
        for col, (matrix, field, whose) in zip(beside(2), [(z.model_table, "model_table", "The model"),
                                                               (z.corpus_table, "corpus_table", "The corpus")]):
            title = f"{whose}: P(next | current)"
            with col:
                figure(figures.token_heatmap(matrix, names, names, title, "next token", "current token", "probability",
                                             diverging=False), f"{whose.lower()} bigrams",
                       f"names = result.labels[:{circuits.TABLE_TOKENS}]\n"
                       f"fig = figures.token_heatmap(result.{field}, names, names, {title!r}, 'next token', "
                       "'current token', 'probability', diverging=False)")

    show([("Zero layers: W_E W_U is a bigram table", bigram_table),
          ("The next tokens after one current token", next_tokens),
          ("The model's table beside the corpus's", side_by_side)])

elif chosen == "one layer":
    key, model, name = section_model("attn-only-1l", lambda m: m.cfg.n_layers >= 1 and m.cfg.d_vocab > 2,
                                     "it needs at least one layer, and a token besides <bos> and <unk>")
    reading(name)
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
                figure(figures.token_heatmap(getattr(o, field), o.labels, o.labels, title, x, y, value),
                       f"{field} circuit of {head_name}",
                       f"fig = figures.token_heatmap(result.{field}, result.labels, result.labels, {title!r}, {x!r}, "
                       f"{y!r}, {value!r})")

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
            figure(figures.eigenvalues_plot(o.eigenvalues), "OV eigenvalues",
                   "fig = figures.eigenvalues_plot(result.eigenvalues)")
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

elif chosen == "two layers":
    key, model, name = section_model(
        "attn-only-2l", lambda m: m.cfg.n_layers >= 2 and circuits.composition_mb(m) <= budget_mb()
        and induction.scorable(m.cfg), f"it needs two layers or more, composition scores within {budget_mb():,.0f} MB; "
        + induction.SIZES_NEEDED)
    reading(name)

    def composition() -> None:
        comp = compute(induction.two_layers, model, seed, key=key).composition
        prose("A later head composes with an earlier one when it reads what the earlier one wrote: through its queries "
              "(Q-composition), its keys (K-composition) or its values (V-composition). The score is ‖W_A W_B‖_F / "
              "(‖W_A‖_F ‖W_B‖_F), with W_A the earlier head's W_OV and W_B the later head's W_QKᵀ, W_QK (the reading's W_p) or W_OV.")
        for col, mode in zip(beside(3), "QKV"):
            with col:
                figure(figures.composition_heatmap(comp.scores[mode], comp.writers, comp.readers, comp.random, mode),
                       f"{mode}-composition",
                       f"comp = result.composition\nfig = figures.composition_heatmap(comp.scores[{mode!r}], "
                       f"comp.writers, comp.readers, comp.random, {mode!r})")
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
        figure(figures.patterns_grid(t.patterns, title), "patterns on a repeated sequence",
               f"fig = figures.patterns_grid(result.patterns, {title!r})")
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

    show([("Two layers: how heads compose", composition),
          ("Virtual heads", virtual_heads),
          ("Induction heads on a repeated sequence", heads),
          ("The induction circuit, and the ablation that proves it", the_circuit)])

else:
    steps = zoo.snapshot_steps(PHASE_MODEL)

    def training() -> None:
        prose("The zoo's two-layer model saved during its training: the induction heads form suddenly, and in the same "
              "steps the context starts to help the loss.")
        every = compute(induction.phase_change, PHASE_MODEL)
        (before, after), bins = every.jump, every.bins(JUMP_RANGES)
        rises = np.diff(every.induction)
        i = every.steps.index(before)
        options = [f"{a:,} to {b:,}" for a, b in bins]
        if not predict("jump", f"Between which training steps does the best induction score of {PHASE_MODEL} jump? "
                       "(Each range holds the checkpoints saved in it.)", options, [options[every.jump_bin(JUMP_RANGES)]],
                       f"Between the checkpoints at steps {before:,} and {after:,} it rises from "
                       f"**{every.induction[i]:.2f}** to **{every.induction[i + 1]:.2f}**, so the checkpoint at step "
                       f"{after:,} is the first past the jump; no other pair of consecutive checkpoints rises by more "
                       f"than {np.delete(rises, i).max(initial=0.0):.2f}."):
            return
        marked = st.session_state.get("c_step", steps[-1])  # the next part's slider
        figure(figures.training_curves(zoo.history(PHASE_MODEL), marked), "training curves",
               f"fig = figures.training_curves(zoo.history({PHASE_MODEL!r}), {marked!r})", using=zoo.history)
        st.markdown(f"No checkpoint has an induction head (best score ≥ {checks.INDUCTION_MIN})." if every.formed_at is None
                    else f"An induction head (best score ≥ {checks.INDUCTION_MIN}) first appears at step "
                         f"**{every.formed_at:,}**.")
        table(pd.DataFrame({"step": every.steps, "best induction score": [round(s, 3) for s in every.induction],
                            "in-context-learning score (nats)": [round(s, 2) for s in every.icl]}),
              "scores per checkpoint", height=240)

    def at_step() -> None:
        step = select_slider("training step", steps, steps[-1], key="c_step")
        every, snap = compute(induction.phase_change, PHASE_MODEL), compute(induction.snapshot_at, PHASE_MODEL, step, seed)
        (prev_head, prev_score), (ind_head, ind_score) = snap.best_previous, snap.best_induction
        st.markdown(f"At step {step:,}: best previous-token score **{prev_score:.2f}** ({prev_head}), best induction "
                    f"score **{ind_score:.2f}** ({ind_head}), in-context-learning score "
                    f"**{every.icl[every.steps.index(step)]:+.2f} nats**.")
        prose("The in-context-learning score is the loss at the last position minus the loss a tenth of the way in, on "
              "repeated sequences: negative when the context helps.")
        title = f"Every head at step {step:,}"
        figure(figures.patterns_grid(snap.patterns, title), "patterns at this step",
               f"fig = figures.patterns_grid(result.patterns, {title!r})", using=induction.snapshot_at)

    show([(f"The phase change: when induction heads form in {PHASE_MODEL}", training),
          ("Every head at one step", at_step)])

with st.expander("Under the hood"):
    st.markdown("The composition score as Elhage et al. (2021) define it; the page uses a fast version of it.")
    st.code(source(circuits.composition_score_reference))
    if st.toggle("show the fast implementation", False, key="c_fast", bind="query-params"):
        st.caption("Every pair at once, no d_model × d_model matrix; tested against the reference to 1e-10 in float64.")
        st.code(source(circuits.composition_scores, circuits._writers_and_readers, circuits._orthonormal_left,
                       circuits._squared_norms_by_gram, circuits._squared_norms_directly, circuits.composition_ceiling))
