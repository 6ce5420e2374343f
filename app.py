"""Addition Machines: the app shell. Navigation, and the sidebar every page shares."""

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import streamlit as st

import mechlib
from classroom import keys, activity, models_folder, pages
from classroom.admission import BudgetError, budget_mb, require_budget
from classroom.live import follow, join_card, membership, panel
from classroom.page import run, slides
from classroom.model_choice import ModelChoice
from classroom.page.text import literal, quoted
from classroom.page.widgets import clean_url_ints, clean_url_text, copy_link, select_slider, slider, url_notes
from classroom.server import collect_garbage, freeze_libraries, warm_up
from classroom.session import PROMPT_CHARS, add_session_model, current_model, list_session_model, session_id, teacher
from classroom.state import backend
from classroom.state.store import ID_CHARS, STORE, TEACHER, StoreError, admit, short_id
from mechlib import zoo
from mechlib.config import ModelConfig, divisors
from mechlib.device import device_label
from mechlib.io import MAX_BYTES, CheckpointError

# The tab's icon is served by this server: a Material icon's would be fetched from Google's font service.
st.set_page_config(page_title="Addition Machines", page_icon=Path(__file__).parent / "classroom" / "icon.svg", layout="wide",
                   initial_sidebar_state="collapsed" if slides.linked_present() else "auto")

DEFAULT_MODEL = "gelu-2l"  # MLPs and LayerNorm: every kind of term shows on the residual-stream page
PAGE_FILES = {page.file: st.Page(page.file, title=page.title, icon=page.icon, url_path=page.url_path or None,
                                  default=page is pages.HOME) for page in pages.PAGES}  # one URL path per page
LINKED = re.compile(r"(?P<kind>trained|uploaded) (?P<id>[a-z2-7]{%d})(: |$)" % ID_CHARS)  # a stored model's label
URL_INTS = {"seed": (0, 2**31 - 1), "layers": (0, 4), "vocab": (2, 50_000), "ctx": (1, 2_048)}  # the sidebar's bounds


def random_model_sizes() -> None:
    """Sizes of the sidebar's random model; the last valid config stays chosen when new sizes fail."""
    layers = slider("layers", *URL_INTS["layers"], 2, key="layers")
    d_model = st.select_slider("d_model", [16, 32, 64, 128, 256, 512, 768, 1024], 64, key="d_model", bind="query-params")
    heads = select_slider("heads", divisors(d_model)[:12], 4, key="heads")
    d_vocab = st.number_input("vocabulary size", *URL_INTS["vocab"], 1_000, key="vocab", bind="query-params")
    n_ctx = st.number_input("context length", *URL_INTS["ctx"], 64, key="ctx", bind="query-params")
    mlp = st.toggle("MLP layers (d_mlp = 4 · d_model)", False, key="mlp", bind="query-params")
    ln = st.toggle("LayerNorm", False, key="ln", bind="query-params")
    try:
        cfg = ModelConfig(n_layers=layers, d_model=d_model, n_heads=heads, d_vocab=int(d_vocab), n_ctx=int(n_ctx),
                          d_mlp=4 * d_model if mlp else None, normalization="LN" if ln else None,
                          seed=st.session_state[keys.SEED])
        require_budget(cfg.estimate_mb(batch=1), f"a model of {cfg.n_params():,} parameters")
    except (ValueError, BudgetError) as error:
        if getattr(st.session_state.get(keys.MODEL_CHOICE), "kind", None) == "random":
            st.error(f"{error}. The previous model stays selected.")
            return
        st.session_state[keys.URL_NOTES] = [f"The random model's sizes are refused: {error}. The default model is "
                                         "shown instead."]  # no random model to keep: a link's sizes, say
        st.session_state[keys.SELECT_MODEL] = DEFAULT_MODEL
        st.rerun()
    st.session_state[keys.MODEL_CHOICE] = ModelChoice("random", cfg.to_json())


def upload_checkpoint() -> None:
    """A checkpoint the user uploads: validated before use; a bad file changes nothing."""
    upload = st.file_uploader("checkpoint (.safetensors)", type=["safetensors"], max_upload_size=MAX_BYTES // 10**6,
                              help="Saved by mechlib.io.save or downloaded from the Train page. Pickles are never opened.")
    if upload is None:
        return
    data = upload.getvalue()
    refused = st.session_state.setdefault(keys.REFUSED_UPLOADS, {})  # digest -> why: a file left in the uploader
    digest = hashlib.sha256(data).hexdigest()                     # is not validated again on every rerun
    if digest not in refused:
        try:
            admit(data)
            model = zoo.stored(short_id(data), lambda: data)  # built once: the store's validation finds it built
            if not isinstance(model.cfg, ModelConfig):
                refused[digest] = ("this is an LSTM checkpoint; the pages study transformers, and the LSTM page uses "
                                   "its own models")
        except CheckpointError as error:
            refused[digest] = literal(str(error))
    if digest in refused:
        st.error(f"{quoted(upload.name)}: {refused[digest]}. The previous model stays selected.")
        return
    if short_id(data) not in st.session_state[keys.SESSION_MODELS].values():
        add_session_model("uploaded", upload.name, data)
        st.rerun()


def folder_model(entry: models_folder.Entry) -> None:
    """A model of the class's folder: its config read and its weights' memory admitted before it is chosen; a
    refusal says why, and the default model is shown instead."""
    try:
        models_folder.admit(entry)
    except (models_folder.FolderError, BudgetError) as error:
        st.session_state[keys.URL_NOTES] = [f"{literal(str(error))}. The default model is shown instead."]
        st.session_state[keys.SELECT_MODEL] = DEFAULT_MODEL
        st.rerun()
    st.session_state[keys.MODEL_CHOICE] = ModelChoice("folder", entry.name)
    st.caption(f"{entry.kind} model from the class's models folder, {entry.n_bytes / 1e6:,.1f} MB on disk")


def folder_listing(listed: list[models_folder.Entry]) -> None:
    """The class's models folder: each model's kind and size on disk, and its shape where its config reads."""
    with st.expander(f"models folder ({len(listed)})", expanded=False):
        # the folder's path is the server's disk: shown to the teacher's browser only
        where = literal(str(models_folder.folder())) if teacher() else "the class's models folder"
        st.caption(f"{where}, named by {models_folder.SETTING}")
        for entry in listed:
            try:
                cfg = models_folder.config(entry)
                shape = (f"{cfg.n_layers} layer{'s' * (cfg.n_layers != 1)} × {cfg.n_heads} heads, "
                         f"vocab {cfg.d_vocab:,}, {cfg.n_params():,} parameters")
            except models_folder.FolderError as error:
                shape = f"cannot be used: {literal(str(error))}"
            st.markdown(f"**{literal(entry.name)}** — {entry.kind}, {entry.n_bytes / 1e6:,.1f} MB; {shape}")


def describe_choice() -> str:
    choice = st.session_state.get(keys.MODEL_CHOICE)
    if choice is None:
        return "no model chosen yet"
    cfg = choice.config() if choice.kind == "random" else current_model()[1].cfg
    where = choice.where(literal(choice.name if choice.kind == "folder" else st.session_state[keys.MODEL]))
    mlp = f", MLP {cfg.d_mlp}" if cfg.d_mlp else ", attention-only"
    return (f"**{cfg.n_layers} layers × {cfg.n_heads} heads**, d_model {cfg.d_model}, d_head {cfg.d_head}{mlp}, "
            f"vocab {cfg.d_vocab:,}, context {cfg.n_ctx} — {where}; {cfg.n_params():,} parameters, "
            f"≈ {cfg.estimate_mb(batch=1):,.1f} MB with one sequence's activations")


def read_linked_model(asked: str, options: list[str], label: Callable[[str], str]) -> None:
    """A link's model that is not one of this session's labels, and the rerun with it corrected: a zoo model
    named bare (?model=attn-only-2l), a trained or uploaded model another session keeps in the server's store
    (listed here too), or a note saying why there is none (unknown, expired, the zoo's LSTM)."""
    if asked in options:
        st.query_params["model"] = label(asked)
    elif linked := LINKED.match(asked):
        try:
            st.query_params["model"] = list_session_model(STORE.label(linked["id"]), linked["id"])
        except StoreError as error:
            st.session_state[keys.URL_NOTES] = [f"The link's model: {error}. The default model is shown instead."]
            del st.query_params["model"]
    else:
        del st.query_params["model"]
        zoo_name = asked.removeprefix("zoo: ")
        st.session_state[keys.URL_NOTES] = [
            f"The link's model “{quoted(asked)}” is the zoo's LSTM: the sidebar's pages study transformers, and the "
            "LSTM page uses it on its own. The default model is shown instead."
            if zoo_name in zoo.RECIPES and not isinstance(zoo.RECIPES[zoo_name].cfg, ModelConfig) else
            f"The link's model “{quoted(asked)}” is not in this server's models folder (its teacher copies models "
            "there before class). The default model is shown instead." if asked.startswith("folder: ") else
            f"The link's model “{quoted(asked)}” does not exist on this server: it is none of the zoo's models, and "
            "no trained model has that id (trained models are kept for a while, then expire). The default model is "
            "shown instead."]
    st.rerun()


def teachers_model() -> None:
    """A follower's model set to the label of the teacher's trained or uploaded model (``follow._move`` sets the
    model's setting to the teacher's value): opened from the server's store, as a link's would be; one that cannot
    be opened is said, and the default model shown."""
    held = st.session_state.get(keys.MODEL)
    if not (isinstance(held, str) and (linked := LINKED.match(held))) or held in st.session_state[keys.SESSION_MODELS]:
        return
    try:
        list_session_model(STORE.label(linked["id"]), linked["id"])
    except StoreError as error:
        st.session_state[keys.URL_NOTES] = [f"The teacher's model “{quoted(held)}” cannot be opened here: {error}. The "
                                         "default model is shown instead, so your screen differs from the teacher's."]


def model_picker() -> None:
    """Zoo models, a random model from sizes, and this session's trained or uploaded models."""
    shipped = [name for name in zoo.names() if zoo.path(name).exists() and isinstance(zoo.RECIPES[name].cfg, ModelConfig)]
    session = st.session_state.setdefault(keys.SESSION_MODELS, {})
    teachers_model()
    folder = {entry.label: entry for entry in models_folder.entries()}
    options = shipped + ["random"] + list(folder) + list(session)
    default = DEFAULT_MODEL if DEFAULT_MODEL in shipped else "random"  # what a fresh session shows: the URL omits it

    def label(option: str) -> str:
        return f"zoo: {option}" if option in shipped else ("random, from sizes" if option == "random" else option)

    asked = st.query_params.get("model")
    if asked is not None and asked not in map(label, options):
        read_linked_model(asked, options, label)

    if keys.SELECT_MODEL in st.session_state:
        st.session_state[keys.MODEL] = st.session_state.pop(keys.SELECT_MODEL)
    if (held := st.session_state.get(keys.MODEL)) not in options:  # a label (the teacher's, for a follower), or gone
        st.session_state[keys.MODEL] = {label(option): option for option in options}.get(held, default)
        gone = held is not None and held not in map(label, options)
        if gone and membership.following() and keys.URL_NOTES not in st.session_state:
            st.session_state[keys.URL_NOTES] = [f"The teacher's model “{quoted(str(held))}” is not on this server, so "
                                             "the default model is shown instead and your screen differs from the "
                                             "teacher's."]
    picked = st.selectbox("model", options, options.index(default), key=keys.MODEL, bind="query-params", format_func=label)
    if picked in shipped:
        st.session_state[keys.MODEL_CHOICE] = ModelChoice("zoo", picked)
        st.caption(zoo.RECIPES[picked].description)
    elif picked == "random":
        with st.expander("sizes", expanded=False):
            random_model_sizes()
    elif picked in folder:
        folder_model(folder[picked])
    else:
        st.session_state[keys.MODEL_CHOICE] = ModelChoice("stored", session[picked])
        if teacher() and (linked := LINKED.match(picked)):
            pin_toggle(linked["id"])
    if folder:
        folder_listing(list(folder.values()))
    with st.expander("upload a checkpoint", expanded=False):
        upload_checkpoint()


def pin_toggle(key: str) -> None:
    """The teacher's pin for the stored model ``key``: kept on the server while it runs, whatever the class
    trains or uploads, so the lesson's links to it never expire."""
    def flip() -> None:
        STORE.pin(key, TEACHER) if st.session_state[keys.pin(key)] else STORE.unpin(key)

    st.session_state[keys.pin(key)] = STORE.pinned(key)
    st.toggle("Pin for the class", key=keys.pin(key), on_change=flip, help="Keep this model on the server while it "
              "runs, whatever students train or upload: links to it never expire. Offered to a browser on the "
              "server's own machine, the teacher's.")


def sidebar() -> None:
    clean_url_ints(URL_INTS)
    clean_url_text("prompt", PROMPT_CHARS)
    st.badge(device_label(), icon=":material/memory:", color="green" if mechlib.device.DEVICE.type == "cuda" else "gray")
    st.number_input("seed", *URL_INTS["seed"], 0, key=keys.SEED, bind="query-params",
                    help="Every random weight and token on every page is drawn from this seed.")
    model_picker()
    st.caption(describe_choice())
    st.caption(f"Requests above {budget_mb():,.0f} MB are refused with an estimate. mechlib {mechlib.__version__}")
    panel.panel()


try:
    backend.require()
except backend.SharedStateError as error:
    st.error(f"{error}.", icon=":material/cloud_off:")
    st.stop()
freeze_libraries()
warm_up()
groups: dict[str, list[st.Page]] = {}
for page in pages.PAGES:
    groups.setdefault(page.group, []).append(PAGE_FILES[page.file])
navigation = st.navigation(groups)
run.begin()  # this run's state: the top row's places, the parts drawn, what the page computed
follow.join_from_link(navigation.url_path)
with st.sidebar:
    sidebar()
slides.chrome(next(page for page in PAGE_FILES if PAGE_FILES[page] is navigation), join_card.showing_join())
url_notes()
join_card.join_banner()
activity.run_started(session_id())
try:
    navigation.run()
finally:  # after the page's widgets, so the URL holds every setting the page drew (a page may stop early)
    slides.finish()
    copy_link(slides.link_place())
    follow.publish(navigation.url_path)
    collect_garbage()
    activity.run_ended(session_id())
