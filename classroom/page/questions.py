"""Questions a student answers before the live result reveals the answer: predict-then-reveal, predict-then-run and
exercises, each graded by the rule its reveal states, its evidence drawn only once revealed (or in reading mode)."""

from collections.abc import Collection

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from classroom import keys, pages
from classroom.live import membership, room_questions
from classroom.live.rooms import Question
from classroom.page import part, run, slides
from classroom.page.slides import presenting, reading


def _question_box() -> tuple[DeltaGenerator, bool]:
    """A bordered box for a question, in the part's place for questions: before the evidence that answers it, and
    whether it stays on screen (``slides.on_screen``). In presentation mode it is a slide of its own, with its answer
    once revealed; the evidence follows on the next slides. Reading mode folds it, since the evidence is drawn
    anyway."""
    where = run.current().questions or st.container()
    if reading():
        return where.expander("Predict, then reveal", icon=":material/quiz:"), True
    if presenting():
        where = slides.place(where)
    return where.container(border=True), slides.on_screen(where)


def _asked(key: str, question: str, options: list[str]) -> bool:
    """Whether the question ``key`` is revealed; a new question under that key (other settings, another model)
    starts unrevealed and unanswered, so its evidence is hidden again and an earlier guess is not graded on it."""
    asked = (question, tuple(options))
    if st.session_state.get(keys.asked(key)) != asked:
        st.session_state[keys.asked(key)] = asked
        st.session_state[keys.reveal(key)] = False
        for guess in (keys.guess(key), keys.predict(key), keys.exercise(key)):
            st.session_state.pop(guess, None)
    return st.session_state[keys.reveal(key)]


def _reveal_button(key: str, label: str) -> bool:
    """The teacher's Reveal, as visible as the question; once revealed, a quiet button hides the answer again."""
    def flip(to: bool) -> None:
        st.session_state[keys.reveal(key)] = to

    revealed = st.session_state[keys.reveal(key)]
    st.button("Hide the answer" if revealed else label, key=f"reveal button {key}", on_click=flip, args=(not revealed,),
              type="tertiary" if revealed else "primary", icon=None if revealed else ":material/visibility:")
    return revealed


def predict(key: str, question: str, options: list[str], accepted: Collection[str], why: str) -> bool:
    """Predict, then reveal. ``accepted`` is the set of options that the rule the reveal states computes on this
    run (every head the ablation breaks, the bin holding the value), so the grading follows the model and the
    sizes. Returns whether the evidence that answers the question may be drawn: once it is revealed, or at once in
    reading mode (the question folded above it). In a live class the teacher's slide asks the room and reveals it on
    every screen (``live``)."""
    assert accepted and set(accepted) <= set(options), (accepted, options)
    revealed = _asked(key, question, options)
    box, shown = _question_box()
    if (asked := room_questions.room_question(key, question, options, accepted, _where(), shown)) is not None:
        return _room_question(box, shown, asked, "Predict, then reveal.", "your prediction", why) or reading()
    with box:
        st.markdown(f"**Predict, then reveal.** {question}")
        kept = st.session_state.get(keys.guess(key))
        if revealed and presenting():  # a revealed slide keeps its room for the evidence: the options fold away
            guess = kept if kept in options else None
        else:
            guess = st.radio("your prediction", options, options.index(kept) if kept in options else None,
                             key=keys.predict(key), horizontal=True)
            st.session_state[keys.guess(key)] = guess
        if _reveal_button(key, "Reveal the answer"):
            st.markdown(answer_line(guess, accepted, why))
            revealed = True
    return revealed or reading()


def _where() -> str:
    """The page and part a question is asked in, for the class's export: "The residual stream · Logit lens"."""
    collected = part.current()
    return " · ".join(filter(None, [pages.at(membership.room().page).title,
                                    collected and collected.title]))


def _room_question(box: DeltaGenerator, shown: bool, asked: Question, kind: str, label: str, why: str) -> bool:
    """A question the room asked, in ``box``: the teacher sees its options and how many answered while it is open
    (counted live only where the box stays on screen, ``shown``), then the class's answers beside the computed
    answer set, and reveals or reopens it for everyone; a student answers once (a new answer replaces the old) and
    sees the reveal when the teacher reveals it, graded by the question's own rule. Returns whether it is revealed."""
    with box:
        st.markdown(f"**{kind}** {asked.text}")
        if membership.leading():
            if asked.revealed:
                _class_answers(asked)
                st.markdown(answer_line(None, asked.accepted, why))
            else:
                st.markdown("The class chooses from " + " ".join(f"`{option}`" for option in asked.options))
                if shown:
                    _answered(asked.qid)
            st.button("Reopen the question" if asked.revealed else "Reveal to the class", key=f"room reveal {asked.qid}",
                      on_click=room_questions.reveal, args=(asked.qid, not asked.revealed),
                      type="tertiary" if asked.revealed else "primary",
                      icon=None if asked.revealed else ":material/visibility:")
            return asked.revealed
        mine = room_questions.my_answer(asked.qid)
        if asked.revealed:
            st.markdown(f"Your answer: **{mine or 'none given'}**")
            st.markdown(answer_line(mine, asked.accepted, why))
        else:
            guess = st.radio(label, asked.options, asked.options.index(mine) if mine in asked.options else None,
                             key=f"room answer {asked.qid}", horizontal=True)
            if guess != mine:
                room_questions.answer(asked.qid, guess)
            st.caption("Your answer goes to the class; the teacher reveals the answer on every screen.")
    return asked.revealed


@st.fragment(run_every=2.0)
def _answered(qid: str) -> None:
    """While the question is open, on the teacher's slide: how many have answered, not what."""
    connected, _ = room_questions.presence()
    st.markdown(f"**{sum(room_questions.tally(qid).values())}** of {connected} students connected have answered")


def _class_answers(asked: Question) -> None:
    """The class's answers, counted once per student, beside the options the computed rule accepts: a bar each on a
    page; on a slide, which has the screen's height only, one line."""
    counts = room_questions.tally(asked.qid)
    total = sum(counts.values()) or 1
    if presenting():
        st.markdown(f"The class's answers ({sum(counts.values())}): " + " · ".join(
            f"`{option}` **{count}**{' ✓' if option in asked.accepted else ''}" for option, count in counts.items()))
        return
    for option, count in counts.items():
        mark = " ✓ (the computed answer)" if option in asked.accepted else ""
        st.progress(count / total, text=f"**{option}**: {count} ({100 * count / total:.0f} %){mark}")


def answer_line(guess: str | None, accepted: Collection[str], why: str) -> str:
    """The revealed answer: every accepted option, the student's guess graded against them, and the reason."""
    mark = ("" if guess is None else " :green[**✓ as you predicted**]" if guess in accepted
            else " :red[**✗ not what you predicted**]")
    return f"This run: **{', '.join(accepted)}**{mark}. {why}"


def ask(key: str, question: str, options: list[str]) -> str | None:
    """A prediction asked before the run that answers it (the Train page's): the guess, for ``answer_line`` once
    the run is done."""
    with _question_box()[0]:
        st.markdown(f"**Predict, then run.** {question}")
        return st.radio("your prediction", options, index=None, key=keys.predict(key), horizontal=True)


def exercise(key: str, task: str, options: list[str], correct: Collection[str], why: str) -> bool:
    """An exercise with a checked answer: ``correct`` is computed from the live model, so the check follows it.
    Returns whether the evidence that answers it may be drawn: once the answer is shown, or in reading mode. In a
    live class it is the room's, as ``predict``'s questions are."""
    revealed = _asked(key, task, options)
    box, shown = _question_box()
    if correct and (asked := room_questions.room_question(key, task, options, correct, _where(), shown)) is not None:
        return _room_question(box, shown, asked, "Exercise.", "your answer", why) or reading()
    with box:
        st.markdown(f"**Exercise.** {task}")
        answer = st.selectbox("your answer", options, index=None, key=keys.exercise(key), placeholder="choose…")
        if answer is not None:
            st.markdown(":green[**✓ right**]" if answer in correct else ":red[**✗ not this one: try again**]")
        if _reveal_button(key, "Show the answer"):
            st.markdown(f"**{', '.join(correct) or 'none here'}**. {why}")
            revealed = True
    return revealed or reading()
