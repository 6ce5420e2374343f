"""The hover view's packed patterns (classroom/page/attention_text.py): what the browser decodes is the pattern's causal
half, each weight within half a step of 1 / LEVELS, in the order its script reads."""

import base64

import numpy as np

from classroom.page.attention_text import LEVELS, packed


def unpacked(text: str, heads: int, positions: int) -> np.ndarray:
    """As the browser's script reads it: head h, query q, key k ≤ q at h·T + q(q + 1)/2 + k, T = P(P + 1)/2."""
    steps = np.frombuffer(base64.b64decode(text), "<u2") / LEVELS
    square = positions * (positions + 1) // 2
    assert steps.shape == (heads * square,)
    out = np.zeros((heads, positions, positions))
    for h in range(heads):
        for q in range(positions):
            out[h, q, :q + 1] = steps[h * square + q * (q + 1) // 2:][:q + 1]
    return out


def test_the_browser_reads_back_each_heads_causal_pattern_within_half_a_step():
    scores = np.random.default_rng(0).normal(size=(3, 7, 7))
    scores[:, np.triu_indices(7, 1)[0], np.triu_indices(7, 1)[1]] = -np.inf
    patterns = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)     # [head query key], causal
    assert np.abs(unpacked(packed(patterns), 3, 7) - patterns).max() <= 0.5 / LEVELS


def test_known_weights_are_known_steps():
    patterns = np.array([[[1.0, 0.0], [0.25, 0.75]]])
    steps = np.frombuffer(base64.b64decode(packed(patterns)), "<u2")
    assert steps.tolist() == [LEVELS, round(0.25 * LEVELS), round(0.75 * LEVELS)]  # the key after the query is not sent
