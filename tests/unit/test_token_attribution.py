"""mechlib.token_attribution: the exact token Shapley values against shap's ExactExplainer (float64, a prompt of 6
tokens) on a value function written separately (a plain forward of the prompt with tokens replaced by <unk>), Captum's
estimates against them (within their standard errors, for sampled orderings), the counts known before a call against
those it ran, LIME and Kernel SHAP on a 20-token prompt of a zoo model, and Captum's seeded draws from torch's one
global generator: the same in threads computing at once as alone."""

import copy
import threading
import time

import numpy as np
import pytest
import torch

from mechlib import data, token_attribution, zoo
from mechlib.device import experiment_mb
from mechlib.shapley import Metric, chunk_rows
from tests.unit.helpers import required

# shap's import draws its colour maps with matplotlib calls that matplotlib 3.11 marks for deprecation
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")

METHODS = tuple(token_attribution.METHODS)


def float64_text_model():
    """A writable float64 copy of gelu-2l (LayerNorm, MLPs, a word tokenizer), and a 6-token prompt it reads whole:
    <bos> and the first 5 words of a held-out sentence."""
    model = copy.deepcopy(zoo.load("gelu-2l")).double()
    sentence = data.covered_prompts(model.tokenizer, 1, (8, 20))[0]
    return model, data.prompt_ids(model.tokenizer, sentence, model.cfg.n_ctx).ids[:6]


@torch.inference_mode()
def replaced_by_unk(model, ids: tuple[int, ...], metric: Metric, masks: np.ndarray) -> np.ndarray:
    """v of each mask [k n] (1: the token after <bos> stays), written separately: the absent tokens' ids become
    <unk> and the plain forward's logits give the metric."""
    keep = torch.as_tensor(np.asarray(masks), dtype=torch.bool)
    tokens = torch.tensor(ids).expand(len(keep), -1).clone()
    tokens[:, 1:][~keep] = model.tokenizer.unk_id
    logits = model(tokens)[:, -1]                                                # [k d_vocab]
    if metric.wrong is not None:
        return (logits[:, metric.right] - logits[:, metric.wrong]).numpy()
    return logits.log_softmax(-1)[:, metric.right].numpy()


@pytest.mark.parametrize("metric", [Metric(), Metric(5, 9)], ids=["log-probability of the top token", "logit difference"])
def test_exact_token_shapley_values_equal_shaps_exact_explainer(metric):
    shap = required("shap")
    model, ids = float64_text_model()
    ours = token_attribution.token_attribution(model, ids, metric, method="shapley")
    resolved = metric if metric.right is not None else Metric(int(model(torch.tensor([ids]))[0, -1].argmax()))
    n = len(ids) - 1
    explainer = shap.ExactExplainer(lambda masks: replaced_by_unk(model, ids, resolved, masks),
                                    shap.maskers.Independent(np.zeros((1, n)), max_samples=1))
    theirs = explainer(np.ones((1, n)))
    np.testing.assert_allclose(ours.values, theirs.values[0], rtol=0, atol=1e-6)
    assert np.abs(ours.values).max() > 0.05                                      # the tokens matter
    assert ours.full == pytest.approx(float(replaced_by_unk(model, ids, resolved, np.ones((1, n)))[0]), abs=1e-10)
    assert ours.empty == pytest.approx(float(theirs.base_values[0]), abs=1e-10)  # shap's v(∅): every token <unk>
    assert ours.efficiency.passed and ours.samples is None and ours.library == "mechlib.shapley"


@pytest.mark.parametrize("method", METHODS)
def test_every_method_reports_the_forward_rows_it_was_declared_to_run_and_its_time(method):
    model, ids = float64_text_model()
    samples = None if method == "shapley" else 40
    expected = token_attribution.token_evaluations(model, ids, Metric(), method, "unk", samples)
    result = token_attribution.token_attribution(model, ids, method=method, samples=samples)
    assert result.evaluations == expected == {"shapley": 2**5, "shapley sampling": 40 * (5 + 1) + 2}.get(method, 40 + 2)
    assert result.seconds > 0 and result.values.shape == (5,) and np.isfinite(result.values).all()
    assert result.labels == tuple(model.tokenizer.labels(ids[1:])) and result.top in result.labels
    assert (result.efficiency is not None) == (method in ("shapley", "shapley sampling"))
    if result.efficiency is not None:
        assert result.efficiency.passed                                          # each ordering telescopes
    errors = result.standard_errors
    if method == "shapley":
        assert not errors.any()
    elif method == "shapley sampling":
        assert errors.shape == (5,) and (errors > 0).all()
    else:
        assert errors is None  # a regression's fit, not a mean of samples


def test_sampled_orderings_standard_errors_cover_the_exact_values_and_shrink_as_one_over_root_n():
    """Captum's orderings, one call each: the estimate lies within 4 standard errors of the exact values token by
    token, and 16 times the orderings divide the standard errors by about 4 (√16)."""
    model, ids = float64_text_model()
    exact = token_attribution.token_attribution(model, ids, method="shapley").values
    rough, fine = (token_attribution.token_attribution(model, ids, method="shapley sampling", samples=samples, seed=1)
                   for samples in (16, 256))
    assert np.all(np.abs(fine.values - exact) <= 4 * fine.standard_errors + 1e-6)  # + Captum's float32 sums
    ratio = rough.standard_errors.max() / fine.standard_errors.max()
    assert 2.5 < ratio < 6.5, ratio
    with pytest.raises(ValueError, match="two orderings at least"):
        token_attribution.token_attribution(model, ids, method="shapley sampling", samples=1)


def test_captums_shapley_estimates_approach_the_exact_values():
    """The same game: Captum's sampled orderings (300) and Kernel SHAP (2,000 coalitions) land within 0.06 of the
    exact values (measured 0.018 and 0.023; the values reach 0.8); LIME's surrogate is no Shapley estimate."""
    model, ids = float64_text_model()
    exact = token_attribution.token_attribution(model, ids, method="shapley").values
    assert np.abs(exact).max() > 0.5
    for method, samples in (("shapley sampling", 300), ("kernel shap", 2000)):
        estimate = token_attribution.token_attribution(model, ids, method=method, samples=samples)
        assert np.abs(estimate.values - exact).max() < 0.06 and estimate.library.startswith("captum ")


def test_lime_and_kernel_shap_run_on_a_20_token_prompt_of_a_zoo_model():
    model = zoo.load("gelu-2l")
    sentence = data.covered_prompts(model.tokenizer, 1, (20, 20))[0]
    ids = data.prompt_ids(model.tokenizer, sentence, model.cfg.n_ctx).ids
    assert len(ids) == 21
    for method in ("lime", "kernel shap"):
        result = token_attribution.token_attribution(model, ids, method=method)
        assert result.evaluations == token_attribution.SAMPLES[method] + 2 and len(result.values) == 20
        assert np.abs(result.values).max() > 0


def test_the_mean_baseline_replaces_absent_tokens_by_the_mean_embedding():
    model, ids = float64_text_model()
    result = token_attribution.token_attribution(model, ids, method="shapley sampling", baseline="mean", samples=3)
    mean = model.embed.W_E.mean(0)
    with torch.inference_mode():
        embedded = torch.cat([model.embed.W_E[ids[0]][None], mean.expand(len(ids) - 1, -1)])[None]
        logits = model(torch.tensor([ids]), patch={"hook_embed": (torch.tensor(True), embedded)})[0, -1]
    top = int(model(torch.tensor([ids]))[0, -1].argmax())
    assert result.empty == pytest.approx(float(logits.log_softmax(-1)[top]), abs=1e-10)
    assert result.baseline.startswith("the mean token embedding")


def test_a_seed_gives_the_same_values_and_leaves_torchs_generator_as_it_was():
    model, ids = float64_text_model()
    state = torch.random.get_rng_state()
    first, again = (token_attribution.token_attribution(model, ids, method="lime", samples=30, seed=4) for _ in range(2))
    other = token_attribution.token_attribution(model, ids, method="lime", samples=30, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    np.testing.assert_array_equal(first.values, again.values)
    assert not np.array_equal(first.values, other.values)


@pytest.mark.parametrize("method", ["shapley sampling", "lime", "kernel shap"])
def test_threads_computing_at_once_with_one_seed_get_the_values_of_a_call_alone(method):
    """Captum draws from torch's one global generator: four threads released together, each with seed 4, each get
    the values one call alone gets (a lock lets one call hold the generator at a time)."""
    model, ids = float64_text_model()
    call = lambda: token_attribution.token_attribution(model, ids, method=method, samples=30, seed=4).values
    alone = call()
    start, results = threading.Barrier(4), [None] * 4

    def worker(k: int) -> None:
        start.wait()
        results[k] = call()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for values in results:
        np.testing.assert_array_equal(values, alone)


def test_a_captum_call_waits_while_another_holds_torchs_generator():
    model, ids = float64_text_model()
    done = threading.Event()
    thread = threading.Thread(target=lambda: (token_attribution.token_attribution(model, ids, method="lime",
                                                                                  samples=10), done.set()))
    with token_attribution.CAPTUM_LOCK:
        thread.start()
        time.sleep(0.5)
        assert not done.is_set()  # it waits for the lock
    thread.join()
    assert done.is_set()


def test_memory_is_one_batch_of_prompts_and_bad_arguments_say_what_to_choose():
    model, ids = float64_text_model()
    assert experiment_mb(token_attribution.token_attribution, model, ids) == model.cfg.activations_mb(
        chunk_rows(model, len(ids)), len(ids))
    with pytest.raises(ValueError, match="choose one of shapley, shapley sampling, kernel shap, lime"):
        token_attribution.token_attribution(model, ids, method="occlusion")
    with pytest.raises(ValueError, match="choose one of unk, mean"):
        token_attribution.token_attribution(model, ids, baseline="zero")
    with pytest.raises(ValueError, match="a token after <bos>"):
        token_attribution.token_attribution(model, ids[:1])
