"""Which input, or which mechanism? Shapley values (Shapley 1953) over a transformer's heads, against direct logit
attribution and activation patching; SHAP and LIME over its input tokens (Lundberg & Lee 2017; Ribeiro et al. 2016),
against the induction head's own attention; and a convolution's input channels as the heads of W_O."""

import numpy as np
import pandas as pd
import streamlit as st

from classroom import keys, pages
from classroom.admission import budget_mb
from classroom.experiments import compute
from classroom.page.layout import figure, metric, prose, show, source, table
from classroom.page.part import record
from classroom.page.questions import predict
from classroom.page.slides import controls, own_slide
from classroom.page.text import check_line, literal, verdict
from classroom.session import part_model
from mechlib import channels, circuits, data, figures, induction, patching, patterns, shapley, token_attribution

COST_MAX = shapley.COST_MAX  # one part's forward passes × the prompt's positions × the model's parameters: GPT-2
                             # small's game samples 16 orderings of a 6-token prompt within it (bench/shapley_speed.py)
BASELINES = {"zero": "zero", "mean": "mean over text", "resample": "resample"}
ABSENT = {"zero": "zero: it writes nothing", "mean": "its mean output over windows of the built-in text",
          "resample": "its output on the corrupted prompt, whose first copy is other random tokens"}
METRICS = ("logit difference", "log-probability")
TOKEN_BASELINES = {"unk": "<unk>'s embedding", "mean": "the mean embedding"}
TOKEN_ABSENT = {"unk": "the embedding of the unknown token, `<unk>`", "mean": "the mean of W_E's rows"}
OTHER = "another token"
HEAD_OPTIONS = 8  # a question's heads at most: attn-only-2l's all; of more, the largest in either game

st.title("Which input, or which mechanism?")
prose("SHAP and LIME ask which **input** a prediction rests on. Mechanistic interpretability asks which **component** "
      "computes it. Both can be asked with the same tool: a cooperative game whose players share out one number, "
      "the model's score for its prediction, by their Shapley values. Here the players are first the model's heads, "
      "then its input tokens, on one prediction the induction circuit makes: the next token of a repeated random "
      "sequence.")
st.latex(r"\varphi_i=\sum_{S\subseteq N\setminus\{i\}}\frac{|S|!\,(n-|S|-1)!}{n!}\,\big(v(S\cup\{i\})-v(S)\big),"
         r"\qquad \sum_i \varphi_i = v(N)-v(\varnothing)")
seed = st.session_state[keys.SEED]


def fits(model) -> bool:
    """Two layers or more (a previous-token head and a later induction head), induction scores readable at its
    sizes, and the Shapley game within the server's memory budget (the door refuses a part that needs more)."""
    if model.cfg.n_layers < 2 or not induction.scorable(model.cfg):
        return False
    prompt = shapley.induction_prompt(model.cfg.d_vocab, model.cfg.n_ctx, seed, shapley.prompt_length(model, COST_MAX))
    return shapley.shapley_mb(model, prompt.ids) <= budget_mb()


key, model, name = part_model("attn-only-2l", fits, "it needs two layers or more, " + induction.SIZES_NEEDED
                              + f", and its Shapley game within {budget_mb():,.0f} MB")
cfg = model.cfg
with controls():
    left, middle, right = st.columns(3)
    with left:
        baseline = st.radio("an absent head's output", list(BASELINES), 0, key="w_baseline", bind="query-params",
                            format_func=BASELINES.get, help="What replaces a head that is not in the coalition.")
    with middle:
        metric_name = st.radio("the score shared out", METRICS, 0, key="w_metric", bind="query-params")
    with right:
        token_baseline = st.radio("an absent token's embedding", list(TOKEN_BASELINES), 0, key="w_token",
                                  bind="query-params", format_func=TOKEN_BASELINES.get,
                                  help="What replaces a token that is not in the coalition (part 3).")

length = shapley.prompt_length(model, COST_MAX)  # each copy's tokens: the scored length, or fewer for a large model
prompt = shapley.induction_prompt(cfg.d_vocab, cfg.n_ctx, seed, length)
ids, corrupted = prompt.ids, prompt.corrupted
labels = data.token_labels(model.tokenizer, ids)
right_label, wrong_label = data.token_labels(model.tokenizer, [prompt.metric.right, prompt.metric.wrong])
logit_metric = prompt.metric
score = logit_metric if metric_name == METRICS[0] else shapley.Metric(logit_metric.right)
said = (f"logit('{literal(right_label)}') − logit('{literal(wrong_label)}')" if score.linear
        else f"log p('{literal(right_label)}')")
last = len(ids) - 1  # <bos>, a segment of `length` tokens, then the segment again less its last token
roles = {last: "the last token", length - 1: "its earlier copy", length: "the answer, after that copy"}
scored = data.eval_length(cfg.n_ctx)
shortened = (f" ({length}, not the {scored} induction is scored at: at {scored} fewer than {shapley.PERMUTATIONS} "
             f"orderings of {name}'s game fit this server's cost limit for one part)" if length < scored else "")
st.markdown(f"The prompt: <bos>, {length} random tokens from seed {seed}{shortened}, then the same tokens again, less "
            "the last. "
            f"At the last position ('{literal(labels[last])}') the model should predict '{literal(right_label)}', "
            f"the token that followed its earlier copy. The score shared out: **{said}** at the last position "
            + ("(the corrupted prompt's token there is the wrong one)." if score.linear else "(in nats)."))

n_players = len(shapley.players(model))
allowed = int(COST_MAX // (len(ids) * cfg.n_params()))  # forward passes of this model one part may run
permutations = shapley.permutations_within(model, len(ids), baseline, COST_MAX)  # None: every coalition


def too_costly(what: str) -> bool:
    """Whether not even two orderings of the game fit this server's limit (no standard error without two); the
    refusal, with its numbers, is on screen."""
    if permutations is None or permutations >= 2:
        return False
    passes = shapley.shapley_evaluations(model, ids, score, baseline, corrupted, 2, seed)
    st.warning(f"{what}: not even two orderings of the game fit, and one gives no standard error: two orderings of "
               f"{n_players} players take {passes:,} forward passes of {len(ids)} positions through {name} "
               f"({cfg.n_params():,} parameters), {shapley.shapley_cost(model, len(ids), baseline, 2):.2e} "
               f"parameter-positions, over this server's {COST_MAX:.0e} for one part ({allowed:,} forward passes). "
               "Choose a smaller model in the sidebar, or run it from a notebook.", icon=":material/block:")
    return True


def forwards_line(count: int, what: str) -> str:
    return (f"{what}: **{count:,}** forward passes of {len(ids)} positions through {name} "
            f"({cfg.n_params():,} parameters); this server runs at most {allowed:,} of them for one part.")


def refused(count: int, what: str) -> bool:
    """Whether ``count`` forward passes are over this server's limit for one part; the refusal, with both counts, is
    on screen."""
    if count <= allowed:
        return False
    st.warning(f"{what}: {count:,} forward passes through {name}, more than the {allowed:,} this server runs "
               "for one part. Choose a smaller model in the sidebar, or run it from a notebook.",
               icon=":material/block:")
    return True


def heads_of(players: tuple[str, ...]) -> list[str]:
    return [player for player in players if player != shapley.DIRECT_PATH and not player.endswith("MLP")]


def heads_as_players() -> None:
    if too_costly(f"The game of {n_players} players"):
        return
    count = shapley.shapley_evaluations(model, ids, score, baseline, corrupted, permutations, seed)
    how = (f"exact over all 2^{n_players} coalitions" if permutations is None else
           f"too many for every coalition here, so {permutations} random orderings are sampled (as many as this "
           f"server's limit allows, {shapley.PERMUTATIONS} at most), each value with its standard error")
    with own_slide():  # in presentation mode a slide of its own: the slide's type has room for little
        st.caption(forwards_line(count, f"{n_players} players ({', '.join(shapley.players(model)[:4])}, …), {how}"))
        prose("Two games share out the same score. In the **direct** game an absent head is taken out of the final "
              "residual stream only: later heads still read it. In the **total** game it is taken out where it "
              "writes, so later heads read the changed stream: what a head does through the heads that read it "
              f"counts too. Here an absent head's output becomes {ABSENT[baseline]}.")
        game = compute(shapley.shapley, model, ids, score, baseline, corrupted, permutations, seed, key=key)
        st.markdown("Efficiency, Σφ = v(all) − v(none), in each game:\n" + "\n".join(
            f"- {check_line(f'{kind}: Σφ against v(all) = {g.full:.3f} less v(none) = {g.empty:.3f}', g.efficiency)}"
            for kind, g in (("Direct", game.direct), ("Total", game.total))))
        shares = compute(shapley.player_attribution, model, ids, logit_metric, key=key)
        st.markdown(check_line("Direct logit attribution (`residual.attribution`) of the logit difference against "
                               "the direct game's φ with the zero baseline, player by player",
                               compute(shapley.direct_game_check, model, ids, logit_metric, permutations, seed,
                                       key=key)))
        if not (score.linear and baseline == "zero"):
            gap = np.abs(game.direct.values - shares)
            why = "; ".join(filter(None, [
                f"with the {baseline} baseline a player's credit is what it writes less what it writes on the baseline"
                if baseline != "zero" else "",
                "the log-probability is not linear in the stream, so the direct game is not additive"
                if not score.linear else ""]))
            st.markdown(f"This page's direct game ({baseline} baseline, {metric_name}) differs from direct logit "
                        f"attribution by up to **{gap.max():.3f}** nats, at {game.players[int(gap.argmax())]}: {why}.")
    circuit = compute(induction.induction_circuit, model, key=key)
    previous = circuit.previous
    heads = heads_of(game.players)
    if len(heads) > HEAD_OPTIONS:  # a handful of options: the heads with the most credit in either game, in order
        size = {p: max(abs(d), abs(t)) for p, d, t in zip(game.players, game.direct.values, game.total.values)}
        keep = set(sorted(heads, key=lambda head: -size[head])[:HEAD_OPTIONS - 1]) | {game.top_total_head}
        heads = [head for head in heads if head in keep]
    total = dict(zip(game.players, game.total.values))
    direct = dict(zip(game.players, game.direct.values))
    ranked = sorted(heads_of(game.players), key=lambda head: -total[head])
    shown = predict("w top total", "Which head gets the most credit in the total game, where a head's removal "
                    "reaches the heads that read it?", heads, [game.top_total_head],
                    f"{ranked[0]} gets φ = {total[ranked[0]]:+.3f} nats of the total game's "
                    f"{game.total.full - game.total.empty:.3f}"
                    + (f"; next, {ranked[1]} {total[ranked[1]]:+.3f}" if len(ranked) > 1 else "")
                    + f". In the direct game the most goes to {game.top_direct} ({max(game.direct.values):+.3f}).")
    little = f"little or none: at most {game.share_max:.0%} of its total-game credit"
    options = [f"yes: more than {game.share_max:.0%} of its total-game credit", little]
    gets = options[1] if direct[previous] <= game.share_max * abs(total[previous]) else options[0]
    shown &= predict("w previous direct", f"Does {previous}, the previous-token head (score "
                     f"{circuit.previous_score:.2f}), get any credit in the direct game?", options, [gets],
                     f"{previous}: φ = {direct[previous]:+.3f} nats in the direct game, {total[previous]:+.3f} in the "
                     f"total game. The rule: 'little or none' when its direct credit is at most "
                     f"{game.share_max:.0%} of the size of its total credit.")
    if not shown:
        return
    errors = "" if game.total.exact else (
        f" Sampled from {permutations} orderings ({game.total.evaluations:,} coalitions per game): the largest "
        f"standard error is {game.direct.standard_errors.max():.2g} nats in the direct game and "
        f"{game.total.standard_errors.max():.3f} in the total game (the bars; each value's is in the table).")
    axis = "φ (nats)"
    with own_slide():  # the figure and its verdict, one slide
        figure("shapley values of the heads", figures.shapley_bars, game.players, game.direct.values,
               game.total.values, game.direct.standard_errors, game.total.standard_errors,
               f"Each player's share of {said}, in both games", axis)
        player, gap = game.largest_gap
        top = game.top_total_head
        st.markdown(f"The games differ most at **{player}**: total − direct = **{gap:+.3f}** nats.{errors} "
                    + verdict(game.works_through_composition,
                              f"{top} works through composition: its direct credit {direct[top]:+.3f} is at most "
                              f"{game.share_max:.0%} of its total credit {total[top]:+.3f}",
                              f"{top}, the head with the most total credit, does not work through composition: "
                              f"its direct credit {direct[top]:+.3f} is not at most {game.share_max:.0%} of its "
                              f"total credit {total[top]:+.3f}") + ".")
    record("largest |total − direct|", f"{player}: {gap:+.4f}")
    frame = {"player": list(game.players), "DLA of the logit difference (nats)": np.round(shares, 3),
             "direct φ (nats)": np.round(game.direct.values, 3), "total φ (nats)": np.round(game.total.values, 3),
             "total − direct (nats)": np.round(game.gaps, 3)}
    if not game.total.exact:
        frame["± direct φ (nats)"] = np.round(game.direct.standard_errors, 3)
        frame["± total φ (nats)"] = np.round(game.total.standard_errors, 3)
    table(pd.DataFrame(frame), "shapley values", height="content")


def two_heads() -> None:
    if too_costly("The pair of heads, chosen by that game"):  # without a game, no pair
        return
    game = compute(shapley.shapley, model, ids, score, baseline, corrupted, permutations, seed, key=key)
    first, second = game.pair
    direct = dict(zip(game.players, game.direct.values))
    gaps = dict(zip(game.players, game.gaps))
    samples = permutations  # as many samples as the game's orderings
    count = shapley.interaction_evaluations(model, ids, score, first, second, "total", baseline, corrupted, samples,
                                            seed)
    if refused(count, f"The interaction of {first} and {second}"):
        return
    prose("The Shapley interaction index of two players is what they are worth together beyond what each is worth "
          "alone, averaged over the coalitions of the others. Path patching measures the same pair from the other "
          "side: only what the earlier head sends into the later head's keys is corrupted.")
    with own_slide():  # in presentation mode each block below is a slide: the slide's type has room for little
        st.caption(forwards_line(count, f"The interaction of {first} and {second}"))
        st.latex(r"I_{ij}=\sum_{S\subseteq N\setminus\{i,j\}}\frac{|S|!\,(n-|S|-2)!}{(n-1)!}"
                 r"\big(v(S\cup\{i,j\})-v(S\cup\{i\})-v(S\cup\{j\})+v(S)\big)")
        joint = compute(shapley.interaction, model, ids, score, first, second, "total", baseline, corrupted,
                        samples, seed, key=key)
        apart = compute(shapley.interaction, model, ids, score, first, second, "direct", baseline, corrupted,
                        samples, seed, key=key)
        st.markdown(f"The pair, found by the games above: **{second}**, the head after layer 0 with the most direct "
                    f"credit (φ = {direct[second]:+.3f} nats: it writes the prediction), and **{first}**, the head "
                    f"before it whose credit grows most from the direct to the total game (by {gaps[first]:+.3f} "
                    "nats: what it is worth reaches the logits through later heads).")
        error = "" if joint.exact else f" ± {joint.standard_error:.3f}"
        cells = st.columns(3)
        metric(cells[0], "interaction, total game", f"{joint.value:+.3f}{error} nats",
               help="I of the pair in the game where a removed head's output reaches the heads that read it.")
        metric(cells[1], "interaction, direct game", f"{apart.value:+.3f} nats",
               help="I of the pair where a head is removed from the final residual stream only.")
    works = shapley.together(joint, game)
    rule = (f"I at least {works.share_min:.0%} of their own credit, at least {works.nats_min:g} nats"
            + ("" if joint.exact else f", and above {works.bar:.3f} (its standard error's one-sided 95 %)"))
    share = f", {works.share:.0%} of it" if works.credit > 0 else ""
    with own_slide():
        st.markdown(f"**Together.** In the total game I = {joint.value:+.3f}{error} nats; the pair's own credit there "
                    f"is φ({first}) + φ({second}) = {works.credit:+.3f} nats{share}. "
                    + verdict(works.passed, f"{first} and {second} work only together ({rule})",
                              f"{first} and {second} do not work only together (the rule: {rule})") + ".")
        st.markdown(f"**Apart.** In the direct game I = {apart.value:+.2g} nats: "
                    + ("a logit difference read from the final stream is a sum of the heads' writes, so no pair can "
                       "be worth more together there: what the pair shares comes from one head reading the other."
                       if score.linear else "the log-probability's softmax couples any two writes a little, "
                       "composition or not; the total game's interaction adds the heads' reading of each other."))
    record(f"interaction {first} × {second}", f"{joint.value:+.4f}")
    patched = compute(patching.patching, model, seed, key=key)  # last: a refusal leaves the interaction on screen
    head_labels = [circuits.head_label(layer, head) for layer in range(cfg.n_layers) for head in range(cfg.n_heads)]
    (ls, hs), (lr, hr) = (divmod(head_labels.index(head), cfg.n_heads) for head in (first, second))
    path = float(patched.k_paths[ls, hs, lr, hr])
    metric(cells[2], f"path {first} → {second}'s keys", f"{path:.0%}",
           help="(clean − patched) / (clean − corrupted) when only this path is corrupted, on "
                f"{patching.BATCH} repeated sequences from the seed.")
    with own_slide():
        if patched.measurable:
            sender, receiver, strongest = patched.strongest
            carries = verdict(path >= patched.effect_min,
                              f"the path carries the prediction (≥ {patched.effect_min:.0%})",
                              f"the path alone does not carry it (< {patched.effect_min:.0%})")
            st.markdown(f"**Path patching.** Corrupting only what {first} sends into {second}'s keys costs "
                        f"{path:.0%} of what corrupting the whole first copy costs: {carries}. The strongest K path "
                        f"is {sender} → {receiver} ({strongest:.0%}).")
        else:
            st.markdown("**Path patching.** " + verdict(False, "", f"{name} does not predict the second copy")
                        + f": its logit difference is {patched.clean:.2f} clean and {patched.corrupted:.2f} "
                          f"corrupted, less than {patched.gap_min:g} apart, so no path can carry a prediction.")
    record(f"path {first} → {second} keys", f"{path:.4f}")


def tokens_as_players() -> None:
    n_tokens = len(ids) - 1
    method = "shapley" if n_tokens <= shapley.EXACT_MAX and 2**n_tokens <= allowed else "shapley sampling"
    count = sum(token_attribution.token_evaluations(model, ids, score, how, token_baseline, None, seed)
                for how in (method, "lime"))
    if refused(count, "SHAP and LIME on this prompt together"):
        return
    prose("Now the players are the prompt's tokens: an absent token's embedding becomes "
          f"{TOKEN_ABSENT[token_baseline]}, at its own position, and the model runs whole. SHAP shares out the same "
          "score by Shapley values; LIME fits a linear surrogate to random coalitions, weighted by how close each is "
          "to the prompt. Both run through Captum; each count below is the forward passes it ran.")
    with own_slide():  # in presentation mode a slide of its own: the slide's type has room for little
        st.caption(forwards_line(count, f"{n_tokens} tokens after <bos>, SHAP "
                                 + ("exact over every coalition" if method == "shapley" else
                                    f"sampled ({token_attribution.SAMPLES[method]} random orderings)")
                                 + f" and LIME ({token_attribution.SAMPLES['lime']} random coalitions)"))
        shap = compute(token_attribution.token_attribution, model, ids, score, method, token_baseline, None, seed, key=key)
        lime = compute(token_attribution.token_attribution, model, ids, score, "lime", token_baseline, None, seed, key=key)
        for cell, (what, result) in zip(st.columns(2), (("SHAP", shap), ("LIME", lime))):
            metric(cell, f"{what}: forward passes", f"{result.evaluations:,}",
                   help=f"{result.library}; {result.samples or 'every'} "
                        + ("coalitions" if result.method in ("lime", "shapley") else "orderings"))
            cell.caption(f"{result.seconds:.2f} s on this server, when first computed")
        if shap.efficiency is not None:
            st.markdown(check_line(f"SHAP's efficiency: Σφ over the tokens against v(all) = {shap.full:.3f} less "
                                   f"v(none) = {shap.empty:.3f}", shap.efficiency))
        if shap.method == "shapley sampling":
            st.markdown(f"SHAP's values are sampled from {shap.samples} orderings, one Captum call each: each value's "
                        f"standard error is the spread of its {shap.samples} marginal contributions / "
                        f"√{shap.samples}, **{shap.standard_errors.max():.3f}** nats at most (median "
                        f"{np.median(shap.standard_errors):.3f}). LIME's coefficients are one regression's fit, no "
                        "mean of samples: they have no such error.")
    circuit = compute(induction.induction_circuit, model, key=key)
    layer, head = divmod([circuits.head_label(layer, head) for layer in range(cfg.n_layers)
                          for head in range(cfg.n_heads)].index(circuit.induction), cfg.n_heads)
    attention = compute(patterns.scores, model, ids, layer, head, key=key)
    shap_top, lime_top = (int(np.argmax(result.values)) + 1 for result in (shap, lime))  # values start after <bos>
    looked = int(np.argmax(attention.pattern[last]))
    options = list(dict.fromkeys(roles.values())) + [OTHER]
    shown = predict("w shap top", f"Which token does SHAP credit most? The last token is '{literal(labels[last])}' "
                    f"(position {last}); its earlier copy is at position {length - 1}, and the token after that "
                    f"copy, '{literal(labels[length])}' (position {length}), is the answer.", options,
                    [roles.get(shap_top, OTHER)],
                    f"SHAP's largest value, {shap.values.max():+.3f}"
                    + ("" if shap.method == "shapley" else f" ± {shap.standard_errors[shap_top - 1]:.3f}")
                    + f" nats, is on position {shap_top} ('{literal(labels[shap_top])}').")
    agree = "yes" if lime_top == shap_top else "no"
    shown &= predict("w lime agrees", "Will LIME agree with SHAP on the top token?", ["yes", "no"], [agree],
                     f"LIME's largest coefficient is on position {lime_top} ('{literal(labels[lime_top])}'), "
                     f"SHAP's on position {shap_top}.")
    if not shown:
        return
    marks = dict(sorted(roles.items()))
    figure("token shap", figures.token_credit, shap.values, labels,
           f"SHAP: each token's share of {said}", "φ (nats)", marks)
    figure("token lime", figures.token_credit, lime.values, labels,
           "LIME: each token's coefficient in a linear surrogate", "coefficient (nats)", marks)
    figure("induction head attention", figures.attention_row, attention.pattern, last, labels,
           f"The mechanism: {circuit.induction}'s attention from the last token", marks)

    def told(top: int) -> str:
        return "**the same position**" if top == looked else f"**position {top}** ({roles.get(top, OTHER)})"

    with own_slide():
        st.markdown(f"**The mechanism's own account.** {circuit.induction} (induction score "
                    f"{circuit.induction_score:.2f}) at the last token puts **{attention.pattern[last, looked]:.0%}** "
                    f"of its attention on position {looked} ('{literal(labels[looked])}'): "
                    f"{roles.get(looked, OTHER)}. SHAP's top token is {told(shap_top)}; LIME's is {told(lime_top)}.")
        st.markdown("An attribution says which inputs the score needs; the attention says where the head reads. "
                    "Without the earlier copy of the last token nothing marks where the answer is, so an input can "
                    "matter most without being what the head reads.")
    record("SHAP's top position", str(shap_top))
    record("LIME's top position", str(lime_top))
    record("induction head's attention, argmax", str(looked))


def heads_as_channels() -> None:
    conv = compute(channels.channels, 3, 4, 3, 8, 2, seed)
    prose("A convolution is the same kind of sum. Its weight W [C_out, C_in, k, k] has one slice W[:, c] per input "
          "channel, and its output is the bias plus the sum over channels of each channel convolved with its own "
          "slice: a channel's term can be read alone, as a head's can.")
    with own_slide():  # in presentation mode a slide of its own: the slide's type has room for little
        st.latex(r"\operatorname{conv}(x) = b + \sum_{c=1}^{C_\text{in}} W[:, c] \star x_c"
                 r"\qquad\longleftrightarrow\qquad"
                 r"\operatorname{concat}(z^1,\dots,z^H)\,W_O = \sum_{h=1}^{H} z^h\,W_O^h")
        st.markdown(f"A `torch.nn.Conv2d` of {conv.in_channels} input and {conv.out_channels} output channels, "
                    f"{conv.kernel} × {conv.kernel} kernels, on {conv.size} × {conv.size} inputs from seed {seed}, "
                    "against b + Σ_c W[:, c] ⋆ x_c:\n"
                    + "\n".join(f"- {check_line(f'in {dtype}', check)}" for dtype, check in conv.checks.items()))
    with own_slide():
        st.markdown(f"float32 differs by {conv.max_abs_diff['float32']:.1e} and float64 by "
                    f"{conv.max_abs_diff['float64']:.1e}: the same sum added in another order, as on the Equivalence "
                    "page. There W_O is drawn as H stacked row blocks of d_head rows; head h's z multiplies only its "
                    "block W_O[h], as input channel c meets only its slice W[:, c]. So a head is to W_O what an input "
                    "channel is to a convolution, and Shapley values over heads are the mechanistic cousin of "
                    "attributions over channels.")
        st.page_link(pages.EQUIVALENCE.file, label="The Equivalence page: W_O's row blocks",
                     icon=":material/functions:")


show([("Heads as players", heads_as_players),
      ("Two heads together", two_heads),
      ("Tokens as players", tokens_as_players),
      ("Heads as channels", heads_as_channels)])

with st.expander("Under the hood"):
    st.markdown("`mechlib.shapley`: every coalition's value, then Shapley values and the interaction index from them.")
    st.code(source(shapley.coalitions, shapley.exact_shapley, shapley.exact_interaction))
