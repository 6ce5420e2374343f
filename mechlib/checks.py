"""What every page's checks share: the identity check, its tolerance rule, and the verdict thresholds.

An identity holds when |a − b| ≤ tol · max(1, |reference|) element-wise, with tol set by the precision
the two sides were computed in. A role (previous-token head, induction head, …) is claimed only when
its score passes the threshold named here, so a sentence on screen follows from a computed verdict.
A score is "above random" only past ``above_random_bar``, which rises with the number of scores tested.
"""

from dataclasses import dataclass
from statistics import NormalDist

import torch
from torch import nn

__all__ = ["TOLERANCE", "Check", "compare", "tolerance_for", "model_tolerance", "PREV_TOKEN_MIN", "INDUCTION_MIN",
           "ABLATION_DROP_MIN", "FAMILY_ALPHA", "above_random_bar", "BIGRAM_KL_SHARE", "BIGRAM_GAP_MAX", "GAP_MIN", "NOTHING_MARGIN", "EARLIER_MARGIN", "UNK_SHARE_MAX", "RANK_ZERO", "EFFECTIVE_SHARE",
           "SEPARATE_MAX", "OVERLAP_SIGMAS", "LOSS_TIE", "INTEROP_TOLERANCE", "LOGIT_GAP_MIN", "PATCH_EFFECT_MIN"]

TOLERANCE = {"float32": 1e-5, "float64": 1e-10}  # tol in |a − b| ≤ tol · max(1, |reference|)

PREV_TOKEN_MIN = 0.5      # a previous-token head puts at least half its attention on the previous position
INDUCTION_MIN = 0.5       # an induction head puts at least half on the token after the earlier copy
ABLATION_DROP_MIN = 0.5   # ablating a head "breaks" a score when the score falls by at least half
FAMILY_ALPHA = 0.05       # a random model passes any of the "above random" tests made at once with at most this chance
BIGRAM_KL_SHARE = 0.1     # a zero-layer model "has learned the bigrams" when KL ≤ this share of the corpus's entropy
BIGRAM_GAP_MAX = 0.01     # nats: a zero-layer model within this KL of the best rank-d_model fit is "as good as its width allows"
GAP_MIN = 0.5             # nats: on the copy, a control is "worse" than another when its loss is higher by at least this
NOTHING_MARGIN = 0.25     # nats: a loss within this of ln d_vocab is the loss of knowing nothing about the next token
EARLIER_MARGIN = 1.0      # nats: within this of copying.earlier_token_loss (a factor e in the right token's probability),
                          # a loss is at the "some earlier token comes next" level: far from knowing nothing and from copying
UNK_SHARE_MAX = 0.2       # more than this share of <unk> tokens in a prompt gets a warning
RANK_ZERO = 1e-10         # in float64, a singular value below this times σ₁ counts as zero
EFFECTIVE_SHARE = 0.9     # a matrix's effective rank: the fewest singular values whose squares hold this share of ‖W‖_F²
SEPARATE_MAX = 0.01       # two heads write into separate subspaces when their overlap (mean squared cosine) is at most this
OVERLAP_SIGMAS = 3.0      # a mean overlap within this many standard deviations of the random one is "about random"
LOSS_TIE = 0.01           # two models' losses (nats) closer than this: neither predicts better
# tol for mechlib's logits against TransformerLens's on the same weights (mechlib.interop): the two sum attention in
# different orders, which float32 logits show past TOLERANCE. Measured on every transformer in the zoo, 200 random
# batches each (tests/unit/test_interop.py's same_logits): float32 at most 5.1e-5 (copying-2l; over 1e-5 on 138 of
# its 200), float64 at most 9.6e-14. The bounds leave a factor 10 and 1,000.
INTEROP_TOLERANCE = {"float32": 5e-4, "float64": 1e-10}
LOGIT_GAP_MIN = 1.0       # activation patching: the clean input's logit difference exceeds the corrupted one's by this
                          # much, or the model does not do the task and there is no prediction for a patch to break
PATCH_EFFECT_MIN = 0.3    # a patched activation (or path) carries the prediction when corrupting it alone costs at
                          # least 30 % of what corrupting the whole input costs (attn-only-2l spreads induction over
                          # three heads: its strongest K path carries 43–47 % on seeds 0–4, the next 25 %)


@dataclass(frozen=True)
class Check:
    """One identity checked numerically: the largest |a − b| and the scaled bound it must meet."""

    max_abs_diff: float
    max_scaled_diff: float  # max |a − b| / max(1, |reference|)
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_scaled_diff <= self.tolerance


def compare(a: torch.Tensor, reference: torch.Tensor, tolerance: float) -> Check:
    """Check a against reference element-wise under |a − b| ≤ tolerance · max(1, |reference|)."""
    diff = (a - reference).abs()
    scaled = diff / reference.abs().clamp(min=1.0)
    return Check(float(diff.max()), float(scaled.max()), tolerance)


def tolerance_for(dtype: torch.dtype) -> float:
    """The tolerance of identities computed in ``dtype``."""
    return TOLERANCE[str(dtype).removeprefix("torch.")]


def model_tolerance(model: nn.Module) -> float:
    """The tolerance of identities computed in the model's own precision."""
    return tolerance_for(next(model.parameters()).dtype)


def above_random_bar(mean: float, sd: float, tests: int) -> float:
    """The score one of ``tests`` scores tested at once must pass to be "above random": mean + z·sd of random heads'
    scores, z = Φ⁻¹(1 − FAMILY_ALPHA / tests) (Bonferroni, normal approximation).

    One test (the K-composition of the one circuit pair) gets the one-sided 95 % bar, z = 1.64. Picking the best
    of N scores and holding it to that bar would flag random models: among 16 random pairs, one passes a 95 %
    bar more often than not. So the bar rises with N: z = 2.24 for 4 tests, 2.73 for 16, 3.47 for 192.
    """
    if tests < 1:
        raise ValueError(f"tests={tests}: a bar is for one test or more")
    return mean + NormalDist().inv_cdf(1 - FAMILY_ALPHA / tests) * sd


# Shapley values (mechlib.shapley, mechlib.token_attribution, mechlib.channels) ----------------------------------------
__all__ += ["EFFICIENCY_TOLERANCE", "DIRECT_GAME_TOLERANCE", "COMPOSITION_DIRECT_SHARE", "TOGETHER_SHARE_MIN",
            "TOGETHER_MIN"]

EFFICIENCY_TOLERANCE = {"float32": 1e-6, "float64": 1e-10}  # Σφ against v(N) − v(∅), scaled as ``compare`` scales:
                          # the values are combined in float64 whatever the model's dtype, so float32's bound is met too
COMPOSITION_DIRECT_SHARE = 0.25  # a head "works through composition" when its direct-game credit is at most this
                          # share of its total-game credit: most of what it is worth reaches the logits through others
DIRECT_GAME_TOLERANCE = {"float32": 1e-6, "float64": 1e-10}  # the direct game's φ (zero baseline, a logit
                          # difference) against direct logit attribution, scaled as ``compare`` scales; issue 40's
                          # bounds: the game adds float64 copies of the writes, DLA float32 ones. Measured in float32
                          # (shapley.direct_game_check): at most 2.6e-7 on attn-only-2l, gelu-2l and random models of
                          # their shapes (seeds 0–3 of the induction prompt), 4.6e-8 on a random GPT-2 small
TOGETHER_SHARE_MIN = 1 / 3  # two heads "work only together" when their interaction I_ij is at least this share of
                          # their own credit φ_i + φ_j in the same game (a pair worth nothing apart: I_ij = φ_i + φ_j,
                          # share 1; a pair whose effects add up: 0). attn-only-2l's L0H1 and L1H3: 45, 62, 48, 64 %
                          # on seeds 0–3 of the induction prompt; a random model's pair (the same rule) reached 59 %
                          # where both its credits were small, so TOGETHER_MIN holds the size too
TOGETHER_MIN = 1.0        # nats: ... and I_ij is at least this large, LOGIT_GAP_MIN's size of a prediction.
                          # attn-only-2l's pair: 1.9–4.2 on seeds 0–3; random models of its shape (4 seeds × 4
                          # prompts): 0.31 at most
