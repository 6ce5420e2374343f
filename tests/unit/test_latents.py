"""The latent browser: top contexts that a separate pass confirms, the logit effect as direct logit attribution reads a
direction, head writes that add up to the residual's, and induction features found in attn-only-2l and not in a
random model of its shape."""

import numpy as np
import pytest
import torch

from mechlib import latents, zoo
from mechlib import sae_residual as sr
from mechlib.sae import SAE, SAEConfig

RESID = "blocks.1.hook_resid_post"


def probe(d_in: int, hook_name: str, model_name: str, seed: int = 0) -> SAE:
    """A ReLU SAE of 8 random unit directions, each read and written along itself, with a bias that keeps it sparse."""
    sae = SAE(SAEConfig(d_in, 8, activation="relu", hook_name=hook_name, model_name=model_name))
    directions = torch.randn(8, d_in, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        sae.W_dec.copy_(directions / directions.norm(dim=-1, keepdim=True))
        sae.W_enc.copy_(sae.W_dec.T)
        sae.b_enc.fill_(-1.0)
    return sae.requires_grad_(False)


@pytest.fixture(scope="module")
def attn_view():
    model = zoo.load("attn-only-2l")
    sae = probe(128, RESID, "attn-only-2l")
    return model, sae, latents.browse(sae, 3)


def test_the_top_contexts_are_the_texts_highest_activations_highest_first(attn_view):
    model, sae, view = attn_view
    tokens = latents.consecutive_windows(model.tokenizer, model.cfg.n_ctx, latents.BROWSE_WINDOWS)
    f = sae.encode(sr.activations(model, RESID, tokens))[:, 3]                     # [window · (pos − 1)], a new pass
    peaks = [float(c.activations[c.peak]) for c in view.contexts]
    assert len(view.contexts) == latents.TOP and peaks == sorted(peaks, reverse=True)
    assert peaks == pytest.approx(f.topk(latents.TOP).values.tolist(), rel=1e-5)
    assert view.frequency == pytest.approx(float((f > 0).float().mean()))
    assert all(len(c.ids) == len(c.activations) <= sum(latents.CONTEXT) + 1 for c in view.contexts)


def test_the_logit_effect_is_the_decoder_direction_through_w_u_without_a_layernorm(attn_view):
    model, sae, view = attn_view
    effect = sae.W_dec[3] @ model.unembed.W_U                                        # [d_vocab]
    assert view.promoted == effect.topk(latents.TOP_TOKENS).indices.tolist()
    assert view.suppressed == (-effect).topk(latents.TOP_TOKENS).indices.tolist()
    assert view.promoted_logits[0] == pytest.approx(float(effect.max()), rel=1e-5)
    assert view.suppressed_logits[0] == pytest.approx(float(effect.min()), rel=1e-5)


def test_head_writes_are_the_heads_shares_of_the_residual_along_the_direction(attn_view):
    """Along the direction, where the latent fires, the residual after layer 1 is the embedding plus every head's
    write plus the attention biases: the heads' shares add to it minus those, which a cache gives separately."""
    model, sae, view = attn_view
    assert view.heads == [f"L{layer}H{head}" for layer in range(2) for head in range(4)]
    tokens = latents.consecutive_windows(model.tokenizer, model.cfg.n_ctx, latents.BROWSE_WINDOWS)
    _, cache = model.run_with_cache(tokens)
    fires = sae.encode(cache[RESID])[..., 3] > 0
    fires[:, 0] = False
    direction = sae.W_dec[3]
    rest = cache["hook_embed"] + model.blocks[0].attn.b_O + model.blocks[1].attn.b_O      # shortformer: no positions
    along = ((cache[RESID] - rest) @ direction)[fires].double().mean()
    assert view.head_writes.sum() == pytest.approx(float(along), rel=1e-4)


def test_an_mlp_latents_logit_effect_goes_through_w_out_and_the_final_layernorm():
    model = zoo.load("gelu-2l")
    sae = probe(512, "blocks.0.mlp.hook_post", "gelu-2l")
    view = latents.browse(sae, 0)
    direction = latents.latent_direction(model, sae, 0)
    written = sae.W_dec[0] @ model.blocks[0].mlp.W_out                                  # [d_model]
    assert torch.allclose(direction, written / written.norm())
    assert view.heads == ["L0H0", "L0H1", "L0H2", "L0H3"]
    centred = (direction - direction.mean()) * model.ln_final.w @ model.unembed.W_U      # up to the positive scale
    assert view.promoted == centred.topk(latents.TOP_TOKENS).indices.tolist()
    with pytest.raises(ValueError, match="latents 0…7"):
        latents.browse(sae, 8)


def test_induction_features_are_found_in_attn_only_2l_and_not_in_a_random_model_of_its_shape():
    control = latents.induction_control("attn-only-2l", RESID, d_sae=256, k=16, steps=150, windows=256)
    assert control.found and control.trained.count > 0 and control.random.count == 0
    for result in (control.trained, control.random):  # the count is the rule stated in the module, on its arrays
        rule = ((result.second_mean >= latents.INDUCTION_RATIO * result.first_mean) & (result.second_mean > 0)
                & (result.second_firing >= latents.INDUCTION_FIRING))
        assert result.found == np.flatnonzero(rule).tolist()
    assert control.trained.length == 20
