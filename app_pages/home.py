"""The start page: what the lab teaches and how it differs from feature attribution, the lesson path with
minutes for a 50-minute class and a two-hour lab, one link per page, and what model each page runs."""

import streamlit as st

from classroom import lessons, pages
from classroom.live import join_card
from classroom.page.layout import prose
from classroom.page.slides import presenting


def lesson_path(minutes: bool = True) -> None:
    """Each step as a link that opens its page at its first stop, with its ``minutes`` and what the class does."""
    for number, step in enumerate(lessons.STEPS, 1):
        spent = f"{step.class_minutes} min in class" if step.class_minutes else "lab only"
        st.page_link(step.pages[0], icon=":material/arrow_forward:", label=f"Step {number}: {step.topic}"
                     + (f" ({spent}, {step.lab_minutes} min in the lab)" if minutes else ""))
        if not presenting():
            st.caption(f"{step.activity} Reading: "
                       + "; ".join(f"*{lessons.READINGS[key]}*" for key in step.readings) + ".")


st.title("Addition Machines")
if presenting():  # the title slide: the lesson's steps on the first screen; Next opens the first
    st.markdown(f"**Transformer circuits, computed live.** A {lessons.CLASS_MINUTES}-minute class in "
                f"{len(lessons.STEPS)} steps; **Next** walks every slide of every step.")
    if join_card.showing_join():  # a live class: how to join, in a column of the slide's own; the steps without minutes
        steps, card = st.columns([3, 2], gap="large")
        with steps:
            lesson_path(minutes=False)
        with card:
            join_card.join_card(qr_px=220, beside=False)
    else:
        lesson_path()
else:
    prose(
        "A lab for the mathematical framework of transformer circuits. Every page runs a real model on this server "
        "and checks its claims on screen: a green mark is a check that came out true here, on the model named beside "
        "each page below, and would show red if it did not."
    )

    st.subheader("A lesson path")
    prose(f"Each step opens its page at the right section. The {lessons.CLASS_MINUTES}-minute class keeps to the core; "
          f"the {lessons.LAB_MINUTES}-minute lab adds Shapley values against the circuit, training and the LSTM analogy. Turn on **Present** (top of every "
          "page) to show one slide per screen: **Next** then walks every slide of the lesson, page after page. Questions "
          "hide their evidence until **Reveal**; **Reading mode** shows everything at once for studying alone. Every "
          "page has **Copy link to this view** for the class to follow.")
    lesson_path()
    st.caption("Readings: " + "; ".join(f"**{key}** {title}" for key, title in lessons.READINGS.items()) + ".")

    st.subheader("Which feature, or which mechanism?")
    prose(
        "Feature-attribution methods such as **SHAP** (Shapley values: each input feature's fair share of one "
        "prediction) and **LIME** (a simple surrogate model fitted around one input) treat the network as a black "
        "box and answer *which input mattered most?*. Mechanistic interpretability opens the box and asks *which "
        "internal component computes what, and how?*: which head moves which information, which matrix decides "
        "where it looks, which two heads compose into an algorithm. The pages below take that second question "
        "literally: attention is a sum of per-head terms, each head a pattern times messages, the residual stream "
        "a ledger those terms add to, and a few heads together a circuit you can find, ablate and watch form. One "
        "page asks both questions of one prediction, with the same tool: Shapley values over the heads, then over "
        "the tokens."
    )
    st.page_link(pages.WHICH_INPUT.file, icon=":material/arrow_forward:")

    st.subheader("The pages")
    group = ""
    for page in pages.PAGES[1:]:
        if page.group != group:
            group = page.group
            st.markdown(f"**{group}**")
        st.page_link(page.file)
        st.caption(f"{page.teaches}. {page.runs_on}")
