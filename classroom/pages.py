"""Every page of the app, once: its file, title, icon and URL path, and what it teaches and runs on. Navigation
(``app.py``), the start page, the lesson path and every page link read it; so do the URL keys one page sets on
another (which model a Circuits page reads)."""

from dataclasses import dataclass

from mechlib import analogy, copying


@dataclass(frozen=True)
class Page:
    file: str      # as st.Page and st.page_link take it
    title: str
    icon: str
    url_path: str  # the page's own path in the address; "" for the start page, at /
    teaches: str   # the start page's line on it
    runs_on: str   # which model it computes on
    group: str = ""  # the navigation's heading above it; "" for none


SIDEBAR = "Runs on the model chosen in the sidebar."

HOME = Page("app_pages/home.py", "Start here", ":material/home:", "", "", "")
EQUIVALENCE = Page(
    "app_pages/equivalence.py", "Equivalence: heads add up", ":material/functions:", "equivalence",
    "multi-head attention's concat-then-project is a sum of per-head terms",
    "Runs on its own random attention layer, sized by the page's sliders and drawn from the sidebar's seed; the "
    "sidebar's model is not used.")
PATTERNS = Page(
    "app_pages/patterns.py", "Patterns and messages", ":material/grid_on:", "patterns",
    "a head is a pattern (W_QK: where to look) times messages (W_OV: what moves)", SIDEBAR)
RESIDUAL = Page(
    "app_pages/residual.py", "The residual stream", ":material/stacked_line_chart:", "residual",
    "every component reads the residual stream and adds to it; the logit lens and direct logit attribution", SIDEBAR)
CIRCUITS_RUN_ON = "Runs on the zoo model it names, or on the sidebar's model where it fits."
CIRCUITS_ZERO = Page(
    "app_pages/circuits_zero.py", "Zero layers", ":material/table_chart:", "circuits-zero",
    "zero-layer circuits: W_E W_U is a bigram table, beside the corpus's", CIRCUITS_RUN_ON, "Circuits")
CIRCUITS_ONE = Page(
    "app_pages/circuits_one.py", "One layer", ":material/call_split:", "circuits-one",
    "one-layer circuits: a head's QK and OV circuits, skip-trigrams and copying", CIRCUITS_RUN_ON, "Circuits")
CIRCUITS_TWO = Page(
    "app_pages/circuits_two.py", "Two layers", ":material/account_tree:", "circuits-two",
    "two-layer circuits: composition, virtual heads, and the induction circuit with the ablation that proves it",
    CIRCUITS_RUN_ON, "Circuits")
PHASE_CHANGE = Page(
    "app_pages/circuits_phase.py", "The phase change", ":material/trending_up:", "phase-change",
    "the phase change: induction heads forming during training, checkpoint by checkpoint",
    "Runs on the training checkpoints of the zoo's `attn-only-2l`; the sidebar's model is not used.", "Circuits")
WHICH_INPUT = Page(
    "app_pages/which_input.py", "Which input, or which mechanism?", ":material/balance:", "which-input",
    "Shapley values over heads beside direct logit attribution and path patching, SHAP and LIME over tokens beside "
    "the induction head's attention, and a convolution's channels as the heads of W_O",
    "Runs on the zoo's `attn-only-2l` on a repeated random sequence from the sidebar's seed, or on the sidebar's "
    "model where it fits.", "Compare and train")
DICTIONARY = Page(
    "app_pages/dictionary.py", "Dictionary learning", ":material/dictionary:", "dictionary",
    "features in superposition, a sparse autoencoder graded by the toy's true features, then sparse autoencoders on "
    "the zoo's residual streams and neurons, with a latent browser",
    "Runs on its own toy model of superposition, then on the zoo's `attn-only-2l` and `gelu-2l` (and random models "
    "of their shapes); the sidebar's model is not used.", "Compare and train")
LSTM = Page(
    "app_pages/lstm.py", "The LSTM analogy", ":material/memory_alt:", "lstm",
    "the LSTM analogy: cell state and residual stream, gates and patterns, and where it breaks",
    f"Runs on two zoo models trained on the same data, `{analogy.RNN}` and `{analogy.TRANSFORMER}`, and on the "
    f"copying task's {', '.join(f'`{name}`' for name in copying.CONTROLS.values())}; the sidebar's model is not used.",
    "Compare and train")
TRAIN = Page(
    "app_pages/train.py", "Train a model", ":material/model_training:", "train",
    "train a small transformer here and study it on the other pages",
    "Trains a new model, one click for an induction head drawn as it forms; its link works for the whole class.",
    "Compare and train")

PAGES = (HOME, EQUIVALENCE, PATTERNS, RESIDUAL, CIRCUITS_ZERO, CIRCUITS_ONE, CIRCUITS_TWO, PHASE_CHANGE, WHICH_INPUT,
         DICTIONARY, LSTM, TRAIN)  # in the navigation's order, each group's pages together

def at(url_path: str) -> Page:
    """The page at ``url_path`` (its path in the address, "" for the start page)."""
    return next(page for page in PAGES if page.url_path == url_path)


SIDEBARS_MODEL = "the sidebar's model"  # a Circuits page's model choice, beside its zoo model


def circuits_model_key(zoo_name: str) -> str:
    """The URL key of the Circuits page that reads the zoo model ``zoo_name`` by default: which model it reads."""
    return f"c_model_{zoo_name}"
