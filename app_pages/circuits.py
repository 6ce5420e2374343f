"""Circuits (Elhage et al. 2021; Olsson et al. 2022) on the zoo's models: zero, one and two layers,
and the phase change in which induction heads form."""

import inspect

import numpy as np
import pandas as pd
import streamlit as st
import torch

from mechlib import circuits, data, figures, induction, zoo
from mechlib.device import budget_mb
from shell import current_model, slider, verdict

N_FREQUENT = 20  # tokens shown on token × token heatmaps


@st.cache_resource(max_entries=8, show_spinner="Counting the corpus's bigrams…")
def corpus_bigrams(key: tuple, _model) -> tuple[torch.Tensor | None, list[int]]:
    """P(next | current) on the built-in text and the token ids by frequency (read-only). A model without a
    tokenizer has no corpus: its ids are taken in order."""
    if _model.tokenizer is None:
        return None, list(range(2, _model.cfg.d_vocab))
    tokens = torch.tensor(_model.tokenizer.encode(data.builtin_text()))
    p_current, P = data.bigram_distribution(tokens, _model.cfg.d_vocab)
    return P, [int(i) for i in p_current.argsort(descending=True) if i >= 2]


def section_model(zoo_name: str, fits, why: str) -> tuple[tuple, object]:
    """The section's model: the zoo's ``zoo_name``, or the sidebar's when ``fits(model)``; a notice otherwise."""
    choice = st.radio("model for this section", [f"zoo: {zoo_name}", "the sidebar's model"], key=f"c_model_{zoo_name}",
                      horizontal=True)
    if choice == "the sidebar's model":
        key, model = current_model()
        if fits(model):
            if model.tokenizer is None:
                st.info("This model has no tokenizer: token tables use ids 2, 3, … instead of the most frequent tokens.")
            return key, model
        st.info(f"The sidebar's model does not fit this section ({why}); showing zoo: {zoo_name}.")
    return ("zoo", zoo_name), zoo.load(zoo_name)


def names_of(model, ids: list[int]) -> list[str]:
    return model.tokenizer.labels(ids) if model.tokenizer else [str(i) for i in ids]


@st.cache_data(max_entries=8)
def zero_layer(key: tuple, _model) -> dict:
    model = _model
    P, frequent = corpus_bigrams(key, model)
    with torch.inference_mode():
        model_probs = (model.embed.W_E @ model.unembed.W_U + model.unembed.b_U).softmax(-1).double().cpu()
    kl, entropy = circuits.bigram_kl(model)
    ids = frequent[:N_FREQUENT]
    return {"kl": kl, "entropy": entropy, "ids": ids, "frequent": frequent[:200],
            "model": model_probs[ids][:, ids].numpy(), "corpus": P[ids][:, ids].numpy(),
            "model_rows": model_probs[frequent[:200]].numpy(), "corpus_rows": P[frequent[:200]].numpy()}


@st.cache_data(max_entries=16)
def one_layer(key: tuple, _model, head: int, prompt: str) -> dict:
    model = _model
    _, frequent = corpus_bigrams(key, model)
    ids, vocabulary = frequent[:N_FREQUENT], frequent[:300]
    with torch.inference_mode():
        qk = circuits.qk_circuit(model, 0, head).rows(ids).columns(ids).dense().double().cpu().numpy()
        ov = circuits.ov_circuit(model, 0, head).rows(ids).columns(ids).dense().double().cpu().numpy()
        encoded = model.tokenizer.encode(prompt) if model.tokenizer else [2 + i % (model.cfg.d_vocab - 2) for i in range(8)]
        tokens = torch.tensor([[0] + encoded])[:, : model.cfg.n_ctx]
        logits, cache = model.run_with_cache(tokens)
        labels, paths = circuits.path_expansion(model, cache) if model.cfg.normalization is None else ([], None)
    eigen = {f"L0H{h}": circuits.ov_eigenvalues(model, 0, h).cpu().numpy() for h in range(model.cfg.n_heads)}
    return {"ids": ids, "qk": qk, "ov": ov, "copying": circuits.copying_scores(model)[0].numpy(), "eigen": eigen,
            "trigrams": circuits.skip_trigrams(model, 0, head, frequent[:40], vocabulary, per_destination=2)[:15],
            "path_labels": labels, "path_check": None if paths is None else float((paths.sum(0) - logits).abs().max()),
            "path_norms": None if paths is None else paths[:, 0].norm(dim=-1).mean(-1).cpu().double().numpy()}


@st.cache_data(max_entries=8)
def two_layers(key: tuple, _model, seed: int) -> dict:
    model = _model
    cfg = model.cfg
    length = induction.eval_length(cfg.n_ctx)
    tokens = induction.repeated_sequences(cfg.d_vocab, length, 1, seed)
    _, cache = model.run_with_cache(tokens)
    scores = induction.head_scores(model)
    prev = (0, int(scores["prev_token"][0].argmax()))
    ind = (1, int(scores["induction"][1].argmax()))
    ablated = induction.head_scores(model, ablate={prev: torch.zeros(cfg.d_head)})
    composition = {mode: circuits.composition_scores(model, mode)[0, :, 1].cpu().double().numpy() for mode in "QKV"}
    ceiling = circuits.composition_ceiling(model, "K")[0, :, 1].cpu().double().numpy()
    virtual = sorted(((float(composition["V"][a, b]), a, b) for a in range(cfg.n_heads) for b in range(cfg.n_heads)),
                     reverse=True)[:4]
    with torch.inference_mode():
        virtual = [(score, a, b, float(circuits.virtual_ov(model, (0, a), (1, b)).norm())) for score, a, b in virtual]
    return {"labels": names_of(model, tokens[0].tolist()),
            "patterns": induction.stacked_patterns(cache, cfg.n_layers)[:, 0].numpy(),
            "scores": {k: v.numpy() for k, v in scores.items()}, "ablated": {k: v.numpy() for k, v in ablated.items()},
            "prev": prev, "ind": ind, "composition": composition, "ceiling": ceiling, "virtual": virtual, "d_model": cfg.d_model, "d_head": cfg.d_head,
            "empirical": circuits.empirical_baseline(cfg.d_model, cfg.d_head, samples=100)}


@st.cache_data(max_entries=4, show_spinner="Scoring every checkpoint…")
def checkpoints() -> dict:
    """Per shipped checkpoint of attn-only-2l: the best induction score and the in-context-learning score."""
    steps, best, icl = zoo.snapshot_steps("attn-only-2l"), [], []
    for step in steps:
        model = zoo.load_snapshot("attn-only-2l", step)
        length = induction.eval_length(model.cfg.n_ctx)
        best.append(float(induction.head_scores(model)["induction"].max()))
        icl.append(induction.in_context_learning_score(model, induction.repeated_sequences(model.cfg.d_vocab, length, 16, 7)))
    return {"steps": steps, "induction": best, "icl": icl}


@st.cache_data(max_entries=32)
def snapshot(step: int, seed: int) -> dict:
    model = zoo.load_snapshot("attn-only-2l", step)
    scores = induction.head_scores(model)
    length = induction.eval_length(model.cfg.n_ctx)
    tokens = induction.repeated_sequences(model.cfg.d_vocab, length, 1, seed)
    _, cache = model.run_with_cache(tokens)
    return {"scores": {k: v.numpy() for k, v in scores.items()},
            "patterns": induction.stacked_patterns(cache, model.cfg.n_layers)[:, 0].numpy()}


st.title("Circuits")
st.markdown("This page reads the zoo's attention-only models straight from their weights: what a model with no "
            "layers can know, what one layer of heads adds, and how two layers build an induction head. "
            "Each section starts on the zoo model it names; switch it to the sidebar's model where that fits.")
section = st.radio("section", ["zero layers", "one layer", "two layers", "the phase change"], key="section",
                   bind="query-params", horizontal=True)
seed = st.session_state["seed"]

if section == "zero layers":
    st.subheader("Zero layers: W_E W_U is a bigram table (attn-only-0l)")
    st.latex(r"\text{logits}(t_{\text{next}} \mid t) = W_E[t]\, W_U + b_U")
    key, model = section_model("attn-only-0l", lambda m: m.cfg.n_layers == 0 and m.tokenizer is not None
                               and m.cfg.positional == "shortformer" and m.cfg.normalization is None,
                               "it needs no layers, a tokenizer, shortformer positions and no LayerNorm")
    z = zero_layer(key, model)
    tokenizer = model.tokenizer
    st.markdown(f"KL(corpus bigrams ‖ model) = **{z['kl']:.3f} nats**, against the corpus's own conditional bigram "
                f"entropy of **{z['entropy']:.3f} nats**: the model has learned the bigram statistics, as far as its "
                f"d_model = {model.cfg.d_model} allows. Tables show the {N_FREQUENT} most frequent tokens.")
    current = st.selectbox("current token", z["frequent"], format_func=lambda t: tokenizer.vocab[t], key="z_token",
                           bind="query-params")
    row = z["frequent"].index(current)
    top_model, top_corpus = np.argsort(-z["model_rows"][row])[:8], np.argsort(-z["corpus_rows"][row])[:8]
    st.dataframe(pd.DataFrame({
        "model's next token": [tokenizer.vocab[t] for t in top_model],
        "model probability": np.round(z["model_rows"][row][top_model], 3),
        "corpus's next token": [tokenizer.vocab[t] for t in top_corpus],
        "corpus probability": np.round(z["corpus_rows"][row][top_corpus], 3)}), hide_index=True)
    names = tokenizer.labels(z["ids"])
    left, right = st.columns(2)
    left.plotly_chart(figures.token_heatmap(z["model"], names, names, "The model: P(next | current)", "next token",
                                            "current token", "probability", diverging=False))
    right.plotly_chart(figures.token_heatmap(z["corpus"], names, names, "The corpus: P(next | current)", "next token",
                                             "current token", "probability", diverging=False))

elif section == "one layer":
    st.subheader("One layer: skip-trigrams and copying (attn-only-1l)")
    key, model = section_model("attn-only-1l", lambda m: m.cfg.n_layers >= 1, "it needs at least one layer")
    st.caption("Layer 0's heads are read; with more layers, later ones also act on them, so the one-layer reading is "
               "the direct part only." if model.cfg.n_layers > 1 else "")
    head = slider("head", 0, model.cfg.n_heads - 1, 0, key="c_head")
    prompt = st.text_input("prompt for the path expansion", "the class of an object is its type . the class of",
                           key="c_prompt", bind="query-params")
    o = one_layer(key, model, head, prompt)
    names = names_of(model, o["ids"])
    vocab_name = (lambda t: model.tokenizer.vocab[t]) if model.tokenizer else str
    left, right = st.columns(2)
    left.plotly_chart(figures.token_heatmap(o["qk"], names, names, f"QK circuit of L0H{head}: W_E W_QK W_Eᵀ",
                                            "source token", "destination token", "score"))
    right.plotly_chart(figures.token_heatmap(o["ov"], names, names, f"OV circuit of L0H{head}: W_E W_OV W_U",
                                             "output token (logit raised)", "source token (attended to)", "logit"))
    st.markdown("**Skip-trigrams** read off the two circuits: the destination attends to the source (QK), and "
                "attending to the source raises the output (OV).")
    st.dataframe(pd.DataFrame([{"skip-trigram": f"{vocab_name(s)} … {vocab_name(d)} → {vocab_name(out)}",
                                "QK score": round(q, 2), "OV logit": round(v, 2)} for s, d, out, q, v in o["trigrams"]]),
                 hide_index=True)
    left, right = st.columns([3, 2])
    left.plotly_chart(figures.eigenvalues_plot(o["eigen"]))
    copying = o["copying"]
    right.dataframe(pd.DataFrame({"head": [f"L0H{h}" for h in range(len(copying))],
                                  "copying score Σλ / Σ|λ|": np.round(copying, 3)}), hide_index=True)
    right.markdown(f"**{int((copying > 0).sum())} of {len(copying)} heads copy** (positive copying score).")
    if o["path_check"] is None:
        st.info("Path expansion is exact only without LayerNorm; this model has it, so the paths are not shown.")
    else:
        st.markdown(f"**Path expansion**: the logits as the direct path plus one term per head plus biases. Their sum "
                    f"against the model's logits on the prompt: max |difference| **{o['path_check']:.1e}** — "
                    f"{verdict(o['path_check'] <= 1e-4)} (float32, bound 1e-4).")
        st.dataframe(pd.DataFrame({"path": o["path_labels"], "mean ‖logit contribution‖": np.round(o["path_norms"], 3)}),
                     hide_index=True)

elif section == "two layers":
    st.subheader("Two layers: composition and the induction circuit (attn-only-2l)")
    key, model = section_model("attn-only-2l", lambda m: m.cfg.n_layers >= 2 and circuits.composition_mb(m) <= budget_mb(),
                               f"it needs two layers or more, and composition scores within {budget_mb():,.0f} MB")
    t = two_layers(key, model, seed)
    heads = [f"L1H{h}" for h in range(t["composition"]["K"].shape[1])]
    earlier = [f"L0H{h}" for h in range(t["composition"]["K"].shape[0])]
    baseline = circuits.random_baseline(t["d_model"])
    cols = st.columns(3)
    for col, mode in zip(cols, "QKV"):
        col.plotly_chart(figures.composition_heatmap(t["composition"][mode], earlier, heads, baseline, mode))
    strongest = sorted(((t["composition"][m][a, b], m, a, b) for m in "QKV" for a in range(len(earlier))
                        for b in range(len(heads))), reverse=True)[:3]
    st.markdown(f"Random heads compose at about 1/√d_model = **{baseline:.3f}** (random factors of these sizes: "
                f"**{t['empirical']:.3f}**). Strongest: " + "; ".join(f"L0H{a} → L1H{b} by {m}: **{s:.2f}**"
                                                                      for s, m, a, b in strongest) + ".")
    st.markdown("**Virtual heads.** When a layer-1 head reads, through its values, what a layer-0 head wrote, the two act "
                "as one virtual head whose OV circuit is W_OV^(layer 0) W_OV^(layer 1). The strongest pairs by V-composition:")
    st.dataframe(pd.DataFrame([{"virtual head": f"L0H{a} → L1H{b}", "V-composition": round(score, 3),
                                "‖W_OV^0 W_OV^1‖_F": round(norm, 2)} for score, a, b, norm in t["virtual"]]),
                 hide_index=True)
    st.plotly_chart(figures.patterns_grid(t["patterns"], "Every head on a repeated random sequence: "
                                          "induction heads attend one token after each earlier copy"))
    s, a = t["scores"], t["ablated"]
    table = pd.DataFrame({"head": [f"L{l}H{h}" for l in range(s["induction"].shape[0]) for h in range(s["induction"].shape[1])],
                          "previous-token": s["prev_token"].flatten().round(3),
                          "duplicate-token": s["duplicate_token"].flatten().round(3),
                          "induction (prefix matching)": s["induction"].flatten().round(3)})
    st.dataframe(table, hide_index=True)
    (pl, ph), (il, ih) = t["prev"], t["ind"]
    st.markdown(
        f"**The circuit, as found.** L{pl}H{ph} is a previous-token head (score {s['prev_token'][pl, ph]:.2f}): it "
        f"writes \"my previous token was A\" into each position. L{il}H{ih} K-composes with it: its keys read that, "
        f"so a query for A finds the position after the earlier A (induction score {s['induction'][il, ih]:.2f}), and "
        f"its OV circuit copies the token found there. Their K-composition is **{t['composition']['K'][ph, ih]:.2f}**, "
        f"against {baseline:.2f} for random heads and a ceiling of **{t['ceiling'][ph, ih]:.2f}** for these two heads: "
        f"with σ and τ their singular values, no alignment of the two can score above √(Σ σᵢ² τᵢ²) / (‖σ‖ ‖τ‖).")
    st.markdown(f"**Ablation proof.** With L{pl}H{ph}'s output set to zero (a functional argument; the shared model "
                f"is untouched), L{il}H{ih}'s induction score falls from **{s['induction'][il, ih]:.3f}** to "
                f"**{a['induction'][il, ih]:.3f}** — {verdict(a['induction'][il, ih] < 0.5 * s['induction'][il, ih], 'it depends on the previous-token head', 'no drop')}.")

else:
    st.subheader("The phase change: induction heads form suddenly (attn-only-2l's training)")
    history = zoo.history("attn-only-2l")
    steps = zoo.snapshot_steps("attn-only-2l")
    step = st.select_slider("training step", steps, steps[-1], key="c_step", bind="query-params")
    fig = figures.training_curves(history)
    fig.add_vline(x=step, line_dash="dash", line_color="black", annotation_text=f"step {step:,}")
    st.plotly_chart(fig)
    every = checkpoints()
    snap = snapshot(step, seed)
    best = snap["scores"]
    i = every["steps"].index(step)
    st.markdown(f"At step {step:,}: best previous-token score **{best['prev_token'].max():.2f}** (layer 0 head "
                f"{int(best['prev_token'][0].argmax())}), best induction score **{best['induction'].max():.2f}**, "
                f"in-context-learning score **{every['icl'][i]:+.2f} nats** (loss at the last position minus loss a "
                "tenth of the way in, on repeated sequences: negative when the context helps).")
    st.dataframe(pd.DataFrame({"step": every["steps"], "best induction score": np.round(every["induction"], 3),
                               "in-context-learning score (nats)": np.round(every["icl"], 2)}), hide_index=True, height=240)
    st.plotly_chart(figures.patterns_grid(snap["patterns"], f"Every head at step {step:,}"))

with st.expander("Under the hood"):
    st.code("\n".join(inspect.getsource(f) for f in (
        circuits.composition_scores, circuits._writers_and_readers, circuits._orthonormal_left,
        circuits._squared_norms_by_gram, circuits._squared_norms_directly, circuits.composition_ceiling,
        circuits.copying_scores)))
