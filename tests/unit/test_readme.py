"""README's "Use mechlib from a notebook": its Python block runs, and what it computes is what the library says.

The block is read from README.md by its section heading, so an edit that breaks the example fails here.
"""

import re
from pathlib import Path

import torch

import mechlib
from mechlib import circuits, data, induction, zoo
from mechlib.checks import INDUCTION_MIN, PREV_TOKEN_MIN, compare, model_tolerance

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "## Use mechlib from a notebook"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    assert f"\n{HEADING}\n" in text, f"README.md has no section {HEADING!r}"
    return text.split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", section(), flags=re.DOTALL)
    assert len(blocks) == 1, f"the section should hold one Python block, it holds {len(blocks)}"
    return blocks[0]


def run(code: str) -> dict:
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace


def test_the_example_finds_the_induction_circuit_the_library_finds(capsys):
    ns = run(example())
    model = zoo.load("attn-only-2l")
    assert ns["model"] is model
    scores, k_composition = induction.head_scores(model), circuits.composition_scores(model, "K")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    assert ns["k_composition"].shape == (L, H, L, H) and torch.equal(ns["k_composition"], k_composition)
    assert all(torch.equal(ns["scores"][name], scores[name]) for name in scores)
    head, writer = ns["head"], ns["writer"]
    assert scores["induction"][1, head] == scores["induction"][1].max() >= INDUCTION_MIN
    assert k_composition[0, writer, 1, head] == k_composition[0, :, 1, head].max()
    assert scores["prev_token"][0, writer] >= PREV_TOKEN_MIN  # the head it K-composes with is the previous-token head
    prompt = data.prompt_ids(model.tokenizer, "the frobnitz and the frob", model.cfg.n_ctx)
    assert ns["prompt"] == prompt
    assert compare(ns["logits"], model(torch.tensor([prompt.ids])), model_tolerance(model)).passed  # another path
    # Induction on the prompt: from the last "b" the head attends to the "n" after the earlier "frob" (position 1 +
    # len("the frob"), after <bos>), and the model predicts that "n".
    assert ns["where"] == 1 + len("the frob")
    printed = capsys.readouterr().out
    assert f"induction score {scores['induction'][1, head]:.2f}" in printed
    assert printed.splitlines()[-1] == "the last token attends to ['n'] and the model predicts ['n']"


def test_the_same_example_on_a_model_without_induction_heads_misses_both_thresholds():
    """The thresholds above can fail: gelu-2l has neither an induction head nor a previous-token head."""
    ns = run(example().replace('"attn-only-2l"', '"gelu-2l"'))
    assert ns["model"] is zoo.load("gelu-2l")
    assert ns["scores"]["induction"][1, ns["head"]] < INDUCTION_MIN
    assert ns["scores"]["prev_token"][0, ns["writer"]] < PREV_TOKEN_MIN


def test_the_inline_model_of_your_own_builds():
    spans = re.findall(r"`(Transformer\(ModelConfig\(.*?\)\))`", section())
    assert spans, "the section no longer shows how to build a model of one's own"
    for span in spans:
        model = eval(span, vars(mechlib))
        assert isinstance(model, mechlib.Transformer)
