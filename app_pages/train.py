"""Train a model: one click to watch an induction head form, or your own sizes, data and steps; drawn live;
the result joins this session's models."""

import hashlib

import streamlit as st

from classroom import activity, keys, pages
from classroom.admission import BudgetError, require_budget
from classroom.experiments import compute
from classroom.live import membership
from classroom.model_choice import ModelChoice
from classroom.page.attention_text import attention_text
from classroom.page.layout import beside, figure, prose, show
from classroom.page.part import given, record
from classroom.page.questions import answer_line, ask
from classroom.page.text import literal
from classroom.page.widgets import select_slider, slider
from classroom.session import add_session_model, session_id
from classroom.state.store import STORE, short_id
from classroom.training.door import TRAININGS
from classroom.training.errors import SessionBusy
from classroom.training.progress_line import ProgressLine
from mechlib import data, figures, induction, train
from mechlib.checks import PREV_TOKEN_MIN
from mechlib.config import ModelConfig, divisors
from mechlib.io import CheckpointError

PRESET = train.INDUCTION_PRESET


def bar_question(steps: int) -> str:
    return (f"Will the best head's induction score reach {PRESET.induction_target} beside a previous-token head ≥ "
            f"{PREV_TOKEN_MIN} (the preset's bar) within the {steps:,} steps set?")


TRAININGS.warm()  # start the training processes while the student reads the page

SLOTS = f"at most {TRAININGS.limit()} trainings run at once on this server, {TRAININGS.running()} running now"


@st.cache_resource(max_entries=8, show_spinner="Tokenizing the text…")
def prepared(source: str, n_ctx: int, repeats: float, upload_digest: str, _text: str | None):
    """Tokenizer and batches, shared process-wide (read-only); uploads are keyed by their digest."""
    return data.training_data(source, n_ctx, repeats, _text)


def chosen_upload(n_ctx: int) -> tuple[str, str] | None:
    """(digest, text) of the last valid uploaded .txt; a bad file shows why and keeps the previous one."""
    upload = st.file_uploader("text file (.txt, UTF-8, at most 5 MB)", type=["txt"], key="train_upload",
                              max_upload_size=data.MAX_UPLOAD_BYTES // 2**20)
    if upload is not None:
        raw = upload.getvalue()
        try:
            text = data.validate_upload(raw, n_ctx)
        except data.DataError as error:
            st.error(f"{literal(upload.name)}: {error}. The previous data stays selected.")
        else:
            st.session_state[keys.TRAIN_TEXT] = (upload.name, hashlib.sha256(raw).hexdigest(), text)
    saved = st.session_state.get(keys.TRAIN_TEXT)  # (file name, digest, text) of the last valid upload
    if not saved:
        return None
    st.caption(f"Training text: **{literal(saved[0])}** ({len(saved[2]):,} characters)")
    return saved[1:]


def preset_code(seed: int) -> str:
    """Python that trains the preset again from ``seed``, keeping every evaluation's report."""
    return ("from mechlib import train\n\n"
            "reports = []  # each evaluation's train.Progress: step, loss, scores, every head's pattern\n"
            f"result = train.INDUCTION_PRESET.train(seed={seed}, on_progress=reports.append)")


def own_code(source: str, n_ctx: int, repeats: float, upload: str | None, kwargs: dict) -> str:
    """Python that trains this model again (``train.train`` with the page's settings: the same config and seed give
    the same steps), keeping every evaluation's report; an upload is read from the file of that name."""
    text = (f"text = data.validate_upload(open({upload!r}, 'rb').read(), {n_ctx})  # the file you uploaded\n"
            if upload else "")
    return ("from mechlib import data, train\nfrom mechlib.config import ModelConfig\n\n" + text
            + f"tokenizer, batches = data.training_data({source!r}, {n_ctx}, {repeats!r}{', text' if upload else ''})\n"
            f"cfg = {kwargs['cfg']!r}\n"
            "reports = []  # each evaluation's train.Progress: step, loss, scores, every head's pattern\n"
            f"result = train.train(cfg, batches, {kwargs['steps']}, lr={kwargs['lr']!r}, seed={kwargs['seed']}, "
            f"tokenizer=tokenizer, eval_every={kwargs['eval_every']}, watch={kwargs['watch']!r}, "
            "on_progress=reports.append)")


def run(label: str, steps: int, fn, kwargs: dict, length: int, memory_mb: float, code: str) -> None:
    """Train ``fn(**kwargs)`` in a queue slot, in a worker process (``trainings``), drawing every head's attention
    on the watched repeated sequence (segment ``length``) and the curves at each evaluation; then add the model to
    this session, with ``code``, the Python that trains it again. The figures are built once and updated in place
    (``figures.LiveTraining``). While it waits, the page shows its place in the queue and the measured wait; while it
    runs, the time left at its own rate; a second press while this session's training still runs or waits is refused
    (one per session)."""
    heads_box, curves_box = (column.empty() for column in st.columns(2))
    history, live, reports = [], [], []
    usual = PRESET.usual_steps if task == PRESET.name else None  # the preset stops early once its circuit forms
    line = ProgressLine(steps, usual)

    def evaluated(p: train.Progress) -> None:
        reports.append(p)
        history.append({"step": p.step, "loss": p.loss, **p.metrics})
        line.show(p.step, f"loss {p.loss:.3f} nats/token")
        live[:] = live or [figures.LiveTraining(history, p.patterns, p.step, length)]
        heads, curves = live[0].update(history, p.patterns, p.step)
        if heads is not None:
            heads_box.plotly_chart(heads, key=f"heads_{p.step}")
        curves_box.plotly_chart(curves, key=f"curves_{p.step}")

    owner = session_id()
    try:
        model, history = TRAININGS.train(owner, steps, memory_mb, fn, kwargs, on_wait=line.waiting,
                                         on_start=line.started, on_progress=evaluated, on_step=line.stepped,
                                         threads=lambda: activity.training_threads(owner))
        seconds = line.elapsed()  # measured wall time of this training, queue wait excluded
    except SessionBusy as error:
        line.empty()
        st.warning(f"Not started: {error}. Any press or change on this page stops the earlier one at its next step; "
                   "press the button again then.")
        return
    except (ValueError, RuntimeError) as error:  # a refused size, a busy server, a worker that died: say so, keep the page
        line.empty()
        st.error(f"Training stopped: {error}")
        return
    try:
        label = add_session_model("trained", label, model, pin=task == PRESET.name)  # the lesson's links name it
    except CheckpointError as error:  # e.g. a learning rate that sent the weights to NaN: the checkpoint is refused
        line.empty()
        st.error(f"Training finished, but its model cannot be used: {error}. Try a smaller learning rate.")
        return
    preset = task == PRESET.name
    key = short_id(model)
    shared = STORE.model(key)
    circuit = compute(induction.induction_circuit, shared, key=ModelChoice("stored", key)) if preset else None
    labels = data.token_labels(shared.tokenizer, reports[-1].watched)  # the watched sequence, for the hover view
    st.session_state[keys.LAST_TRAINED] = {"label": label, "history": history, "seconds": seconds, "last": reports[-1],
                                        "labels": labels, "length": length, "preset": preset, "circuit": circuit,
                                        "code": code}
    if preset:  # Circuits: two layers opens on this model (the sidebar selects it)
        st.session_state[pages.circuits_model_key("attn-only-2l")] = pages.SIDEBARS_MODEL
    st.rerun()


st.title("Train a transformer")
if membership.following():
    st.info("A training is drawn on the screen of whoever presses its button: your teacher's curves are on their "
            "screen, and the model they train opens here, in your sidebar, once it is done.", icon=":material/groups:")
task = st.radio("what to train", [PRESET.name, "your own model"], key="t_task", horizontal=True, bind="query-params")
seed = st.session_state[keys.SEED]
if task == PRESET.name:
    prose(
        f"**The copying task** (synthetic, not text): {PRESET.description}. A two-layer model can solve it with an "
        "**induction circuit** (Olsson et al. 2022): a layer-0 head that looks at the previous token, and a layer-1 head "
        "that finds the earlier copy of the current token and copies what came after it; the LSTM page's controls show "
        "what one layer and an LSTM reach on the same task. Press the button and watch both heads form: "
        "the first as a diagonal just below the main one, the second as a stripe in the second copy. Training stops "
        f"once the best induction score reaches {PRESET.induction_target} beside a previous-token head ≥ "
        f"{PREV_TOKEN_MIN}, or after {PRESET.steps:,} steps.")
    st.caption(f"{PRESET.cfg.n_params():,} parameters · batches of {PRESET.batch_size} × {PRESET.cfg.n_ctx} tokens · "
               f"lr {PRESET.lr:g} · seed {seed} (sidebar) · {SLOTS}")
    guess = ask("bar", bar_question(PRESET.steps), ["yes", "no"])
    if st.button("Watch an induction head form", type="primary", icon=":material/play_arrow:"):
        st.session_state[keys.BAR_GUESS] = guess
        run(f"{PRESET.name}, seed {seed}", PRESET.steps, PRESET.train, {"seed": seed}, PRESET.data.length,
            train.estimate_mb(PRESET.cfg, PRESET.batch_size), preset_code(seed))
else:
    prose(
        "**Your own model**, on text (the built-in text or a file of yours) or on random tokens with repeats: the "
        "setting of the phase change, in which induction heads appear suddenly partway through training. The "
        "right-hand chart shows the **induction score** (how much the best head attends from a repeated token to the "
        "token after its earlier copy) and the **previous-token score**.")
    left, right = st.columns(2)
    with left:
        st.markdown("**Architecture**")
        n_layers = slider("layers", 0, 4, 2, key="t_layers")
        d_model = st.select_slider("d_model", [32, 64, 128, 256], 64, key="t_d_model", bind="query-params")
        n_heads = select_slider("heads per layer", [h for h in divisors(d_model) if h <= 16], 2, key="t_heads")
        n_ctx = st.select_slider("context length", [32, 48, 64, 128], 48, key="t_ctx", bind="query-params")
        mlp = st.toggle("MLP layers (d_mlp = 4 · d_model)", False, key="t_mlp", bind="query-params")
        ln = st.toggle("LayerNorm", False, key="t_ln", bind="query-params")
    with right:
        st.markdown("**Data and optimiser**")
        source = st.radio("data", list(data.SOURCES), index=list(data.SOURCES).index("random"), format_func=data.SOURCES.get,
                          key="t_data", bind="query-params",
                          help="Random tokens with a repeated segment form induction heads fastest. Each training "
                               "shows its measured time as it runs.")
        repeats = 1.0 if source == "random" else st.slider(
            "share of sequences with a repeated segment", 0.0, 1.0, 0.5, 0.1, key="t_repeats", bind="query-params",
            help="Half of them repeat a span of the text, half a span of random tokens of the same vocabulary.")
        steps = st.select_slider("steps", [50, 100, 200, 500, 1000, 2000, 3000, 5000], 2000, key="t_steps", bind="query-params")
        lr = st.select_slider("learning rate", [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2], 1e-2, key="t_lr", bind="query-params",
                              format_func=lambda v: f"{v:g}")
        upload = chosen_upload(n_ctx) if source == "upload" else None

    try:
        if source == "upload" and upload is None:
            raise data.DataError("upload a .txt file to train on it")
        digest, text = upload if upload else ("", None)
        tokenizer, batches = prepared(source, n_ctx, repeats, digest, text)
        cfg = ModelConfig(n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_ctx=n_ctx,
                          d_vocab=tokenizer.d_vocab if tokenizer else data.RANDOM_VOCAB,
                          d_mlp=4 * d_model if mlp else None, normalization="LN" if ln else None, seed=seed)
        memory = train.estimate_mb(cfg, 32)
        require_budget(memory, f"training a model of {cfg.n_params():,} parameters")
    except (ValueError, BudgetError) as error:  # no Train button; the last trained model below stays
        st.error(str(error))
    else:
        st.caption(f"{cfg.n_params():,} parameters · vocabulary {cfg.d_vocab:,} "
                   f"({'words' if source in ('words', 'upload') else 'characters' if source == 'chars' else 'random ids'}) · "
                   f"batches of 32 × {n_ctx} tokens · ≈ {memory:,.0f} MB while training · seed {seed} (sidebar) · "
                   f"{SLOTS}")
        guess = ask("bar", bar_question(steps), ["yes", "no"]) if n_layers else None
        if st.button("Train", type="primary", icon=":material/play_arrow:"):
            st.session_state[keys.BAR_GUESS] = guess
            extras = "".join([", MLP" if mlp else "", ", LN" if ln else ""])
            length = (n_ctx - 1) // 2
            kwargs = {"cfg": cfg, "data": batches, "steps": steps, "lr": lr, "seed": seed, "tokenizer": tokenizer,
                      "eval_every": max(1, steps // 40), "watch": length if n_layers else None}
            run(f"{n_layers}L×{n_heads}H d{d_model} ctx {n_ctx}{extras}, {data.SOURCES[source]}, {steps} steps, "
                f"lr {lr:g}, seed {seed}", steps, train.train, kwargs, length, memory,
                own_code(source, n_ctx, repeats, st.session_state[keys.TRAIN_TEXT][0] if upload else None, kwargs))


def passed_bar(history: list[dict[str, float]]) -> dict[str, float] | None:
    """The first evaluation past the preset's bar (``Preset.formed``), or None."""
    return next((row for row in history if row["induction"] >= PRESET.induction_target
                 and row["prev_token"] >= PREV_TOKEN_MIN), None)


def trained_last() -> None:
    """The last training's result: its figures (each with the code that trains it again), the circuit check for the
    preset, the question of the preset's bar, and its download."""
    st.caption(literal(last["label"]))
    history, final, report = last["history"], last["history"][-1], last["last"]
    if "induction" in final:
        reached = passed_bar(history)
        best = max(history, key=lambda row: row["induction"])
        guessed = st.session_state.get(keys.BAR_GUESS)
        with st.container(border=True):
            st.markdown(f"**{bar_question(report.steps)}** " + ("" if guessed is None else f"You predicted **{guessed}** before it ran. ")
                        + answer_line(guessed, ["yes" if reached else "no"], (
                            f"At step {reached['step']:,}: induction score {reached['induction']:.2f}, previous-token "
                            f"score {reached['prev_token']:.2f}." if reached else
                            f"Its best induction score was {best['induction']:.2f} (step {best['step']:,}), its best "
                            f"previous-token score {max(row['prev_token'] for row in history):.2f}.")
                            + " Other sizes, data, steps or seeds can answer differently."))
    left, right = beside(2) if report.patterns is not None else (None, st.container())
    if left:
        with left:
            figure("heads at the last step", figures.heads_forming, given(report, "reports[-1]", last["code"]).patterns,
                   report.step, last["length"])
    with right:
        figure("training curves", figures.training_curves, given(history, "result.history", last["code"]))
    if left:
        first = last["circuit"].induction if last["preset"] and last["circuit"].found else None
        attention_text("Every head at the last step, on the watched sequence's tokens: point at (or tap) a token of "
                       "the second copy. A previous-token head shades the token just before it, an induction head "
                       "the token after its earlier copy.", report.patterns, last["labels"], first,
                       len(report.watched) - 1, key="hover trained")
    record("steps", str(final["step"]))
    record("final loss (nats per token)", f"{final['loss']:.3f}")
    record("second-repeat loss (nats per token)", f"{final['repeat_loss']:.3f}")
    scores = ""
    if "induction" in final:
        scores = f"induction score {final['induction']:.2f}, previous-token score {final['prev_token']:.2f}"
        record("induction score", f"{final['induction']:.2f}")
        record("previous-token score", f"{final['prev_token']:.2f}")
    if last["preset"]:
        c, formed = last["circuit"], PRESET.formed(report)
        stopped = (f"Training stopped at step {report.step:,} after {report.elapsed_s:.1f} s (evaluations included): "
                   f"{scores}, {'past' if formed else 'short of'} the preset's bar. ")
        found = (f"The circuit check finds it: {c.previous} is a previous-token head ({c.previous_score:.2f}), "
                 f"{c.induction} an induction head ({c.induction_score:.2f}) that falls to {c.ablated_score:.2f} "
                 f"with {c.previous} ablated." if c.found else "The circuit check finds no induction circuit: "
                 + "; ".join(c.missing) + ".")
        (st.success if c.found else st.warning)(stopped + found + " It is in the sidebar's model list for this session.")
        if c.found:
            st.page_link(pages.CIRCUITS_TWO.file, label="Read its circuit on Circuits: two layers",
                         icon=":material/arrow_forward:")
    else:
        st.success(f"Final loss {final['loss']:.3f} nats/token, second-repeat loss {final['repeat_loss']:.3f}"
                   f"{' · ' + scores if scores else ''}. Training took {last['seconds']:.1f} s here "
                   f"({final['step'] / last['seconds']:.1f} steps/s). It is in the sidebar's model list for this session.")
    key = st.session_state[keys.SESSION_MODELS][last["label"]]
    st.download_button("Download as .safetensors", lambda: STORE.get(key).data,
                       file_name="addition-machines-model.safetensors", mime="application/octet-stream",
                       icon=":material/download:")


last = st.session_state.get(keys.LAST_TRAINED)
if last and last["label"] in st.session_state.get(keys.SESSION_MODELS, {}):
    show([("The model you trained last", trained_last)])
