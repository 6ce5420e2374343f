"""The start page: what the lab teaches, one link per page, each at its own URL path, and what model each runs."""

import streamlit as st

from mechlib import analogy, copying

st.title("Addition Machines")
st.markdown(
    "A lab for the mathematical framework of transformer circuits. Every page runs a real model on this server "
    "and checks its claims on screen: a green mark is a check that came out true here, on the model named beside "
    "each page below, and would show red if it did not."
)
SIDEBAR = "Runs on the model chosen in the sidebar."
for page, what, runs_on in [
    ("app_pages/equivalence.py", "multi-head attention's concat-then-project is a sum of per-head terms",
     "Runs on its own random attention layer, sized by the page's sliders and drawn from the sidebar's seed; "
     "the sidebar's model is not used."),
    ("app_pages/patterns.py", "a head is a pattern (W_QK: where to look) times messages (W_OV: what moves)", SIDEBAR),
    ("app_pages/residual.py", "every component reads the residual stream and adds to it; the logit lens and direct "
     "logit attribution", SIDEBAR),
    ("app_pages/circuits.py", "zero-, one- and two-layer circuits, induction heads and how they form in training",
     "Runs on a zoo model per section, or on the sidebar's model where it fits that section."),
    ("app_pages/lstm.py", "the LSTM analogy: cell state and residual stream, gates and patterns, and where it breaks",
     f"Runs on two zoo models trained on the same data, `{analogy.RNN}` and `{analogy.TRANSFORMER}`, and on the "
     f"copying task's {', '.join(f'`{name}`' for name in copying.CONTROLS.values())}; the sidebar's model is not used."),
    ("app_pages/train.py", "train a small transformer here and study it on the other pages",
     "Trains a new model, one click for an induction head drawn as it forms; it joins the sidebar's list when done."),
]:
    st.page_link(page)
    st.caption(f"{what}. {runs_on}")
