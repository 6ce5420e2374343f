"""This session: its id and its browser's, whether it is the teacher's, its trained and uploaded models, the model
the sidebar chose, and the tokens a page studies."""

import functools
import hashlib
import ipaddress
import uuid
from collections.abc import Callable

import streamlit as st

from classroom import keys, pages
from classroom.model_choice import ChoiceError, ModelChoice
from classroom.page.slides import controls
from classroom.page.text import literal
from classroom.state.store import STORE, short_id
from mechlib import data, io, zoo
from mechlib.checks import UNK_SHARE_MAX
from mechlib.io import CheckpointError
from mechlib.model import Transformer
from mechlib.sae import SAEConfig

SESSION_MODELS = 8  # trained or uploaded models a session lists; the oldest goes first


def session_id() -> str:
    """This session, to the server's shared things: its place in the training queue, its share of the store."""
    return st.session_state.setdefault(keys.SESSION_ID, uuid.uuid4().hex)


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
    ``CheckpointError``), so a link to it works in any session until it expires, and list it in this session by
    its id (``list_session_model``): the session keeps no bytes of its own, so a model has one copy in the process
    whoever uploaded or linked it. Returns its label, "trained k3q7m2xa4rbt5wzd: <name>". ``pin`` keeps it in the
    store for this browser while the server runs (the preset's result: the lesson's links name it), within the
    browser's own bound of pins."""
    if isinstance(io.config(data), SAEConfig):  # a sparse autoencoder is opened on its own page, never as a model
        raise CheckpointError("this file is a sparse autoencoder, not a model: its link opens it on the page "
                              "\"Dictionary learning\"")
    stored = STORE.put(kind, name, data, browser_id())
    key = short_id(data)
    if pin:
        STORE.pin(key, browser_id())
    return list_session_model(f"{kind} {key}: {name}" if name else stored.label, key)


def list_session_model(label: str, key: str) -> str:
    """List the stored model ``key`` under ``label`` in this session (its last ``SESSION_MODELS``); the sidebar
    selects it on the next run (a widget's value cannot change after it is drawn). Returns the label."""
    models = st.session_state.setdefault(keys.SESSION_MODELS, {})
    models.pop(label, None)
    models[label] = key
    while len(models) > SESSION_MODELS:
        models.pop(next(iter(models)))
    st.session_state[keys.SELECT_MODEL] = label
    return label


DEFAULT_PROMPT = "the class of an object is its type . the class of an object is"
PROMPT_CHARS = 2_000  # the longest prompt, typed or in a link (widgets.clean_url_text)


def current_model() -> tuple[ModelChoice, Transformer]:
    """(the choice made exact, a plain key for caches; the shared read-only model) of the sidebar's choice."""
    choice = st.session_state.get(keys.MODEL_CHOICE)
    if choice is None:
        st.error("Choose a model in the sidebar.")
        st.stop()
    try:
        return choice.load()
    except ChoiceError as error:
        st.error(f"{literal(str(error))}. Choose another model in the sidebar.")
        st.stop()


@functools.lru_cache(maxsize=8)  # by the tokenizer object: a shared model's, kept while it is cached here
def _examples(tokenizer: data.Tokenizer, n_ctx: int) -> list[str]:
    return data.covered_prompts(tokenizer, 5, (8, min(40, n_ctx - 1)))


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
        examples = _examples(tokenizer, n_ctx)

        def use_example() -> None:
            st.session_state[keys.PROMPT] = st.session_state[keys.EXAMPLE]

        st.selectbox("examples whose every token this model knows", examples, None, key=keys.EXAMPLE,
                     on_change=use_example, placeholder="choose one to replace the prompt…")
        text = st.text_input("prompt", DEFAULT_PROMPT, key=keys.PROMPT, bind="query-params", max_chars=PROMPT_CHARS)
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
        ids = data.random_ids(model.cfg.d_vocab, min(n_ctx, 24), st.session_state[keys.SEED], data.bos_id(tokenizer))
    else:
        ids = tuple(data.repeated_sequences(model.cfg.d_vocab, (min(n_ctx, 25) - 1) // 2, 1, st.session_state[keys.SEED],
                                            data.bos_id(tokenizer))[0].tolist())
    return ids, data.token_labels(tokenizer, ids)


def part_model(zoo_name: str, fits: Callable[[Transformer], bool], why: str) -> tuple[ModelChoice, Transformer, str]:
    """(cache key, model, name as Markdown) of a Circuits page's model: the zoo's ``zoo_name``, or the sidebar's
    when the radio (its URL key ``pages.circuits_model_key``) chooses it and ``fits(model)``; else a note says
    ``why`` not. The model's name is drawn once under the radio ("Reading …")."""
    with controls():
        choice = st.radio("model for this page", [f"zoo: {zoo_name}", pages.SIDEBARS_MODEL], index=0,
                          key=pages.circuits_model_key(zoo_name), bind="query-params", horizontal=True)
    key, model, name = ModelChoice("zoo", zoo_name), zoo.load(zoo_name), zoo_name
    if choice == pages.SIDEBARS_MODEL:
        sidebar_key, sidebar_model = current_model()
        if fits(sidebar_model):
            if sidebar_model.tokenizer is None:
                st.info("This model has no tokenizer: token tables use ids 2, 3, … instead of the most frequent tokens.")
            key, model = sidebar_key, sidebar_model
            chosen = st.session_state[keys.MODEL_CHOICE]
            name = {"random": "the sidebar's random model", "stored": literal(st.session_state[keys.MODEL])}.get(
                chosen.kind, chosen.name)
        else:
            st.info(f"The sidebar's model does not fit this page ({why}); showing zoo: {zoo_name}.")
    st.markdown(f"Reading **{name}**.")
    return key, model, name
