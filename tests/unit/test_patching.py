"""mechlib.patching: activation patching on the induction task, by noising.

Known answers on the hand-built induction circuit (one previous-token head, one induction head); the residual
stream, head outputs, queries, keys and values against TransformerLens's own ``get_act_patch_*`` functions on the
same weights and the same metric (both in float64; TransformerLens stores each patch's result in a float32 tensor,
so they agree to its rounding: relative 1e-6); path patching against its definition written out (1e-10); and the
verdicts on attn-only-2l and on a random model.
"""

import copy

import numpy as np
import pytest
import torch

from mechlib import Transformer, checks, patching, zoo
from mechlib.data import eval_length
from mechlib.interop import to_transformer_lens
from tests.unit.helpers import with_random_biases
from tests.unit.test_induction import hand_built_circuit

pytestmark = pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")


def scaled_circuit(**kwargs) -> Transformer:
    """``hand_built_circuit`` with its unembedding × 20: its logits (one-hot copies, ~1) become a class's size."""
    model = hand_built_circuit(**kwargs)
    with torch.no_grad():
        model.unembed.W_U.mul_(20)
    return model


def test_the_hand_built_circuit_gives_its_known_answers():
    """L0H0 writes each position's previous token and nothing reads it but L1H0's keys; L1H0 is the only path to
    the answer; its queries read the current token, the same in both inputs. So corrupting L0H0's output, L1H0's
    keys, or the one path between them costs the same; corrupting L1H0's output is corrupting everything (1); its
    queries and L0H0's keys (positions alone) cost nothing; its values, holding the corrupted copy's tokens, make
    it copy the wrong token: more than everything."""
    result = patching.patching(scaled_circuit(), seed=0)
    assert result.measurable and result.clean - result.corrupted > 10
    carried = result.heads[0, 0]
    assert result.inputs["k"][1, 0] == pytest.approx(carried, abs=1e-10)
    assert result.k_paths[0, 0, 1, 0] == pytest.approx(carried, abs=1e-10) and carried > checks.PATCH_EFFECT_MIN
    assert result.heads[1, 0] == pytest.approx(1.0, abs=1e-10) and result.inputs["v"][1, 0] > 1
    assert abs(result.inputs["q"][1, 0]) < 1e-10 and abs(result.inputs["k"][0, 0]) < 1e-10
    assert result.strongest[:2] == ("L0H0", "L1H0") and result.stands_out and result.carriers == ("L1H0",)
    assert np.isnan(result.k_paths[1, 0, 1, 0]) and np.isnan(result.k_paths[1, 0, 0, 0])  # no later-to-earlier path


def test_a_head_that_attends_by_position_alone_needs_no_previous_token_head():
    """The positional impostor of ``hand_built_circuit(by_position=True)`` scores as an induction head, but its keys
    read positions: no path from the previous-token head carries anything."""
    result = patching.patching(scaled_circuit(by_position=True), seed=0)
    assert abs(result.k_paths[0, 0, 1, 0]) < 1e-9 and abs(result.inputs["k"][1, 0]) < 1e-9
    assert not result.stands_out and result.carriers == ()


def transformer_lens_effects(model: Transformer, seed: int) -> dict[str, np.ndarray]:
    """TransformerLens's patching functions on the same weights, noising (the clean tokens run with the corrupted
    cache patched in) and the same normalised metric."""
    from transformer_lens import patching as tl_patching

    hooked = to_transformer_lens(model)
    length = eval_length(model.cfg.n_ctx)
    clean, corrupted = patching.corrupted_pair(model.cfg.d_vocab, length, patching.BATCH, seed)
    with torch.inference_mode():
        clean_diff, corrupted_diff = (float(patching.logit_difference(hooked(t), clean, corrupted, length)[0])
                                      for t in (clean, corrupted))
        _, corrupted_cache = hooked.run_with_cache(corrupted)

    def damage(logits):
        patched = patching.logit_difference(logits, clean, corrupted, length)[0]
        return (clean_diff - patched) / (clean_diff - corrupted_diff)

    functions = {"resid": tl_patching.get_act_patch_resid_pre, "heads": tl_patching.get_act_patch_attn_head_out_all_pos,
                 "q": tl_patching.get_act_patch_attn_head_q_all_pos, "k": tl_patching.get_act_patch_attn_head_k_all_pos,
                 "v": tl_patching.get_act_patch_attn_head_v_all_pos}
    return {name: f(hooked, clean, corrupted_cache, damage).numpy() for name, f in functions.items()}


@pytest.mark.parametrize("name", ["attn-only-2l", "gelu-2l"])
def test_every_patch_equals_transformer_lens_own(name):
    model = with_random_biases(copy.deepcopy(zoo.load(name)).double())
    ours, theirs = patching.patching(model, seed=3), transformer_lens_effects(model, seed=3)
    for key, got in {"resid": ours.resid, "heads": ours.heads, **ours.inputs}.items():
        np.testing.assert_allclose(got, theirs[key], rtol=1e-6, atol=1e-7, err_msg=key)


def test_path_patching_is_its_definition_written_out():
    """Each K path: the receiver's keys from the clean residual stream minus the sender's clean result plus its
    corrupted one, one pass per path through ``Transformer.forward``'s patch, the metric as defined."""
    model = with_random_biases(copy.deepcopy(zoo.load("attn-only-2l")).double())
    result = patching.patching(model, seed=5)
    length = eval_length(model.cfg.n_ctx)
    clean, corrupted = patching.corrupted_pair(model.cfg.d_vocab, length, patching.BATCH, 5)
    with torch.inference_mode():
        clean_logits, clean_cache = model.run_with_cache(clean)
        corrupted_logits, corrupted_cache = model.run_with_cache(corrupted)
        clean_diff, corrupted_diff = (float(patching.logit_difference(x, clean, corrupted, length)[0])
                                      for x in (clean_logits, corrupted_logits))
        for sender in range(model.cfg.n_heads):
            result_0 = clean_cache["blocks.1.hook_resid_pre"] - clean_cache["blocks.0.attn.hook_result"][:, :, sender] \
                + corrupted_cache["blocks.0.attn.hook_result"][:, :, sender]
            qk_input = result_0 + clean_cache["hook_pos_embed"]                 # attn-only-2l: shortformer, no LN
            keys = torch.einsum("bpd,hde->bphe", qk_input, model.blocks[1].attn.W_K) + model.blocks[1].attn.b_K
            for receiver in range(model.cfg.n_heads):
                where = torch.arange(model.cfg.n_heads, device=keys.device)[None, None, :, None] == receiver
                logits = model(clean, patch={"blocks.1.attn.hook_k": (where, keys)})
                patched = float(patching.logit_difference(logits, clean, corrupted, length)[0])
                expected = (clean_diff - patched) / (clean_diff - corrupted_diff)
                assert result.k_paths[0, sender, 1, receiver] == pytest.approx(expected, abs=1e-10)


def test_on_attn_only_2l_the_previous_token_heads_path_into_an_induction_heads_keys_stands_out():
    from mechlib import circuits, induction

    model = zoo.load("attn-only-2l")
    result = patching.patching(model, seed=0)
    scores = induction.head_scores(model)
    inductive = {circuits.head_label(int(layer), int(head))
                 for layer, head in zip(*np.nonzero(scores["induction"].numpy() >= checks.INDUCTION_MIN))}
    assert result.measurable and result.stands_out
    assert result.strongest[0] == induction.induction_circuit(model).previous and result.strongest[1] in inductive
    assert result.carriers and set(result.carriers) <= inductive
    top = np.sort(result.k_paths[0, :, 1, :].flatten())[::-1]
    assert top[0] >= checks.PATCH_EFFECT_MIN > top[1]                      # one path past the bar


def test_on_a_random_model_there_is_no_prediction_to_break():
    result = patching.patching(Transformer(zoo.load("attn-only-2l").cfg), seed=0)
    assert not result.measurable and abs(result.clean - result.corrupted) < checks.LOGIT_GAP_MIN
    assert not result.stands_out and result.carriers == ()


def test_patching_leaves_the_shared_model_untouched_and_states_its_cost_first():
    from mechlib.device import experiment_mb

    model = zoo.load("attn-only-2l")
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    patching.patching(model, seed=1)
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in before.items())
    assert experiment_mb(patching.patching, model, 1) == patching.patching_mb(model) > 0
