"""The lesson path: which reading each step follows, which page and section it opens, and its minutes in a
50-minute class and in a two-hour lab. Plain data for the start page, beside the app rather than in mechlib
(it names the app's pages); tests check that the minutes add up and that every page named exists."""

from dataclasses import dataclass

from classroom.pages import CIRCUITS, CIRCUITS_PART, EQUIVALENCE, LSTM, PATTERNS, RESIDUAL, TRAIN

READINGS = {
    "000": "Transformers (and attention) are just fancy addition machines",
    "001": "Transformers and attention mechanisms can be viewed as additive processes (a summary of 000)",
    "002": "Mechanistic view of transformers: patterns, messages, residual stream… and LSTMs",
    "003": "A Mathematical Framework for Transformer Circuits (Elhage et al. 2021), notes",
}
CLASS_MINUTES, LAB_MINUTES = 50, 120


@dataclass(frozen=True)
class Step:
    topic: str
    readings: tuple[str, ...]   # keys of READINGS
    page: str                   # the app page, as st.page_link takes it
    stops: tuple[dict[str, str], ...]  # the page's settings at each stop of this step, in the order Next walks them
                                       # (the Circuits page's section); the step's link opens the first
    class_minutes: int          # 0: left to the lab
    lab_minutes: int
    activity: str               # what the class does, in one sentence


STEPS = (
    Step("Multi-head attention as a sum", ("000", "001"), EQUIVALENCE.file, ({},), 10, 20,
         "Predict whether concat-then-project and the per-head sum differ in float32, then split one output "
         "element into its per-head partial sums."),
    Step("Patterns and messages", ("002",), PATTERNS.file, ({},), 10, 20,
         "Predict where a position looks and the rank of W_OV; check that only the products W_QK and W_OV matter."),
    Step("The residual stream", ("002", "003"), RESIDUAL.file, ({},), 10, 20,
         "Read the ledger that adds up to the final residual, then the logit lens and direct logit attribution."),
    Step("Zero- and one-layer circuits", ("003",), CIRCUITS.file,
         ({CIRCUITS_PART: "zero layers"}, {CIRCUITS_PART: "one layer"}), 5, 15,
         "The bigram table W_E W_U; skip-trigrams and copying heads from their OV eigenvalues."),
    Step("Two-layer circuits: composition and induction", ("003",), CIRCUITS.file,
         ({CIRCUITS_PART: "two layers"},), 10, 15,
         "Find the previous-token head, predict which head an ablation breaks, read K-composition."),
    Step("Induction heads forming", ("003",), CIRCUITS.file, ({CIRCUITS_PART: "the phase change"},), 5, 10,
         "Scrub through training checkpoints to the phase change; then train one live on the Train page."),
    Step("Train one yourself", ("003",), TRAIN.file, ({},), 0, 10,
         "Each group trains the induction preset and shares its link with the class."),
    Step("The LSTM analogy", ("002",), LSTM.file, ({},), 0, 10,
         "Cell state beside residual stream, gates beside patterns and messages, and the test that separates them."),
)

ROUTE = tuple((step.page, stop) for step in STEPS for stop in step.stops)  # every stop of the lesson, in order


def stop_at(page: str, settings: dict) -> int | None:
    """The index in ROUTE of the stop on ``page`` whose settings ``settings`` (the session's values) hold, or None."""
    return next((i for i, (stop_page, stop) in enumerate(ROUTE)
                 if stop_page == page and all(settings.get(key) == value for key, value in stop.items())), None)
