"""Circuits, zero layers (Elhage et al. 2021): W_E W_U + b_U is a bigram table; the model's beside the corpus's."""

import pandas as pd
import streamlit as st

from classroom import keys
from classroom.admission import budget_mb
from classroom.experiments import compute
from classroom.page.layout import beside, figure, metric, prose, show, table
from classroom.page.questions import predict
from classroom.page.slides import controls
from classroom.page.text import literal, verdict
from classroom.page.widgets import selectbox
from classroom.session import part_model
from mechlib import bigrams, checks, circuits, figures

st.title("Circuits: zero layers")
prose("A model with no layers can only read the current token: its logits are W_E W_U + b_U, a table of which "
      "token comes next. This page reads that table straight from the weights and sets it beside the corpus's "
      "own.")
seed = st.session_state[keys.SEED]

key, model, name = part_model("attn-only-0l", lambda m: m.cfg.n_layers == 0 and m.tokenizer is not None
                              and m.cfg.positional == "shortformer" and m.cfg.normalization is None,
                              "it needs no layers, a tokenizer, shortformer positions and no LayerNorm")
V, steps = model.cfg.d_vocab, bigrams.fit_steps(model.cfg.d_vocab, model.cfg.d_model)
st.caption(f"Cost: about {bigrams.estimate_mb(V):,.0f} MB for the {V:,} × {V:,} bigram tables, of this server's "
           f"{budget_mb():,.0f} MB, and the first time up to {bigrams.FIT_SECONDS:.0f} s for the best fit "
           f"({steps:,} steps); then it is read from the cache.")
z = compute(circuits.zero_layer, model, key=key)
label = dict(zip(z.ids, z.labels))
with controls():
    current = selectbox("current token", z.ids, "z_token", label.__getitem__, z.ids.index(z.example))


def bigram_table() -> None:
    z = compute(circuits.zero_layer, model, key=key)
    st.latex(r"\text{logits}(t_{\text{next}} \mid t) = W_E[t]\, W_U + b_U")
    prose(f"Positions: {model.cfg.positional}. Shortformer positions enter only queries and keys, never the "
          "residual stream, so the logits of a zero-layer model are W_E W_U + b_U exactly, at every position.")
    c, d = z.ceiling, model.cfg.d_model
    for col, (what, value, helps) in zip(st.columns(4), [
            ("KL(corpus ‖ this model)", c.model_kl, "the model's W_E W_U + b_U against the corpus's bigrams"),
            (f"KL of the best rank-{d} fit", c.best_fit_kl, f"softmax(W_E W_U + b_U) fitted full-batch to the "
             f"corpus's bigrams at width {d}: the least a model of this width can reach"),
            ("KL of the unigram baseline", c.unigram_kl, "predicting p(next) whatever the current token"),
            ("bigram entropy H(next | current)", c.entropy, "the corpus's own loss: no model of the current token "
             "does better")]):
        metric(col, what, f"{value:.2g} nats" if value < 0.01 else f"{value:.3f} nats", help=helps)
    learned = (f"KL **{c.model_kl:.2g} nats** against a bound of **{z.bound:.3f} nats** ({checks.BIGRAM_KL_SHARE} × "
               f"the entropy) — {verdict(z.learned, 'learned', 'not learned')}: the model "
               f"{'has' if z.learned else 'has not'} learned the bigram statistics")
    best = (f"{'within' if z.at_best else 'more than'} {checks.BIGRAM_GAP_MAX} nats of the best rank-{d} fit — "
            f"{verdict(z.at_best, 'as good as its width allows', 'short of what its width allows')}")
    st.markdown(f"{learned}; {best}.")
    if c.fit_steps < bigrams.FIT_STEPS:
        st.caption(f"The best fit ran {c.fit_steps:,} of {bigrams.FIT_STEPS:,} steps, capped at about "
                   f"{bigrams.FIT_SECONDS:.0f} s for a {V:,}-token vocabulary: its KL is above the floor it "
                   "estimates, so the model may look closer to its width's best than it is.")


def next_tokens() -> None:
    z = compute(circuits.zero_layer, model, key=key)
    row = z.next_tokens[z.ids.index(current)]
    top, p, corpus_top, q = (row["model's next token"][0], row["model probability"][0],
                             row["corpus's next token"][0], row["corpus probability"][0])
    if predict("bigram", f"Which token does the bigram table W_E W_U + b_U predict after '{literal(label[current])}'?",
               sorted(literal(t) for t in row["model's next token"][:4]), [literal(top)],
            f"Row '{literal(label[current])}' of softmax(W_E W_U + b_U) puts **{p:.3f}** on '{literal(top)}'; in "
            f"the corpus, '{literal(corpus_top)}' follows it most often ({q:.3f}). Another current token, or "
            "another model, can answer differently."):
        table(pd.DataFrame(row).round(3), f"next tokens after {label[current]}")


def side_by_side() -> None:
    z = compute(circuits.zero_layer, model, key=key)
    names = z.labels[: circuits.TABLE_TOKENS]
    prose(f"The {circuits.TABLE_TOKENS} most frequent tokens: each row is a current token, each column a next one.")
    for col, (matrix, field, whose) in zip(beside(2), [(z.model_table, "model_table", "The model"),
                                                           (z.corpus_table, "corpus_table", "The corpus")]):
        title = f"{whose}: P(next | current)"
        with col:
            figure(f"{whose.lower()} bigrams", figures.token_heatmap, matrix, names, names, title, "next token",
                   "current token", "probability", diverging=False)


show([("Zero layers: W_E W_U is a bigram table", bigram_table),
      ("The next tokens after one current token", next_tokens),
      ("The model's table beside the corpus's", side_by_side)])
