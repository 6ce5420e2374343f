"""What every page shares with the app shell: URL-bound widgets, and the first-request guard."""

import streamlit as st
import torch
from streamlit.runtime.pages_manager import PagesManager

from mechlib import zoo
from mechlib.config import ModelConfig
from mechlib.equivalence import TOLERANCE
from mechlib.model import Transformer


def require_shell() -> None:
    """Make sure app.py (sidebar, navigation) ran before this page in this run; call first on every page.

    Because a pages/ folder exists, Streamlit 1.67 can run a page file alone in its legacy multipage
    mode: on a fresh server's first request, and on every AppTest rerun. app.py leaves a mark just
    before it runs the page; without it, switch that mode off (as st.navigation itself does) and
    rerun, so app.py runs first.
    """
    if not st.session_state.pop("shell_ran", False):
        PagesManager.uses_pages_directory = False
        st.rerun()


def slider(label: str, low: int, high: int, default: int, key: str, step: int = 1) -> int:
    """An int slider bound to the URL; a remembered value outside [low, high] moves to the nearest end.
    With a single possible value there is nothing to slide: it is stated instead."""
    if low == high:
        st.caption(f"{label}: {low} (the only one)")
        return low
    if key in st.session_state:
        st.session_state[key] = min(max(st.session_state[key], low), high)
        return st.slider(label, low, high, step=step, key=key, bind="query-params")
    return st.slider(label, low, high, default, step=step, key=key, bind="query-params")


def select_slider(label: str, options: list[int], default: int, key: str) -> int:
    """A select slider over ints bound to the URL; a remembered value no longer offered moves to the nearest option."""
    if key in st.session_state:
        current = st.session_state[key]
        st.session_state[key] = min(options, key=lambda o: (abs(o - current), o))
        return st.select_slider(label, options, key=key, bind="query-params")
    value = default if default in options else min(options, key=lambda o: abs(o - default))
    return st.select_slider(label, options, value, key=key, bind="query-params")


SESSION_MODELS = 8  # trained or uploaded models a session keeps; the oldest goes first


def add_session_model(label: str, data: bytes) -> None:
    """Add a trained or uploaded checkpoint (already validated) to this session; the sidebar selects it on
    the next run (a widget's value cannot change after it is drawn). The session keeps the bytes, so the
    model survives the server-wide cache evicting it while other students train."""
    models = st.session_state.setdefault("session_models", {})
    models.pop(label, None)
    models[label] = data
    while len(models) > SESSION_MODELS:
        models.pop(next(iter(models)))
    st.session_state["select_model"] = label


def session_model(label: str) -> Transformer:
    """This session's model ``label``: from the shared cache, or validated again from its bytes."""
    return zoo.from_checkpoint(st.session_state["session_models"][label])[1]


def verdict(passed: bool, good: str = "pass", bad: str = "FAIL") -> str:
    """A check's outcome as coloured markdown, the same on every page."""
    return f":green[**✓ {good}**]" if passed else f":red[**✗ {bad}**]"


def model_tolerance(model: Transformer) -> float:
    """The bound |a − b| ≤ tol · max(1, |ref|) for identities computed in the model's precision."""
    return TOLERANCE[str(model.embed.W_E.dtype).removeprefix("torch.")]


DEFAULT_PROMPT = "the class of an object is its type . the class of an object is"


def current_model() -> tuple[tuple, Transformer]:
    """(a plain key for caches, the shared read-only model) of the sidebar's choice."""
    choice = st.session_state.get("model_choice")
    if choice is None:
        st.error("Choose a model in the sidebar.")
        st.stop()
    if choice[0] == "zoo":
        return choice, zoo.load(choice[1])
    if choice[0] == "random":
        return choice, zoo.random_model(ModelConfig.from_json(choice[1]))
    digest, model = zoo.from_checkpoint(st.session_state["session_models"][choice[1]])
    return ("session", digest), model


def input_tokens(model: Transformer) -> tuple[tuple[int, ...], list[str]]:
    """The tokens a page studies: a typed prompt (with <bos> first, cut to the context with a notice)
    or random tokens from the sidebar's seed. Returns the ids and a readable label per position."""
    tokenizer = model.tokenizer
    kinds = ["prompt", "random tokens"] if tokenizer else ["random tokens"]
    kind = st.radio("input", kinds, key="input", bind="query-params", horizontal=True,
                    help=None if tokenizer else "This model has no tokenizer, so it reads random token ids.")
    n_ctx = model.cfg.n_ctx
    if kind == "prompt":
        text = st.text_input("prompt", DEFAULT_PROMPT, key="prompt", bind="query-params", max_chars=2000)
        ids = [0] + tokenizer.encode(text)
        if len(ids) > n_ctx:
            st.info(f"The prompt is {len(ids):,} tokens with <bos>; this model reads at most {n_ctx}, "
                    f"so only the first {n_ctx} are used.")
            ids = ids[:n_ctx]
    else:
        g = torch.Generator().manual_seed(st.session_state["seed"])
        ids = [0] + torch.randint(min(2, model.cfg.d_vocab - 1), model.cfg.d_vocab, (min(n_ctx, 24) - 1,), generator=g).tolist()
    labels = tokenizer.labels(ids) if tokenizer else [str(i) for i in ids]
    return tuple(ids), labels
