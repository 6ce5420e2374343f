"""Circuits: the phase change (Olsson et al. 2022), in which induction heads form during training."""

import numpy as np
import pandas as pd
import streamlit as st

from classroom import keys
from classroom.experiments import compute
from classroom.page.attention_text import attention_text
from classroom.page.part import derived
from classroom.page.layout import figure, prose, show, table
from classroom.page.questions import predict
from classroom.page.widgets import select_slider
from mechlib import checks, data, figures, induction, zoo

PHASE_MODEL = "attn-only-2l"  # the zoo model whose training snapshots ship
JUMP_RANGES = 5  # the question's options: the checkpoints cut into this many ranges of steps

st.title("Circuits: the phase change")
prose("The zoo's two-layer model was saved during its training. This page scores every checkpoint: the "
      "induction heads form suddenly, and in the same steps the context starts to help the loss.")
seed = st.session_state[keys.SEED]

steps = zoo.snapshot_steps(PHASE_MODEL)


def training() -> None:
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
    marked = st.session_state.get(keys.PHASE_STEP, steps[-1])  # the next part's slider
    figure("training curves", figures.training_curves, derived(zoo.history, PHASE_MODEL), marked)
    st.markdown(f"No checkpoint has an induction head (best score ≥ {checks.INDUCTION_MIN})." if every.formed_at is None
                else f"An induction head (best score ≥ {checks.INDUCTION_MIN}) first appears at step "
                     f"**{every.formed_at:,}**.")
    table(pd.DataFrame({"step": every.steps, "best induction score": [round(s, 3) for s in every.induction],
                        "in-context-learning score (nats)": [round(s, 2) for s in every.icl]}),
          "scores per checkpoint", height=240)


def at_step() -> None:
    step = select_slider("training step", steps, steps[-1], key=keys.PHASE_STEP)
    every, snap = compute(induction.phase_change, PHASE_MODEL), compute(induction.snapshot_at, PHASE_MODEL, step, seed)
    (prev_head, prev_score), (ind_head, ind_score) = snap.best_previous, snap.best_induction
    st.markdown(f"At step {step:,}: best previous-token score **{prev_score:.2f}** ({prev_head}), best induction "
                f"score **{ind_score:.2f}** ({ind_head}), in-context-learning score "
                f"**{every.icl[every.steps.index(step)]:+.2f} nats**.")
    prose("The in-context-learning score is the loss at the last position minus the loss a tenth of the way in, on "
          "repeated sequences: negative when the context helps.")
    title = f"Every head at step {step:,}"
    figure("patterns at this step", figures.patterns_grid, snap.patterns, title)
    attention_text("The same patterns on the sequence's tokens: point at (or tap) a token of the second copy.",
                   snap.patterns, data.token_labels(zoo.load(PHASE_MODEL).tokenizer, snap.example), ind_head,
                   len(snap.example) - 1, key="hover step")


show([(f"The phase change: when induction heads form in {PHASE_MODEL}", training),
      ("Every head at one step", at_step)])
