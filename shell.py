"""What every page shares with the app shell: URL-bound widgets, this session's models, the input tokens."""

import functools
import gc
import hashlib
import importlib
import ipaddress
import math
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st

import sections
from classroom import timings
from mechlib import bigrams, data, zoo
from mechlib.checks import UNK_SHARE_MAX, Check
from mechlib.config import ModelConfig
from classroom.admission import MEMORY, BudgetError
from mechlib.device import experiment_mb
from mechlib.model import Transformer
from classroom.store import STORE, short_id


_frozen_modules = [0]  # len(sys.modules) at the last gc.freeze(), process-wide


def freeze_libraries() -> None:
    """Keep full garbage collections cheap: ``gc.freeze()`` moves every object alive now (torch, plotly, pandas
    and mechlib loaded: ~260,000 objects) to a generation collections skip. Libraries keep importing more as
    pages first use them (torch's compiler and sympy arrive with the first einops call), so this freezes again
    at the start of any run after the set of imported modules has grown: a handful of times per process."""
    if len(sys.modules) > _frozen_modules[0]:
        _frozen_modules[0] = len(sys.modules)
        gc.collect()
        gc.freeze()


GC_EVERY_S = 2.0  # the server's full garbage collections: at most one per this many seconds
_last_collection = [0.0]
_collecting = threading.Lock()


def collect_garbage() -> None:
    """A full ``gc.collect()`` at the end of a run, at most once per ``GC_EVERY_S`` across the server. Streamlit's
    own (``runner.postScriptGC``, off in .streamlit/config.toml) runs one after every run of every session with
    the GIL held: with thirty sessions' figures and export menus alive it took ~80 ms, and 55 % of the server's
    time under a class of 30 (py-spy --gil while ``bench/classroom_load`` ran). Collections are still needed: a
    plotly figure is a cycle of objects, so without them a class's garbage held 500 MB more."""
    now = time.monotonic()
    if now - _last_collection[0] < GC_EVERY_S or not _collecting.acquire(blocking=False):
        return
    try:
        _last_collection[0] = now
        gc.collect()
    finally:
        _collecting.release()


@st.cache_resource(show_spinner=False)
def warm_up() -> None:
    """Once per server process, in the background: the zero-layer section's best rank-d_model fit
    (``bigrams.best_fit_kl``, 10–20 s of CPU), so the first student to open the Circuits page reads it from the
    process's cache instead of waiting for it (a student who comes sooner waits for this thread's result)."""
    model = zoo.load("attn-only-0l")
    threading.Thread(target=bigrams.best_fit_kl, args=(model.tokenizer.to_json(), model.cfg.d_model), daemon=False,
                     name="warm-up: best bigram fit").start()  # not a daemon (script threads are): torch aborts a
                                                               # process that exits while a daemon thread is in it


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-!$~|<>:])")  # what Markdown, LaTeX ($) and Streamlit's :directives: act on


def literal(text: str) -> str:
    """User-supplied ``text`` (a file name, a session model's label, a token) shown as typed where Streamlit reads
    Markdown: a backslash before every character that bold, links, images, LaTeX or :red[…] would act on. A "."
    stays bare, so file names read as typed; alone it only numbers a list ("1. " opening a line)."""
    return _MARKDOWN.sub(r"\\\1", text)


_INVISIBLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")  # controls, bidi
QUOTE_CHARS = 80  # the most of a user's string a message quotes


def quoted(text: str) -> str:
    """A user's string (a file name, a link's value) quoted in a message: at most ``QUOTE_CHARS`` characters
    (the rest counted), control and bidirectional characters made visible as ⟨U+202E⟩ (one reversed the rest of
    its warning line), and ``literal`` for Markdown."""
    cut = text if len(text) <= QUOTE_CHARS else f"{text[:QUOTE_CHARS]}… ({len(text):,} characters)"
    return literal(_INVISIBLE.sub(lambda char: f"⟨U+{ord(char[0]):04X}⟩", cut))


def _restate(key: str, value) -> None:
    """Put a remembered widget value (``value``: moved to fit, where it no longer does) back into the session
    before its widget is drawn. A bound value reaches the URL only when it changes, and Streamlit leaves it out
    while it equals the widget's default; so when the fresh session's default moves (another model's last
    layer, another prompt's length, another model's top tokens) a value that was the default before is the
    one the link lacks. Re-stating it each run makes Streamlit write it whenever it differs from the default."""
    st.session_state[key] = value


def slider(label: str, low: int, high: int, default: int, key: str, step: int = 1) -> int:
    """An int slider bound to the URL; a remembered value outside [low, high] moves to the nearest end.
    ``default`` is what a fresh session shows, and the widget is always given it: Streamlit leaves a bound
    value out of the URL when it equals the widget's default, so a slider drawn without one (default: its
    minimum) would drop its minimum from links. With a single possible value there is nothing to slide:
    it is stated instead."""
    if low == high:
        st.caption(f"{label}: {low} (the only one)")
        return low
    if key in st.session_state:
        _restate(key, min(max(st.session_state[key], low), high))
    return st.slider(label, low, high, default, step=step, key=key, bind="query-params")


def select_slider(label: str, options: list[int], default: int, key: str) -> int:
    """A select slider over ints bound to the URL, always given the fresh session's ``default`` (see ``slider``);
    a remembered value no longer offered moves to the nearest option."""
    if key in st.session_state:
        current = st.session_state[key]
        _restate(key, min(options, key=lambda o: (abs(o - current), o)))
    value = default if default in options else min(options, key=lambda o: abs(o - default))
    return st.select_slider(label, options, value, key=key, bind="query-params")


def selectbox(label: str, options: list, key: str, format_func=str, index: int = 0):
    """A select box bound to the URL whose options change with the data (a model's tokens): the fresh session
    shows ``options[index]``; a remembered value no longer offered goes back to it (see ``_restate``)."""
    if st.session_state.get(key) is not None:  # None, an option meaning "nothing", is never re-stated: Streamlit
        _restate(key, st.session_state[key] if st.session_state[key] in options else options[index])  # reads it as unset
    return st.selectbox(label, options, index, format_func=format_func, key=key, bind="query-params")


def clean_url_ints(bounds: dict[str, tuple[int, int]]) -> None:
    """A link's whole-number parameters, checked before their widgets parse them (Streamlit's own parsing
    overflows on ``?seed=1e400`` and breaks the session): a value that is not a whole number is dropped, one
    outside [low, high] (±inf included) moves to the nearest end, and the script reruns on the corrected link
    (widgets read the link the run started with); a warning names each. A parameter whose widget already
    holds a value is the widget's own, and left alone."""
    notes = []
    for key, (low, high) in bounds.items():
        raw = st.query_params.get(key)
        if raw is None or key in st.session_state:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if math.isnan(value) or (math.isfinite(value) and value != int(value)):
            del st.query_params[key]
            notes.append(f"The link's {key} is not a whole number, so it is ignored.")
        elif not low <= value <= high:
            st.query_params[key] = str(nearest := low if value < low else high)
            notes.append(f"The link's {key} is outside {low:,}–{high:,}, so {nearest:,} is used.")
    if notes:
        st.session_state["url_notes"] = notes
        st.rerun()


def url_notes() -> None:
    """What the link asked for and did not get (a value out of range, a model that is gone, refused sizes), on
    the page above its content, where a student who opened the link reads it; once."""
    for note in st.session_state.pop("url_notes", []):
        st.warning(note, icon=":material/link_off:")


SESSION_MODELS = 8  # trained or uploaded models a session lists; the oldest goes first


def session_id() -> str:
    """This session, to the server's shared things: its place in the training queue, its share of the store."""
    return st.session_state.setdefault("session_id", uuid.uuid4().hex)


def browser_id() -> str:
    """This browser, to the store's share: its tabs share the token inside Streamlit's XSRF cookie, so ten tabs
    get one share, not ten. A client without it (a script, a test harness) is its session."""
    token = _xsrf_token(st.context.cookies.get("_streamlit_xsrf"))
    return "browser " + hashlib.sha256(token).hexdigest()[:20] if token else "session " + session_id()


def _xsrf_token(cookie: object) -> bytes | None:
    """The browser's token in the XSRF cookie, "2|mask|masked token|time" (Tornado's format; the mask is new on
    every page load, the token is the browser's), or None."""
    parts = cookie.split("|") if isinstance(cookie, str) else []
    try:
        mask, masked = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
    except (IndexError, ValueError):
        return None
    if parts[0] != "2" or not mask:
        return None
    return bytes(byte ^ mask[i % len(mask)] for i, byte in enumerate(masked))


def teacher() -> bool:
    """A browser on the server's own machine: the teacher's, who started the server, and may pin models for a
    lesson (students reach the server over the network)."""
    ip = st.context.ip_address
    if ip is None:  # Streamlit's word for a browser on localhost
        return bool(st.context.headers)
    if not isinstance(ip, str):  # a test harness's stand-in: no browser, no teacher
        return False
    address = ipaddress.ip_address(ip)  # "::ffff:127.0.0.1" from a dual-stack socket
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def add_session_model(kind: str, name: str, data: bytes, pin: bool = False) -> str:
    """Keep a trained or uploaded checkpoint in the server's store under a short id (validated there; raises
    ``CheckpointError``), so a link to it works in any session until it expires, and list it in this session;
    the sidebar selects it on the next run (a widget's value cannot change after it is drawn). The session
    keeps the bytes as well, so its own models survive the store and the model cache evicting them.
    Returns the model's label, "trained k3q7m2xa4rbt5wzd: <name>": links need only its kind and id, and a
    session that opens one without a name (``name=""``) lists the model under the label it was first stored
    with. ``pin`` keeps it in the store while the server runs (the preset's result: the lesson's links name it)."""
    stored = STORE.put(kind, name, data, browser_id())
    if pin:
        STORE.pin(short_id(data))
    label = f"{kind} {short_id(data)}: {name}" if name else stored.label
    models = st.session_state.setdefault("session_models", {})
    models.pop(label, None)
    models[label] = data
    while len(models) > SESSION_MODELS:
        models.pop(next(iter(models)))
    st.session_state["select_model"] = label
    return label


def session_model(label: str) -> Transformer:
    """This session's model ``label``: from the shared cache, or validated again from its bytes."""
    return zoo.from_checkpoint(st.session_state["session_models"][label])[1]


def verdict(passed: bool, good: str = "pass", bad: str = "FAIL") -> str:
    """A check's outcome as coloured markdown, the same on every page."""
    return f":green[**✓ {good}**]" if passed else f":red[**✗ {bad}**]"


def check_line(what: str, check: Check) -> str:
    """An identity check as one markdown line, the same on every page: what was compared, the largest |a − b|,
    the scaled difference against its tolerance, and the verdict."""
    sections.record(what, f"max |difference| {check.max_abs_diff:.3e}, scaled {check.max_scaled_diff:.3e}, tolerance "
                          f"{check.tolerance:.0e}: {'pass' if check.passed else 'FAIL'}")
    return (f"{what}: max |difference| **{check.max_abs_diff:.1e}**, scaled **{check.max_scaled_diff:.1e}** against "
            f"a tolerance of **{check.tolerance:.0e}** · max(1, |reference|) — {verdict(check.passed)}")


def _name(experiment: Callable) -> str:
    return f"{experiment.__module__}.{experiment.__qualname__}"


@contextmanager
def _computing(name: str, key: tuple, mb: float, what: str) -> Iterator[None]:
    """Inside a cached function, so on a cache miss only: hold the estimate under the server-wide budget (``what``
    names the computation in a refusal), and time the computation (``timings``; ``key``: the model's, or the
    arguments of an experiment that builds its own)."""
    with MEMORY.hold(mb, what), timings.timed(name, key, mb):
        yield


@st.cache_data(max_entries=256, show_spinner=False)
def _section(module: str, name: str, key: tuple, _model, args: tuple, _mb: float):
    with _computing(f"{module}.{name}", key, _mb, f"{name} on this model"):
        return getattr(importlib.import_module(module), name)(_model, *args)


def section(experiment, key: tuple, model, *args):
    """A page section's result: ``experiment(model, *args)`` from mechlib, cached server-wide on plain values
    (the experiment's name, the model's key from ``current_model``, the arguments); never on the model itself.
    A computation states its cost while it runs (``timings.cost_line``: the estimate ``experiment_mb``, its
    declared cost, else the model's forward; and its expected time) and holds the estimate under the server-wide
    budget (``MEMORY``); one over the budget, or that finds no room in time, stops the section with the server's
    message, before it starts."""
    sections.record_call(experiment, key, args)
    mb = experiment_mb(experiment, model, *args)
    try:
        with st.spinner(timings.cost_line(mb, timings.expected(_name(experiment), key, mb))):
            return _section(experiment.__module__, experiment.__qualname__, key, model, args, mb)
    except BudgetError as error:
        st.error(f"{error}.")
        st.stop()


def costed(experiment: Callable, max_entries: int, what: str) -> Callable:
    """``experiment`` from mechlib, one that loads or builds its own models from plain arguments (sizes, a seed,
    tokens), cached server-wide on its arguments (a cache of ``max_entries`` of its own, keyed as
    ``st.cache_data`` keys the experiment itself), stating its cost while it computes and holding its estimate
    under the budget as ``section`` does. Over the budget, it raises ``BudgetError`` for the page to say, naming
    the computation ``what``."""
    name = _name(experiment)

    def compute(*args):
        with _computing(name, args, experiment_mb(experiment, *args), what):
            return experiment(*args)

    cached = st.cache_data(max_entries=max_entries, show_spinner=False)(functools.update_wrapper(compute, experiment))

    def run(*args):
        mb = experiment_mb(experiment, *args)
        with st.spinner(timings.cost_line(mb, timings.expected(name, None, mb))):
            return cached(*args)

    return run


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
        cfg = ModelConfig.from_json(choice[1])
        return choice, zoo.random_model(cfg, lambda: MEMORY.hold(cfg.estimate_mb(batch=0), f"a model of {cfg.n_params():,} parameters"))
    digest, model = zoo.from_checkpoint(st.session_state["session_models"][choice[1]])
    return ("session", digest), model


@st.cache_data(max_entries=32, show_spinner=False)
def _examples(tokenizer_json: str, n_ctx: int) -> list[str]:
    return data.covered_prompts(data.tokenizer_from_json(tokenizer_json), 5, (8, min(40, n_ctx - 1)))


INPUTS = ("prompt", "random tokens", "repeated random tokens")


def input_tokens(model) -> tuple[tuple[int, ...], list[str]]:
    """The tokens a page studies: a typed prompt (with <bos> first, cut to the context with a notice, and a
    warning when many words are unknown; example prompts offered are ones the vocabulary covers), random tokens
    from the sidebar's seed, or a random segment from the seed and the segment again (the input on which
    induction heads show). Returns the ids and a readable label per position."""
    tokenizer, n_ctx = model.tokenizer, model.cfg.n_ctx
    kinds = INPUTS if tokenizer else INPUTS[1:]
    kind = st.radio("input", kinds, 0, key="input", bind="query-params", horizontal=True,
                    help=None if tokenizer else "This model has no tokenizer, so it reads token ids.")
    if kind == "prompt":
        examples = _examples(tokenizer.to_json(), n_ctx)

        def use_example() -> None:
            st.session_state["prompt"] = st.session_state["example"]

        st.selectbox("examples whose every token this model knows", examples, None, key="example",
                     on_change=use_example, placeholder="choose one to replace the prompt…")
        text = st.text_input("prompt", DEFAULT_PROMPT, key="prompt", bind="query-params", max_chars=2000)
        prompt = data.prompt_ids(tokenizer, text, n_ctx)
        if prompt.full_length > n_ctx:
            st.info(f"The prompt is {prompt.full_length:,} tokens with <bos>; this model reads at most {n_ctx}, "
                    f"so only the first {n_ctx} are used.")
        if prompt.unknown_share > UNK_SHARE_MAX:
            st.warning(f"{prompt.unknown_share:.0%} of the prompt's tokens are <unk>: this model's vocabulary does not "
                       "know them, so it reads them all as one token. Choose an example above, or use words from "
                       "Python's documentation.")
        ids = prompt.ids
    elif kind == "random tokens":
        ids = data.random_ids(model.cfg.d_vocab, min(n_ctx, 24), st.session_state["seed"])
    else:
        ids = data.repeated_random_ids(model.cfg.d_vocab, (min(n_ctx, 25) - 1) // 2, st.session_state["seed"])
    return ids, data.token_labels(tokenizer, ids)
