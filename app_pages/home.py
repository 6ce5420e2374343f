"""The start page: what the lab teaches, one link per page, each at its own URL path."""

import streamlit as st

st.title("Addition Machines")
st.markdown(
    "A lab for the mathematical framework of transformer circuits. Every page runs a real model on this server "
    "and checks its claims on screen: a green mark is a check that came out true here, on the model you chose, "
    "and would show red if it did not."
)
for page, what in [
    ("app_pages/equivalence.py", "multi-head attention's concat-then-project is a sum of per-head terms"),
    ("app_pages/patterns.py", "a head is a pattern (W_QK: where to look) times messages (W_OV: what moves)"),
    ("app_pages/residual.py", "every component reads the residual stream and adds to it; the logit lens and direct logit attribution"),
    ("app_pages/circuits.py", "zero-, one- and two-layer circuits, induction heads and how they form in training"),
    ("app_pages/lstm.py", "the LSTM analogy: cell state and residual stream, gates and patterns, and where it breaks"),
    ("app_pages/train.py", "train a small transformer here and study it on the other pages"),
]:
    st.page_link(page)
    st.caption(what)
