"""AppTest for "Dictionary learning": the toy model's verdict and the SAE's grade come from mechlib and flip with the
settings that should flip them (dense features: no superposition; fewer latents than features: features missed);
each question reveals the answer mechlib computes and hides its evidence until then; a stored SAE is graded by the
field's measures and browsed latent by latent; a link to an SAE that is not kept, or to a model, says so."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from classroom.state.store import STORE, short_id
from mechlib import io, sae_grading, sae_residual, superposition, zoo
from mechlib.sae import SAEConfig, train_sae
from tests.app.helpers import open_page, reveal

PAGE = "app_pages/dictionary.py"


def text(at: AppTest) -> str:
    """The page's Markdown as read: the glossary's tooltips (<abbr> tags) left out."""
    return re.sub(r"<[^>]+>", "", " ".join(m.value for m in at.markdown))


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: as the workers train


def test_defaults_find_superposition_and_a_dictionary_that_holds_every_feature():
    at = open_page(PAGE)
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert [h.value for h in at.subheader] == ["Superposition", "A dictionary graded by the truth",
                                               "Features of our own models", "A latent browser"]
    toy = superposition.train_toy(5, 2, 0.9, 1.0, 0)
    assert f":green[**✓ in superposition**]: {toy.verdict}" in text(at)
    graded = sae_grading.toy_sae(5, 2, 0.9, 10, "relu", 1, sae_grading.L1_COEFFICIENT, 1.0, 0)
    assert f":green[**✓ dictionary learned**]: {graded.grade.verdict}" in text(at)
    assert f"variance explained {graded.grade.variance_explained:.3f}" in text(at)
    assert "Train a sparse autoencoder above, or open a link that names one" in " ".join(i.value for i in at.info)


def test_dense_features_get_no_superposition_and_too_few_latents_miss_features():
    at = open_page(PAGE, d_sparsity=0.0, d_decay=0.9, d_sae=4)
    toy = superposition.train_toy(5, 2, 0.0, 0.9, 0)
    assert toy.n_represented == 2
    assert f":red[**✗ no superposition**]: {toy.verdict}" in text(at)
    sparse = open_page(PAGE, d_sae=4)  # five features in a pentagon, four latents: at least one has none
    assert ":red[**✗ features missed**]" in text(sparse)
    assert "With fewer latents than represented features, some feature has no latent of its own." in text(sparse)


def test_each_question_reveals_the_computed_answer_and_hides_its_evidence_until_then():
    at = open_page(PAGE, read=False)
    assert not at.exception
    assert not at.get("plotly_chart") and not at.metric  # every figure and measure answers a question
    toy = superposition.train_toy(5, 2, 0.9, 1.0, 0)
    graded = sae_grading.toy_sae(5, 2, 0.9, 10, "relu", 1, sae_grading.L1_COEFFICIENT, 1.0, 0)
    assert reveal(at, "d represented")[0] == str(toy.n_represented) == "5"
    assert len(at.get("plotly_chart")) == 2  # the pentagon and the dimensionalities
    assert reveal(at, "d recovered")[0] == str(graded.grade.n_recovered)
    assert len(at.get("plotly_chart")) == 3


@pytest.fixture(scope="module")
def stored_sae() -> str:
    """A small SAE on attn-only-2l's residual stream after layer 1, kept in the server's store: its id."""
    model, hook = zoo.load("attn-only-2l"), "blocks.1.hook_resid_post"
    tokens = sae_residual.text_windows(model.tokenizer, model.cfg.n_ctx, "train", 64)
    acts = sae_residual.activations(model, hook, tokens)
    sae = train_sae(acts, SAEConfig(acts.shape[1], 256, k=16, hook_name=hook, model_name="attn-only-2l"), 200,
                    batch_size=256, lr=3e-3)
    data = io.to_bytes(sae)
    STORE.put("sae", "test", data, "a test's browser")
    return short_id(data)


def test_a_stored_sae_is_graded_and_its_latents_browsed(stored_sae):
    at = open_page(PAGE, d_sae_id=stored_sae)
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    learned = STORE.sae(stored_sae)
    report = sae_residual.evaluate(learned)
    shown = {m.label: m.value for m in at.metric}
    assert shown["loss recovered"] == f"{report.loss_recovered:.1%}"
    assert shown["L0 (latents per token)"] == f"{report.l0:.1f}"
    assert f"clean **{report.loss_clean:.3f}**" in text(at)
    assert "fires on" in text(at) and "contexts, each token shaded" in text(at)
    assert len(at.get("plotly_chart")) >= 5  # the toy's three, the latent's logit effect and its heads


def test_a_link_to_an_sae_that_is_not_kept_or_to_a_model_says_so(stored_sae):
    at = open_page(PAGE, d_sae_id="aaaaaaaaaaaaaaaa")
    assert "no model with id aaaaaaaaaaaaaaaa is kept on this server" in " ".join(w.value for w in at.warning)
    model = io.to_bytes(zoo.load("attn-only-0l"))
    STORE.put("uploaded", "m.safetensors", model, "a test's browser")
    at = open_page(PAGE, d_sae_id=short_id(model))
    assert "names a model, not a sparse autoencoder" in " ".join(w.value for w in at.warning)
