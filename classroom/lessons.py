"""The lesson path: which reading each step follows, which pages it opens, and its minutes in a
50-minute class and in a two-hour lab. Plain data for the start page, beside the app rather than in mechlib
(it names the app's pages); tests check that the minutes add up and that every page named exists."""

from dataclasses import dataclass

from classroom.pages import (CIRCUITS_ONE, CIRCUITS_TWO, CIRCUITS_ZERO, DICTIONARY, EQUIVALENCE, LSTM, PATTERNS,
                             PHASE_CHANGE, RESIDUAL, TRAIN, WHICH_INPUT)

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
    pages: tuple[str, ...]      # the app pages it opens, as st.page_link takes them, in the order Next walks them;
                                # the step's link opens the first
    class_minutes: int          # 0: left to the lab
    lab_minutes: int
    activity: str               # what the class does, in one sentence


STEPS = (
    Step("Multi-head attention as a sum", ("000", "001"), (EQUIVALENCE.file,), 10, 15,
         "Predict whether concat-then-project and the per-head sum differ in float32, then split one output "
         "element into its per-head partial sums."),
    Step("Patterns and messages", ("002",), (PATTERNS.file,), 10, 15,
         "Predict where a position looks and the rank of W_OV; check that only the products W_QK and W_OV matter."),
    Step("The residual stream", ("002", "003"), (RESIDUAL.file,), 10, 15,
         "Read the ledger that adds up to the final residual, then the logit lens and direct logit attribution."),
    Step("Zero- and one-layer circuits", ("003",), (CIRCUITS_ZERO.file, CIRCUITS_ONE.file), 5, 10,
         "The bigram table W_E W_U; skip-trigrams and copying heads from their OV eigenvalues."),
    Step("Two-layer circuits: composition and induction", ("003",), (CIRCUITS_TWO.file,), 10, 15,
         "Find the previous-token head, predict which head an ablation breaks, read K-composition."),
    Step("Induction heads forming", ("003",), (PHASE_CHANGE.file,), 5, 10,
         "Scrub through training checkpoints to the phase change; then train one live on the Train page."),
    Step("Which input, or which mechanism?", ("000", "003"), (WHICH_INPUT.file,), 0, 10,
         "Share one prediction out among the heads by Shapley values, then among the tokens by SHAP and LIME, and "
         "set each beside what the circuit does: direct logit attribution, path patching, the induction head's "
         "attention."),
    Step("Dictionary learning", ("003",), (DICTIONARY.file,), 0, 10,
         "Predict how many features a toy model squeezes into two dimensions, grade a sparse autoencoder against "
         "its true features, then train one on a zoo model's residual stream and browse its latents."),
    Step("Train one yourself", ("003",), (TRAIN.file,), 0, 10,
         "Each group trains the induction preset and shares its link with the class."),
    Step("The LSTM analogy", ("002",), (LSTM.file,), 0, 10,
         "Cell state beside residual stream, gates beside patterns and messages, and the test that separates them."),
)

ROUTE = tuple(page for step in STEPS for page in step.pages)  # every page of the lesson, in order
