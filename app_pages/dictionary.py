"""Dictionary learning: features in superposition (Elhage et al. 2022), a sparse autoencoder graded by the toy's
true features, then sparse autoencoders on our own models' residual streams and neurons (Bricken et al. 2023), trained
in a worker as the Train page's models are, and a latent browser."""

import numpy as np
import pandas as pd
import streamlit as st

from classroom import activity, keys
from classroom.experiments import compute
from classroom.model_choice import ModelChoice
from classroom.page.layout import beside, figure, metric, prose, show, source, table
from classroom.page.part import record
from classroom.page.questions import predict
from classroom.page.shaded_text import shaded_lines
from classroom.page.slides import controls, own_slide
from classroom.page.text import literal, verdict
from classroom.page.widgets import slider
from classroom.session import browser_id, session_id
from classroom.state.store import STORE, StoreError, short_id
from classroom.training.door import TRAININGS
from classroom.training.errors import SessionBusy
from classroom.training.progress_line import ProgressLine
from mechlib import data, figures, latents, sae, sae_grading, sae_residual, superposition
from mechlib.io import CheckpointError

st.title("Dictionary learning")
prose("The circuits paper reads a model by its heads: each reads a few directions of the residual stream and writes a "
      "few. It says little of the stream itself, which holds far more **features** than it has dimensions. The next "
      "step of the field (Toy Models of Superposition, 2022; Towards Monosemanticity, 2023) is to learn those "
      "features back: a **sparse autoencoder** writes each activation as a few directions out of a large learned "
      "dictionary. Here first on a toy whose true features are known, so the dictionary can be graded, then on the "
      "zoo's own models.")
seed = st.session_state[keys.SEED]


def count_options(n: int) -> list[str]:
    """A question's options for a count out of ``n``: each count when there are few, else bins of equal width."""
    if n <= 6:
        return [str(k) for k in range(n + 1)]
    width = -(-(n + 1) // 5)
    return [f"{low}–{min(low + width - 1, n)}" for low in range(0, n + 1, width)]


def count_option(count: int, n: int) -> str:
    """The option of ``count_options(n)`` that holds ``count``."""
    return next(option for option in count_options(n) if int(option.split("–")[0]) <= count
                <= int(option.split("–")[-1]))


with controls():
    left, middle, right = st.columns(3)
    with left:
        n_features = slider("features n", *superposition.N_FEATURES, 5, "d_n")
        n_hidden = slider("dimensions m", superposition.N_HIDDEN[0], min(superposition.N_HIDDEN[1], n_features - 1), 2,
                          "d_m")
    with middle:
        sparsity = st.select_slider("sparsity S (a feature is absent with probability S)",
                                    [0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99], 0.9, key="d_sparsity",
                                    bind="query-params")
    with right:
        decay = st.select_slider("importance of feature i: decayⁱ", [0.7, 0.8, 0.9, 1.0], 1.0, key="d_decay",
                                 bind="query-params")


def superposition_part() -> None:
    prose(f"**The toy model.** {n_features} features, each present with probability 1 − S = {1 - sparsity:.2g} and "
          f"then uniform in [0, 1], are stored in {n_hidden} dimensions as h = W x and read back as "
          "x′ = ReLU(Wᵀh + b), trained to reconstruct them (feature i weighted by its importance). Column W_i is "
          "where feature i points in the hidden space.")
    st.latex(r"h = Wx,\quad x' = \mathrm{ReLU}(W^\top h + b),\qquad "
             r"D_i = \frac{\lVert W_i\rVert^2}{\sum_j (\hat W_i\cdot W_j)^2}")
    toy_cost = superposition.train_toy.estimate_mb(n_features, n_hidden)
    st.caption(f"Training: {superposition.INSTANCES} initialisations × {superposition.STEPS:,} Adam steps of "
               f"{superposition.BATCH:,} samples, about {toy_cost:.0f} MB; the lowest loss on fresh samples is kept. "
               "A few seconds on two CPU cores, computed once for the whole class per setting.")
    toy = compute(superposition.train_toy, n_features, n_hidden, sparsity, decay, seed)
    shown = predict("d represented", f"At sparsity S = {sparsity:g}, how many of the {n_features} features does the "
                    f"model give a direction (‖W_i‖ ≥ {superposition.REPRESENTED_NORM}) in {n_hidden} dimensions?",
                    count_options(n_features), [count_option(toy.n_represented, n_features)],
                    f"{toy.n_represented} of {n_features}: the features with ‖W_i‖ ≥ "
                    f"{superposition.REPRESENTED_NORM} (a learned one reaches about 1, a dropped one about 0).")
    if not shown:
        return
    prose(f"A feature has a **direction of its own** when, besides, no other feature projects onto it "
          f"(Σ_j≠i (Ŵ_i · W_j)² ≤ {superposition.OWN_INTERFERENCE}). Its **dimensionality** D_i is the share of a "
          "dimension it holds: 1 alone in its dimension, 1/2 in an antipodal pair, 2/5 in a pentagon.")
    with own_slide():  # in presentation mode each figure is a slide of its own: a slide's type has room for little
        figure("feature directions", figures.feature_directions, toy.W, toy.own_direction, toy.represented,
               f"Where each of {n_features} features points in {n_hidden} dimensions, S = {sparsity:g}"
               if n_hidden == 2 else f"The features' overlaps WᵀW in {n_hidden} dimensions, S = {sparsity:g}")
    with own_slide():
        figure("feature dimensionality", figures.feature_bars, toy.dimensionality,
               figures.fates(toy.own_direction, toy.represented), figures.FATE_COLOURS,
               "Each feature's dimensionality D_i: the share of a dimension it holds", "D_i (dimensions)")
    with own_slide():
        st.markdown(f"{verdict(toy.in_superposition, 'in superposition', 'no superposition')}: {toy.verdict}. "
                    f"Σ D_i = **{float(toy.dimensionality.sum()):.2f}** of {n_hidden} dimensions used.")
    record("features represented", str(toy.n_represented))
    record("features with a direction of their own", str(toy.n_own))


with controls():
    left, right = st.columns(2)
    with left:
        d_sae = slider("latents of the sparse autoencoder", 2, 4 * superposition.N_FEATURES[1], 2 * n_features, "d_sae")
    with right:
        l1 = st.select_slider("L1 penalty λ (sparsity)", [0.01, 0.03, 0.1, 0.3, 1.0], sae_grading.L1_COEFFICIENT,
                              key="d_l1", bind="query-params")


def graded_part() -> None:
    prose("**A sparse autoencoder** reads only the hidden activations h, never W. It learns a dictionary of "
          f"{d_sae} directions (W_dec's rows) and writes each h as a non-negative combination of few of them: a ReLU "
          f"encoder, its activations penalised by λ = {l1:g} times their L1 norm (Bricken et al. 2023). Each true "
          "feature W_i is then looked for among the rows: its **best cosine**, and it is **recovered** at cosine ≥ "
          f"{sae_grading.RECOVERED_COSINE}. Only the features the toy represents are graded: a dropped one left "
          "nothing in h to find.")
    st.latex(r"f = \mathrm{ReLU}\big((h-b_\text{dec})W_\text{enc}+b_\text{enc}\big),\quad "
             r"\hat h = f\,W_\text{dec} + b_\text{dec},\quad "
             r"\mathcal L = \lVert h-\hat h\rVert^2 + \lambda \textstyle\sum_i f_i \lVert W_\text{dec}[i]\rVert")
    cost = sae_grading.toy_sae.estimate_mb(n_features, n_hidden, sparsity, d_sae)
    st.caption(f"Training: the toy as above, then {sae_grading.SAE_STEPS:,} Adam steps on "
               f"{sae_grading.SAMPLES:,} of its activations, graded on as many fresh ones; about {cost:.0f} MB.")
    graded = compute(sae_grading.toy_sae, n_features, n_hidden, sparsity, d_sae, "relu", 1, l1, decay, seed)
    n = len(graded.graded)
    shown = predict("d recovered", f"With {d_sae} latents and λ = {l1:g}, how many of the {n} features the "
                    f"toy represents will the dictionary recover (cosine ≥ {sae_grading.RECOVERED_COSINE})?",
                    count_options(n), [count_option(graded.grade.n_recovered, n)],
                    f"{graded.grade.n_recovered} of {n}: the features whose best cosine with a decoder row is at least "
                    f"{sae_grading.RECOVERED_COSINE}.")
    if not shown:
        return
    grade = graded.grade
    with own_slide():
        kinds = ["recovered" if r else "missed" for r in grade.recovered]
        figure("best cosines", figures.feature_bars, grade.best_cosine, kinds,
               {"recovered": "#00CC96", "missed": "#EF553B"},
               "Each true feature's best cosine with a latent's decoder row", "best cosine",
               (sae_grading.RECOVERED_COSINE, f"recovered: ≥ {sae_grading.RECOVERED_COSINE}"))
    with own_slide():
        st.markdown(f"{verdict(grade.all_recovered, 'dictionary learned', 'features missed')}: {grade.verdict}. "
                    + ("With fewer latents than represented features, some feature has no latent of its own. "
                       if d_sae < n else "")
                    + (f"With λ = {l1:g}, sparsity is cheap to give up: many latents fire at once, any basis "
                       "reconstructs h, and nothing pulls the rows onto the features. "
                       if grade.l0 >= n_hidden else ""))
        table(pd.DataFrame({"feature": graded.graded, "best cosine": np.round(grade.best_cosine, 3),
                            "its latent": grade.best_latent, "recovered": grade.recovered}),
              "features against the dictionary")
    record("features recovered", f"{grade.n_recovered} of {n}")


WHERE = {f"{name} · {hook}": (name, hook) for name, hooks in sae_residual.HOOKS.items() for hook in hooks}
WEIGHTS = ("trained", "random, same shape")
GOAL_NAMES = {"variance_explained": "variance explained", "l0": "L0", "dead_fraction": "dead latents",
              "loss_recovered": "loss recovered"}
with controls():
    left, middle, right = st.columns(3)
    with left:
        where = st.selectbox("activations", list(WHERE), index=1, key="d_where", bind="query-params",
                             help="The zoo model and the TransformerLens hook whose activations the SAE reads.")
        weights = st.radio("weights", WEIGHTS, key="d_weights", bind="query-params", horizontal=True,
                           help="Random weights of the same shape: the control, where no circuit has formed.")
    with middle:
        n_latents = st.select_slider("latents", [256, 512, 1024], 512, key="d_latents", bind="query-params")
    with right:
        active = st.select_slider("TopK: latents active per token", [4, 8, 16, 32], 16, key="d_active",
                                  bind="query-params")
    if keys.SAE_TRAINED in st.session_state:  # a widget's value can be set only before it is drawn: the next run
        st.session_state["d_sae_id"] = st.session_state.pop(keys.SAE_TRAINED)
    sae_id = st.text_input("sparse autoencoder (its id, as a link names it)", key="d_sae_id", bind="query-params",
                           max_chars=40, help="Filled in when a training ends; a link carries it to the class.")


def stored_sae() -> sae.SAE | None:
    """The SAE the link names, from the server's store, reading a model of this app's; a sentence when there is
    none."""
    if not sae_id:
        return None
    try:
        learned = STORE.sae(sae_id.strip())
        sae_residual.base_model(learned.cfg.model_name)
        return learned
    except (StoreError, CheckpointError, ValueError) as error:
        st.warning(f"{error}.", icon=":material/link_off:")
        return None


def sae_key() -> ModelChoice:
    """The stored SAE's cache key: its id in the store (its config names the model it reads)."""
    return ModelChoice("stored", sae_id.strip())


def train_job(model_name: str, hook: str) -> None:
    """Train an SAE in a worker (the Train page's queue, one per session), drawing its curves live; then keep it in
    the server's store under its id, which the page and its link then name."""
    steps = sae_residual.STEPS
    line = ProgressLine(steps)
    curves_box = st.empty()
    history = []

    def evaluated(p: sae_residual.SAEProgress) -> None:
        history.append({"step": p.step, "loss": p.loss, **p.metrics})
        line.show(p.step, f"L0 {p.metrics['l0']:.1f} · variance explained {p.metrics['variance_explained']:.3f}")
        curves_box.plotly_chart(figures.sae_curves(history), key=f"sae_curves_{p.step}")

    kwargs = {"model_name": model_name, "hook_name": hook, "d_sae": n_latents, "k": active, "seed": seed}
    owner = session_id()
    try:
        data, _ = TRAININGS.train(owner, steps, sae_residual.train_on_zoo.estimate_mb(**kwargs),
                                  sae_residual.train_on_zoo, kwargs, on_wait=line.waiting, on_start=line.started,
                                  on_progress=evaluated, on_step=line.stepped,
                                  threads=lambda: activity.training_threads(owner))
        STORE.put("sae", f"{model_name} {hook}, {n_latents} latents, k {active}", data, browser_id())
    except SessionBusy as error:
        line.empty()
        st.warning(f"Not started: {error}.")
        return
    except (ValueError, RuntimeError, CheckpointError) as error:
        line.empty()
        st.error(f"Training stopped: {error}")
        return
    st.session_state[keys.SAE_TRAINED] = short_id(data)
    st.rerun()


def own_models_part() -> None:
    zoo_name, hook = WHERE[where]
    model_name = zoo_name if weights == WEIGHTS[0] else sae_residual.RANDOM + zoo_name
    prose(f"**The same code on a real model**: an SAE of {n_latents} latents, {active} active per token, on "
          f"{model_name}'s activations at `{hook}` over windows of the built-in text. It trains in a worker, as the "
          "Train page's models do, and is graded on held-out text by the field's measures: **L0** (latents active "
          "per token), the **variance explained**, the **dead latents**, and the **loss recovered** when its "
          "reconstruction replaces the activations inside the model: (L_zero − L_SAE) / (L_zero − L_clean).")
    cost = sae_residual.train_on_zoo.estimate_mb(model_name, hook, n_latents, active)
    st.caption(f"{sae_residual.STEPS:,} steps in a worker process, about {cost:,.0f} MB; at most "
               f"{TRAININGS.limit()} trainings at once on this server, {TRAININGS.running()} running now.")
    if st.button("Train a sparse autoencoder", type="primary", icon=":material/play_arrow:"):
        train_job(model_name, hook)
    learned = stored_sae()
    if learned is None:
        return
    report = compute(sae_residual.evaluate, learned, key=sae_key())
    goals = sae_residual.GOALS
    with own_slide():
        st.markdown(f"**{literal(sae_id)}**: {learned.cfg.d_sae} latents, TopK {learned.cfg.k}, on "
                    f"{learned.cfg.model_name}'s `{learned.cfg.hook_name}`, graded on {report.activations:,} held-out "
                    "activations.")
        columns = st.columns(4)
        metric(columns[0], "L0 (latents per token)", f"{report.l0:.1f}", f"goal ≤ {goals['l0']:g}")
        metric(columns[1], "variance explained", f"{report.variance_explained:.3f}",
               f"goal ≥ {goals['variance_explained']:g}")
        metric(columns[2], "dead latents", f"{report.dead_fraction:.1%}", f"goal ≤ {goals['dead_fraction']:.0%}")
        metric(columns[3], "loss recovered", f"{report.loss_recovered:.1%}", f"goal ≥ {goals['loss_recovered']:.0%}")
        st.markdown(f"Next-token loss: clean **{report.loss_clean:.3f}**, with the SAE spliced in "
                    f"**{report.loss_sae:.3f}**, with the activations zeroed **{report.loss_zero:.3f}** nats per "
                    "token. " + " · ".join(f"{GOAL_NAMES[name]} {verdict(met, 'goal met', 'goal missed')}"
                                          for name, met in report.verdicts.items()))
    record("loss recovered", f"{report.loss_recovered:.3f}")
    record("variance explained", f"{report.variance_explained:.3f}")


def browser_part() -> None:
    learned = stored_sae()
    if learned is None:
        st.info("Train a sparse autoencoder above, or open a link that names one, to browse its latents.",
                icon=":material/arrow_upward:")
        return
    _, tokenizer = sae_residual.base_model(learned.cfg.model_name)
    found = compute(latents.induction_latents, learned, seed, key=sae_key())
    prose("**Induction features.** On repeated random sequences the second copy's tokens are the first's, so a "
          "latent that fires far more on them in the second copy answers \"this token came earlier\", not the token "
          "itself: the induction heads' output, read as a feature. Counted where its mean activation in the second "
          f"copy is at least {latents.INDUCTION_RATIO:g} × the first copy's and it fires on at least "
          f"{latents.INDUCTION_FIRING:.0%} of the second copy's positions.")
    answer = "yes" if found.count else "no"
    shown = predict("d induction", f"Do some of the {learned.cfg.d_sae} latents of this SAE (on "
                    f"{learned.cfg.model_name}'s `{learned.cfg.hook_name}`) fire on a repeated token's second copy "
                    "and not its first?", ["yes", "no"], [answer],
                    f"{found.count} latent(s) pass the rule on {latents.INDUCTION_BATCH} sequences of "
                    f"{found.length} tokens repeated.")
    ratio = found.second_mean / np.maximum(found.first_mean, 1e-9)
    default = found.found[0] if found.found else int(np.argmax(found.second_mean))
    with controls():
        latent = slider("latent", 0, learned.cfg.d_sae - 1, default, "d_latent")
    if not shown:
        return
    with own_slide():
        st.markdown(verdict(bool(found.count), f"{found.count} induction latent(s)", "no induction latent")
                    + (f": {', '.join(map(str, found.found[:12]))}" if found.count else "")
                    + f". Latent {default}, the page's first pick, fires {ratio[default]:.1f} × as much in the second "
                    "copy as in the first. An SAE trained alike on a random model of the same shape (weights: random, "
                    "above) is the control: no induction head there to write the feature.")
    view = compute(latents.browse, learned, latent, key=sae_key())
    labels = [(data.token_labels(tokenizer, c.ids), c.activations, c.peak) for c in view.contexts]
    with own_slide():
        st.markdown(f"**Latent {latent}** fires on {view.frequency:.2%} of the held-out text's tokens. Its top "
                    f"{len(view.contexts)} contexts, each token shaded by the latent's activation on it (the top "
                    "token outlined):")
        if labels:
            shaded_lines(labels, float(max(c.activations.max() for c in view.contexts)))
        else:
            st.caption("It fires nowhere on the held-out text: a dead latent.")
    left, right = beside(2)
    with left:
        words = data.token_labels(tokenizer, view.promoted + view.suppressed[::-1])
        figure("latent logit effect", figures.ranked_bars,
               np.concatenate([view.promoted_logits, view.suppressed_logits[::-1]]), words,
               f"What latent {latent} writes, read straight out through W_U", "logit change per unit activation",
               "token")
    with right:
        figure("heads along the latent", figures.ranked_bars, view.head_writes, view.heads,
               f"Which heads write along latent {latent} where it fires",
               "mean head output · decoder direction", "head")
    st.markdown(f"Where latent {latent} fires, **{view.top_head}** writes most along its direction "
                f"({view.head_writes.max():+.2f} on average, of the heads up to the SAE's layer).")
    record("induction latents", str(found.count))
    record("latent browsed", str(latent))


show([("Superposition", superposition_part),
      ("A dictionary graded by the truth", graded_part),
      ("Features of our own models", own_models_part),
      ("A latent browser", browser_part)])

with st.expander("Under the hood"):
    st.markdown("`mechlib.sae`: the sparse autoencoder and its training step.")
    st.code(source(sae.SAE.encode, sae.SAE.loss))
