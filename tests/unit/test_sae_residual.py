"""SAEs on the zoo's activations: the splice that grades them (an identity SAE costs nothing; zeros cost what a hand
computation says), loss recovered's arithmetic, and the worker's entry point reporting as the Train page's does."""

import pytest
import torch
import torch.nn.functional as F

from mechlib import sae_residual as sr
from mechlib import zoo
from mechlib.device import experiment_mb
from mechlib.loss import next_token_loss
from mechlib.sae import SAE, SAEConfig

RESID = "blocks.1.hook_resid_post"


def identity_sae(d_in: int, hook_name: str, model_name: str = "attn-only-2l") -> SAE:
    """A ReLU "SAE" of 2·d_in latents that reconstructs exactly: f = (relu(x), relu(−x)), x̂ = relu(x) − relu(−x)."""
    sae = SAE(SAEConfig(d_in, 2 * d_in, activation="relu", hook_name=hook_name, model_name=model_name))
    eye = torch.eye(d_in)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], dim=1))
        sae.W_dec.copy_(torch.cat([eye, -eye], dim=0))
    return sae.requires_grad_(False)


def test_an_identity_sae_spliced_in_gives_the_clean_loss_exactly_and_recovers_all_of_it():
    model = zoo.load("attn-only-2l")
    report = sr.evaluate(identity_sae(128, RESID), windows=16)
    assert report.loss_sae == report.loss_clean < report.loss_zero
    assert report.loss_recovered == 1.0 and report.variance_explained == pytest.approx(1.0, abs=1e-6)
    assert report.l0 <= 128 and report.activations == 16 * (model.cfg.n_ctx - 1)
    assert report.verdicts == {"variance_explained": True, "l0": False, "dead_fraction": True, "loss_recovered": True}
    # the clean run through the splice is the model's own loss on those windows
    tokens = sr.text_windows(model.tokenizer, model.cfg.n_ctx, "heldout", 16)
    assert report.loss_clean == pytest.approx(float(next_token_loss(model(tokens), tokens)), abs=1e-5)


def test_the_zeroed_last_residual_leaves_b_u_alone_after_bos():
    """attn-only-2l has no final LayerNorm: with blocks.1.hook_resid_post zeroed, every logit after <bos> is b_U."""
    model = zoo.load("attn-only-2l")
    tokens = sr.text_windows(model.tokenizer, model.cfg.n_ctx, "heldout", 8)                 # [batch pos]
    _, _, zero = sr.spliced_losses(model, RESID, tokens, lambda x: x)
    logits = model(tokens).clone()                                                            # [batch pos d_vocab]
    logits[:, 1:] = model.unembed.b_U
    assert zero == pytest.approx(float(next_token_loss(logits, tokens)), abs=1e-5)
    by_hand = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    assert zero == pytest.approx(float(by_hand), abs=1e-5)


def test_zeroing_an_mlps_neurons_is_patching_its_output_with_its_bias():
    model = zoo.load("gelu-2l")
    hook = "blocks.0.mlp.hook_post"
    tokens = sr.text_windows(model.tokenizer, model.cfg.n_ctx, "heldout", 8)
    _, _, zero = sr.spliced_losses(model, hook, tokens, lambda x: x)
    where = torch.arange(model.cfg.n_ctx)[:, None] > 0                                       # [pos 1]
    b_out = model.blocks[0].mlp.b_out.expand(8, model.cfg.n_ctx, -1)
    assert zero == pytest.approx(float(next_token_loss(model(tokens, patch={"blocks.0.hook_mlp_out": (where, b_out)}),
                                                       tokens)), abs=1e-5)


def test_loss_recovered_is_one_for_the_clean_loss_and_zero_for_the_zeroed_one():
    assert sr.loss_recovered(2.0, 2.0, 5.0) == 1.0
    assert sr.loss_recovered(2.0, 5.0, 5.0) == 0.0
    assert sr.loss_recovered(2.0, 3.5, 5.0) == 0.5


def test_activations_leave_out_bos_and_read_the_hooks_width():
    model = zoo.load("gelu-2l")
    tokens = sr.text_windows(model.tokenizer, model.cfg.n_ctx, "train", 3)
    assert sr.activations(model, "blocks.1.mlp.hook_post", tokens).shape == (3 * (model.cfg.n_ctx - 1), 512)
    assert sr.hook_layer("blocks.1.mlp.hook_post") == 1
    with pytest.raises(ValueError, match="block's hook"):
        sr.hook_layer("hook_embed")


def test_the_workers_entry_point_reports_each_evaluation_and_every_step_and_declares_its_memory():
    progress, steps = [], []
    result = sr.train_on_zoo("attn-only-2l", RESID, d_sae=256, k=8, steps=40, windows=32, batch_size=256,
                             eval_every=20, on_progress=progress.append, on_step=steps.append)
    assert steps == list(range(1, 41)) and [p.step for p in progress] == [20, 40]
    assert [row["step"] for row in result.history] == [20.0, 40.0]
    assert progress[-1].metrics["l0"] == 8.0 and progress[-1].metrics == {k: result.history[-1][k] for k in
                                                                            ("l0", "variance_explained", "dead_fraction")}
    assert isinstance(result.model, SAE) and result.model.cfg.hook_name == RESID
    assert result.model.cfg.model_name == "attn-only-2l"  # the SAE names what it reads: a link opens it alone
    assert progress[-1].metrics["variance_explained"] > progress[0].metrics["variance_explained"] > 0
    assert experiment_mb(sr.train_on_zoo, "attn-only-2l", RESID, 512) > experiment_mb(sr.train_on_zoo, "attn-only-2l",
                                                                                      RESID, 256) > 0
    with pytest.raises(ValueError, match="not attn-only-2l's 'blocks.0.mlp.hook_post'"):
        sr.train_on_zoo("attn-only-2l", "blocks.0.mlp.hook_post")


def test_an_sae_names_its_model_a_zoo_model_or_random_weights_of_its_shape():
    model, tokenizer = sr.base_model("attn-only-2l")
    assert model is zoo.load("attn-only-2l") and tokenizer is model.tokenizer
    random, tokens = sr.base_model(sr.RANDOM + "attn-only-2l")
    assert random.cfg == model.cfg and tokens is model.tokenizer  # the zoo model's text, random weights
    assert not torch.equal(random.blocks[0].attn.W_Q, model.blocks[0].attn.W_Q)
    with pytest.raises(ValueError, match="this SAE reads 'gpt2'; SAEs here read attn-only-2l, gelu-2l"):
        sr.base_model("gpt2")
