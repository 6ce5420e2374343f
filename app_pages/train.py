"""Train a model: sizes, data, steps; live progress; the result joins this session's models."""

import hashlib
import time

import streamlit as st

from mechlib import data, figures, io, train
from mechlib.config import ModelConfig, divisors
from mechlib.device import BudgetError, require_budget
from shell import add_session_model, select_slider, slider



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
            st.error(f"{upload.name}: {error}. The previous data stays selected.")
        else:
            st.session_state["train_text"] = (upload.name, hashlib.sha256(raw).hexdigest(), text)
    saved = st.session_state.get("train_text")  # (file name, digest, text) of the last valid upload
    if not saved:
        return None
    st.caption(f"Training text: **{saved[0]}** ({len(saved[2]):,} characters)")
    return saved[1:]


st.title("Train a transformer")
st.markdown(
    "Train a small model from scratch on this server, then study it on the other pages: it joins the sidebar's "
    "model list for this session and can be downloaded as a safetensors file. The right-hand chart shows the "
    "**induction score** (how much the best head attends from a repeated token to the token after its earlier "
    "copy) and the **previous-token score**; watch for the sudden jump, the phase change in which induction heads form."
)

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

seed = st.session_state["seed"]
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
except (ValueError, BudgetError) as error:
    st.error(str(error))
    st.stop()

st.caption(f"{cfg.n_params():,} parameters · vocabulary {cfg.d_vocab:,} "
           f"({'words' if source in ('words', 'upload') else 'characters' if source == 'chars' else 'random ids'}) · "
           f"batches of 32 × {n_ctx} tokens · ≈ {memory:,.0f} MB while training · seed {seed} (sidebar) · "
           f"at most {train.QUEUE.limit} trainings run at once on this server, {train.QUEUE.running} running now")

if st.button("Train", type="primary", icon=":material/play_arrow:"):
    progress = st.progress(0.0, text="Waiting for a free training slot…")
    chart = st.empty()
    history: list[dict[str, float]] = []
    clock = {"start": 0.0, "shown": 0.0}  # monotonic seconds: training start, last progress update

    def timing(step: int) -> str:
        """The measured time so far, and the rate."""
        elapsed = time.monotonic() - clock["start"]
        return f"{elapsed:.0f} s · {step / elapsed:.1f} steps/s"

    def waiting(position: int) -> None:
        progress.progress(0.0, text=f"Waiting for a free training slot: position {position} in the queue "
                                    f"({train.QUEUE.running} of {train.QUEUE.limit} running)")

    def step_done(step: int) -> None:
        """At most twice a second; any Streamlit call is where a rerun or a closed tab stops the training."""
        if time.monotonic() - clock["shown"] > 0.5:
            clock["shown"] = time.monotonic()
            progress.progress(step / steps, text=f"step {step:,} of {steps:,} · {timing(step)}")

    def evaluated(p: train.Progress) -> None:
        history.append({"step": p.step, "loss": p.loss, **p.metrics})
        progress.progress(p.step / p.steps, text=f"step {p.step:,} of {p.steps:,} · loss {p.loss:.3f} nats/token · "
                                                  f"{timing(p.step)}")
        chart.plotly_chart(figures.training_curves(history))

    with train.QUEUE.slot(waiting):
        clock["start"] = time.monotonic()
        result = train.train(cfg, batches, steps, lr=lr, seed=seed, eval_every=max(1, steps // 40),
                             on_progress=evaluated, on_step=step_done, tokenizer=tokenizer)
        seconds = time.monotonic() - clock["start"]  # measured wall time of this training, queue wait excluded
    st.session_state["trained_count"] = st.session_state.get("trained_count", 0) + 1
    extras = "".join([", MLP" if mlp else "", ", LN" if ln else ""])
    label = (f"trained #{st.session_state['trained_count']}: {n_layers}L×{n_heads}H d{d_model} ctx {n_ctx}{extras}, "
             f"{data.SOURCES[source]}, {steps} steps, lr {lr:g}, seed {seed}")
    add_session_model(label, io.to_bytes(result.model))
    st.session_state["last_trained"] = {"label": label, "history": result.history, "seconds": seconds}
    st.rerun()

last = st.session_state.get("last_trained")
if last and last["label"] in st.session_state.get("session_models", {}):
    st.subheader("The model you trained last")
    st.caption(last["label"])
    st.plotly_chart(figures.training_curves(last["history"]))
    final = last["history"][-1]
    scores = f" · induction {final['induction']:.2f} · previous-token {final['prev_token']:.2f}" if "induction" in final else ""
    st.success(f"Final loss {final['loss']:.3f} nats/token, second-repeat loss {final['repeat_loss']:.3f}{scores}. "
               f"Training took {last['seconds']:.1f} s here ({final['step'] / last['seconds']:.1f} steps/s). "
               "It is in the sidebar's model list for this session.")
    st.download_button("Download as .safetensors", st.session_state["session_models"][last["label"]],
                       file_name="addition-machines-model.safetensors", mime="application/octet-stream",
                       icon=":material/download:")
