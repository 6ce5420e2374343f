"""Equivalence: concat-then-project equals project-per-head-then-sum (seed 000)."""

import inspect

import pandas as pd
import streamlit as st

from mechlib import attention, equivalence, figures
from mechlib.config import divisors
from mechlib.device import MEMORY, BudgetError, budget_mb
from shell import check_line, select_slider, slider


@st.cache_data(max_entries=64, show_spinner="Computing both readings…")
def compute(batch: int, seq: int, d_vocab: int, d_model: int, n_heads: int, seed: int,
            dtype: str, position: int) -> equivalence.EquivalenceResult:
    with MEMORY.hold(equivalence.peak_mb(batch, seq, d_vocab, d_model, n_heads), "this attention layer"):
        return equivalence.run(batch, seq, d_vocab, d_model, n_heads, seed, dtype, position)


st.title("Multi-head attention is a sum over heads")
st.markdown(
    "The textbook picture concatenates the H heads' outputs and multiplies the result by one big W_O. "
    "Cut W_O into H horizontal slices of d_head rows and the same product is a **sum**: each head multiplies "
    "its own slice, and the H results add. Nothing is lost; each head simply writes its own term into the output."
)
st.latex(r"\operatorname{concat}(z^1,\dots,z^H)\,W_O \;=\; \sum_{h=1}^{H} z^h\,W_O^h,"
         r"\qquad W_O=\begin{bmatrix}W_O^1\\ \vdots\\ W_O^H\end{bmatrix},\; W_O^h\in\mathbb{R}^{d_\text{head}\times D}")

sizes = equivalence.SEED_SIZES
left, middle, right = st.columns(3)
with left:
    batch = slider("batch B", 1, 8, sizes["batch"], key="B")
    seq = slider("sequence length S", 2, 128, sizes["seq"], key="S")
with middle:
    d_vocab = slider("vocabulary V", 2, 50_000, sizes["d_vocab"], key="V")
    d_model = slider("d_model D", 8, 1024, sizes["d_model"], key="D", step=8)
with right:
    n_heads = select_slider("heads H (divisors of D)", [h for h in divisors(d_model) if h <= 64], sizes["n_heads"], key="H")
    dtype = st.radio("precision of the run", ["float32", "float64"], key="dtype", bind="query-params", horizontal=True)
seed = st.session_state["seed"]
st.caption(f"d_head = D / H = {d_model} / {n_heads} = **{d_model // n_heads}** · seed {seed} (sidebar) · "
           "random weights W_E, W_pos, W_Q, W_K, W_V, W_O and random tokens")

st.subheader("The steps, with the shapes of your sizes")
st.table(pd.DataFrame(equivalence.steps(batch, seq, d_vocab, d_model, n_heads)).set_index("step"))
st.caption("Rows 8a–9a are the concatenating reading; rows 8b–9b the additive one. Both start from the same z.")

checks_area, wo_area = st.container(), st.container()  # filled below, once the position is chosen

st.subheader("What each head adds at one position")
position = slider("position", 0, seq - 1, min(seq - 1, 5), key="pos")
try:
    result = compute(batch, seq, d_vocab, d_model, n_heads, seed, dtype, position)
except (ValueError, BudgetError) as error:
    st.error(str(error))
    st.stop()

with checks_area:
    st.subheader("Both readings on the same weights")
    for name in sorted(result.checks):
        st.markdown(check_line(f"Σ heads against concat → W_O in {name}, over all {batch} × {seq} × {d_model} "
                               "entries (batch × position × d_model)", result.checks[name]))
    left, right = st.columns(2)
    left.metric(f"concat → W_O, {dtype}", f"{result.time_ms['concat_then_project']:.3f} ms",
                help="Median of 5 runs of concat_then_project(z, W_O).")
    right.metric(f"per head → Σ, {dtype}", f"{result.time_ms['per_head_then_sum']:.3f} ms",
                 help="Median of 5 runs of per_head_results(z, W_O).sum(head). It builds a B×S×H×D tensor, so it is "
                      "usually slower: the additive reading is for understanding, not for speed.")

    st.subheader("One-hot × W_E is an embedding lookup")
    st.markdown(f"one-hot ({batch} × {seq} × {d_vocab:,}) @ W_E ({d_vocab:,} × {d_model}) against W_E[tokens]: "
                "each row of the product picks exactly one row of W_E, so the two agree exactly.")
    for name, check in result.lookups.items():
        if check is None:
            macs = batch * seq * d_vocab * d_model
            st.info(f"{name}: skipped — the one-hot check would need {result.lookup_mb[name]:,.0f} MB more and "
                    f"{macs:,.0f} multiply-adds; this server allows {budget_mb():,.0f} MB and "
                    f"{equivalence.LOOKUP_MAX_MACS:,.0f} per request. Only the lookup W_E[tokens] ran; "
                    "lower B, S or V to see the product checked.")
        else:
            st.markdown(check_line(f"One-hot @ W_E against W_E[tokens] in {name}", check)
                        + f" ({result.lookup_mb[name]:,.1f} MB for the one-hot check)")

with wo_area:
    st.subheader("W_O is H row blocks, one per head")
    d_head = d_model // n_heads
    row = slider("a row of the concatenated W_O", 0, d_model - 1, min(d_model - 1, 70), key="row")
    head, local = equivalence.wo_row_owner(row, d_head)
    block = check_line("Every row of the matrix that concat → W_O multiplies (read off `concat_then_project` itself) "
                       "against that row of the block the per-head path uses", result.wo_block_check)
    st.markdown(f"Row **{row}** belongs to head **{row} // {d_head} = {head}**, as row **{row} mod {d_head} = {local}** "
                f"of its block W_O[{head}]. {block}.")
    st.plotly_chart(figures.wo_blocks(n_heads, d_head, d_model, row))

summed = result.head_results.sum(0)
left, right = st.columns(2)
with left:
    st.plotly_chart(figures.head_norms_bar(result.head_norms, float((summed**2).sum() ** 0.5), position))
with right:
    st.plotly_chart(figures.head_contributions_heatmap(result.head_results, summed, result.attn_out, position))
st.markdown(check_line(f"Σ_h result_h against the attention output at position {position} (batch item 0) in {dtype}",
                       result.position_check))

with st.expander("Under the hood"):
    st.markdown("`mechlib.attention`: the two readings the checks compare (z: `[batch, pos, head, d_head]`).")
    st.code(inspect.getsource(attention.concat_then_project) + "\n" + inspect.getsource(attention.per_head_results))
    st.markdown("`mechlib.equivalence`: the row-block check, on the matrix read off `concat_then_project`.")
    st.code(inspect.getsource(equivalence.concatenated_W_O) + "\n" + inspect.getsource(equivalence.wo_block_check))
    st.code(f"result = mechlib.equivalence.run(batch={batch}, seq={seq}, d_vocab={d_vocab}, d_model={d_model}, "
            f"n_heads={n_heads}, seed={seed}, dtype={dtype!r}, position={position})")
