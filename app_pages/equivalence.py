"""Equivalence: concat-then-project equals project-per-head-then-sum (the reading “Transformers (and attention) are
just fancy addition machines”)."""

import numpy as np
import pandas as pd
import streamlit as st

from classroom import keys
from classroom.admission import budget_mb
from classroom.experiments import compute
from classroom.page.layout import beside, figure, metric, prose, show, source, table
from classroom.page.part import derived, record
from classroom.page.questions import exercise, predict
from classroom.page.slides import controls
from classroom.page.text import check_line
from classroom.page.widgets import select_slider, slider
from mechlib import attention, equivalence, figures
from mechlib.config import divisors

st.title("Multi-head attention is a sum over heads")
prose(
    "The textbook picture concatenates the H heads' outputs and multiplies the result by one big W_O. "
    "Cut W_O into H horizontal slices of d_head rows and the same product is a **sum**: each head multiplies "
    "its own slice, and the H results add. Nothing is lost; each head simply writes its own term into the output."
)
st.latex(r"\operatorname{concat}(z^1,\dots,z^H)\,W_O \;=\; \sum_{h=1}^{H} z^h\,W_O^h,"
         r"\qquad W_O=\begin{bmatrix}W_O^1\\ \vdots\\ W_O^H\end{bmatrix},\; W_O^h\in\mathbb{R}^{d_\text{head}\times D}")

sizes = equivalence.SEED_SIZES
with controls():
    left, middle, right = st.columns(3)
    with left:
        batch = slider("batch B", 1, 8, sizes["batch"], key="B")
        seq = slider("sequence length S", 2, 128, sizes["seq"], key="S")
    with middle:
        d_vocab = slider("vocabulary V", 2, 50_000, sizes["d_vocab"], key="V")
        d_model = slider("d_model D", 8, 1024, sizes["d_model"], key="D", step=8)
    with right:
        n_heads = select_slider("heads H (divisors of D)", [h for h in divisors(d_model) if h <= 64], sizes["n_heads"], key="H")
        dtype = st.radio("precision of the run", ["float32", "float64"], index=0, key="dtype", bind="query-params",
                         horizontal=True)
    seed = st.session_state[keys.SEED]
    d_head = d_model // n_heads
    st.caption(f"d_head = D / H = {d_model} / {n_heads} = **{d_head}** · seed {seed} (sidebar) · "
               "random weights W_E, W_pos, W_Q, W_K, W_V, W_O and random tokens")
    left, middle, right = st.columns(3)
    with left:
        position = slider("position i (batch item 0)", 0, seq - 1, min(seq - 1, 5), key="pos")
    with middle:
        column = slider("output column j (a d_model index)", 0, d_model - 1, 0, key="j")
    with right:
        row = slider("a row of the concatenated W_O", 0, d_model - 1, min(d_model - 1, 70), key="row")

try:
    result = compute(equivalence.run, batch, seq, d_vocab, d_model, n_heads, seed, dtype, position, budget_mb())
except ValueError as error:
    st.error(str(error))
    st.stop()

def step_table() -> None:
    rows = equivalence.steps(batch, seq, d_vocab, d_model, n_heads)
    step6 = next(r for r in rows if r["step"] == "6")
    prose("The reading's steps, numbered as the reading numbers them, with your sizes. Where it writes one head's "
          "shape (H = 1 at steps 5–7 and 8′), the next column has all H heads at once. Step 6a is our addition: the "
          "reading skips scaling and masking. Steps 8′ and 9′ are its additive reading, which replaces 8 and 9; both "
          "endings start from the same z.")
    if exercise("step 6", f"Predict the shape of the scores Q Kᵀ at step 6 for all H = {n_heads} heads at once "
                       f"(B = {batch}, S = {seq}, D = {d_model}, d_head = {d_head}).",
             equivalence.scores_shape_options(batch, seq, d_model, n_heads), [step6["all heads"]],
             "Each head multiplies its Q (S × d_head) by its Kᵀ (d_head × S): one S × S matrix of scores per head, "
             f"H of them per batch item, B × H × S × S = {step6['all heads']}. The reading writes one head's, "
             f"{step6['as the reading writes it']}."):
        table(pd.DataFrame(rows), "steps")


def both_readings() -> None:
    other = "float64" if dtype == "float32" else "float32"
    diff, other_diff = result.checks[dtype].max_abs_diff, result.checks[other].max_abs_diff
    if not predict("float", f"Concat-then-project and the per-head sum add the same {d_model} products into each output "
                     f"entry, in different orders. Computed in {dtype}, will they differ? By how much, at most, over all "
                     f"{batch} × {seq} × {d_model} entries?",
            list(equivalence.DIFFERENCES), [equivalence.difference_bucket(diff)],
            f"The largest |difference| in {dtype} is {diff:.1e}; in {other} the same sums differ by {other_diff:.1e} "
            f"({equivalence.difference_bucket(other_diff)}). Every addition rounds to {dtype}'s precision (machine "
            f"epsilon {np.finfo(dtype).eps:.1e}), " + ("so adding in another order changed the last bits here."
                                                      if diff > 0 else "yet here both orders rounded alike.")):
        return
    for name in sorted(result.checks):
        st.markdown(check_line(f"Σ heads against concat → W_O in {name}, over all {batch} × {seq} × {d_model} "
                               "entries (batch × position × d_model)", result.checks[name]))
    left, right = st.columns(2)
    metric(left, f"concat → W_O, {dtype}", f"{result.time_ms['concat_then_project']:.3f} ms",
           help="Median of 5 runs of concat_then_project(z, W_O).")
    metric(right, f"per head → Σ, {dtype}", f"{result.time_ms['per_head_then_sum']:.3f} ms",
           help="Median of 5 runs of per_head_results(z, W_O).sum(head). It builds a B×S×H×D tensor, so it is "
                "usually slower: the additive reading is for understanding, not for speed.")


def one_hot() -> None:
    prose(f"one-hot ({batch} × {seq} × {d_vocab:,}) @ W_E ({d_vocab:,} × {d_model}) against W_E[tokens]: each entry "
          f"of the product adds {d_vocab:,} products, one of them 1 × w and the rest 0 × w, so each row of the "
          "product picks exactly one row of W_E.")
    check = result.lookups[dtype]
    if check is not None and not predict("one-hot", f"In {dtype}, how far apart are one-hot @ W_E and the lookup W_E[tokens], at most?",
                list(equivalence.DIFFERENCES), [equivalence.difference_bucket(check.max_abs_diff)],
                f"The largest |difference| is {check.max_abs_diff:.1e}. 1 × w and 0 × w are exact in any precision, "
                f"and so is adding {d_vocab - 1:,} zeros to w: no addition here rounds."):
        return
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


def wo_rows() -> None:
    head, local = equivalence.wo_row_owner(row, d_head)
    options = equivalence.row_owner_options(row, n_heads, d_head)
    if len(options) > 1 and not predict("row", f"Row {row} of the concatenated W_O ({d_model} × {d_model}): which head's block holds it, and "
                       "which row of that block? (Heads and rows count from 0.)", options, [f"head {head}, row {local}"],
                f"Concatenation lays out head 0's {d_head} numbers first, then head 1's, and so on, and W_O's rows "
                f"follow that order: row {row} is in block {row} // {d_head} = {head}, at its row {row} mod {d_head} = "
                f"{local}. The check below reads the matrix off concat_then_project itself."):
        return
    block = check_line("Every row of the matrix that concat → W_O multiplies (read off `concat_then_project` itself) "
                       "against that row of the block the per-head path uses", result.wo_block_check)
    st.markdown(f"Row **{row}** belongs to head **{row} // {d_head} = {head}**, as row **{row} mod {d_head} = {local}** "
                f"of its block W_O[{head}]. {block}.")
    figure("W_O row blocks", figures.wo_blocks, n_heads, d_head, d_model, row)


def per_position() -> None:
    total_norm = float(np.linalg.norm(result.head_results.sum(0)))
    norms = result.head_norms
    if n_heads > 1 and not predict("length", f"At position {position}, the attention output is the sum of the {n_heads} heads' vectors "
                          f"result_h ({d_model} numbers each). How long is the sum, ‖Σ_h result_h‖?",
                list(equivalence.LENGTHS), [equivalence.output_length(norms, total_norm)],
                f"‖Σ_h result_h‖ = {total_norm:.3f}. The heads' lengths run from {norms.min():.3f} to {norms.max():.3f}; "
                f"at right angles they would add to √(Σ_h ‖result_h‖²) = {np.sqrt((norms**2).sum()):.3f}, all "
                f"pointing one way to Σ_h ‖result_h‖ = {norms.sum():.3f}. Vectors add with their directions, so the "
                "sum's length tells how the heads' directions relate."):
        return
    left, right = beside(2)
    with left:
        figure("each head's length", figures.head_norms_bar, norms, total_norm, position)
    with right:
        figure("per-head vectors", figures.head_contributions_heatmap, result.head_results,
               derived(np.sum, result.head_results, axis=0), result.attn_out, position)
    st.markdown(check_line(f"Σ_h result_h against the attention output at position {position} (batch item 0) in {dtype}",
                           result.position_check))


def one_element() -> None:
    element = derived(equivalence.element, result, position, column)
    prose(f"The reading's R₁,₁ argument, for any element. One number of the output is a sum over the D = {d_model} "
          "entries k of the concatenated heads h: R[i, j] = Σ_k h[i, k] · W_O[k, j] (counting from 0, so the "
          f"reading's R₁,₁ is R[0, 0]; batch item 0). Entry k belongs to head k // {d_head}, so the {d_model} terms "
          f"come in {n_heads} runs of {d_head}, one run per head. Each run adds up to that head's own result at "
          "[i, j], and the runs' partial sums add up to the one long sum: that is all the equivalence says.")
    largest = equivalence.largest_partial(element.partial_sums)
    ranked = np.argsort(-np.abs(element.partial_sums))
    if not predict("largest", f"Of the {n_heads} partial sums that make R[{position}, {column}], which head's is largest in "
                       "magnitude?", [f"head {h}" for h in range(n_heads)], [f"head {largest}"],
            f"Head {largest}'s partial sum is {element.partial_sums[largest]:+.4f}"
            + (f"; next comes head {ranked[1]}'s, {element.partial_sums[ranked[1]]:+.4f}" if n_heads > 1 else "")
            + f". R[{position}, {column}] = {element.output:+.4f}."):
        return
    figure("terms of one element", figures.element_terms, element.terms, element.partial_sums, position, column)
    table(pd.DataFrame({"head": range(n_heads),
                        "k (its rows of W_O)": [f"{h * d_head}–{(h + 1) * d_head - 1}" for h in range(n_heads)],
                        f"partial sum of {d_head} terms": element.partial_sums,
                        "the head's own result z_h W_O^h at [i, j]": element.per_head}),
          "partial sums", height=min(38 + 35 * n_heads, 400))
    st.markdown(f"Σ of the {n_heads} partial sums = **{element.total:+.6f}**; R[{position}, {column}] as the layer "
                f"computed it (concat → W_O, {dtype}) = **{element.output:+.6f}**.")
    record(f"R[{position}, {column}] from concat → W_O", f"{element.output:+.9g}")
    record(f"Σ of the {n_heads} partial sums", f"{element.total:+.9g}")
    st.markdown(check_line(f"Σ of the {n_heads} partial sums against R[{position}, {column}] from concat → W_O, in "
                           f"{dtype}", element.check))
    prose("**An aside: heads as channels.** A convolution layer in a CNN works the same way. Each input channel "
          "is filtered on its own, and the filtered maps are added into one output map. Here each head plays an "
          f"input channel: its {d_head} numbers go through its own W_O block, its filter into the {d_model}-wide "
          "output, and the output is the sum of the filtered heads. Concatenating first just stacks the channels "
          "so that one big multiplication does every filter and the sum at once.")


show([("The steps, with the shapes of your sizes", step_table),
      ("Both readings on the same weights", both_readings),
      ("One-hot × W_E is an embedding lookup", one_hot),
      ("W_O is H row blocks, one per head", wo_rows),
      ("What each head adds at one position", per_position),
      ("One output element R[i, j] as a sum over heads", one_element)])  # titles stay put as sliders move

with st.expander("Under the hood"):
    st.markdown("`mechlib.attention`: the two readings the checks compare (z: `[batch, pos, head, d_head]`).")
    st.code(source(attention.concat_then_project, attention.per_head_results))
    st.markdown("`mechlib.equivalence`: the row-block check, on the matrix read off `concat_then_project`, and one "
                "output element taken apart into per-head partial sums.")
    st.code(source(equivalence.concatenated_W_O, equivalence.wo_block_check, equivalence.element))
    st.code(f"result = mechlib.equivalence.run(batch={batch}, seq={seq}, d_vocab={d_vocab}, d_model={d_model}, "
            f"n_heads={n_heads}, seed={seed}, dtype={dtype!r}, position={position})")
