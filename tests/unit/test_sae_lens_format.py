"""An SAE moves between mechlib and SAELens (``mechlib.sae_lens_format``): SAELens 6.x loads ours and reconstructs the
same activations, ours loads one SAELens saved, both compute L0 and the variance explained alike, and a folder that is
not an SAE we can compute exactly is refused with a sentence, before anything is built.

The bound: both sides run the same float32 operations in the same order (x − b_dec, @ W_enc, + b_enc, ReLU or TopK,
@ W_dec, + b_dec), so they agree to within float32's TOLERANCE (|a − b| ≤ 1e-5 · max(1, |b|)); measured, they are equal.
"""

import json
import struct

import pytest
import torch
from sae_lens import SAE as LensSAE
from sae_lens import StandardSAE, StandardSAEConfig, TopKSAE, TopKSAEConfig
from sae_lens.evals import ExplainedVarianceCalculator
from safetensors.torch import save_file

from mechlib import sae_lens_format
from mechlib.checks import TOLERANCE, compare
from mechlib.io import CheckpointError
from mechlib.sae import SAEConfig, sae_stats, train_sae

HOOK = "blocks.0.hook_resid_post"


def acts(n: int = 512, d_in: int = 16, seed: int = 0) -> torch.Tensor:  # [n, d_in], with a mean away from zero
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, d_in, generator=generator) + 2.0


def trained(activation: str, dtype: torch.dtype = torch.float32):
    cfg = SAEConfig(d_in=16, d_sae=64, activation=activation, k=4, l1_coefficient=0.1, hook_name=HOOK,
                    model_name="attn-only-2l")
    return train_sae(acts().to(dtype), cfg, 30, batch_size=128, lr=1e-2)


@pytest.mark.parametrize(("activation", "lens_class"), [("relu", StandardSAE), ("topk", TopKSAE)])
def test_saelens_loads_our_sae_and_reconstructs_the_same_activations(tmp_path, activation, lens_class):
    ours = trained(activation)
    sae_lens_format.save(ours, tmp_path)
    theirs = LensSAE.load_from_disk(tmp_path)
    assert type(theirs) is lens_class
    assert (theirs.cfg.d_in, theirs.cfg.d_sae, theirs.cfg.metadata.hook_name, theirs.cfg.metadata.model_name) == (
        16, 64, HOOK, "attn-only-2l")
    x = acts(seed=1)
    with torch.no_grad():
        assert torch.equal(theirs.encode(x) > 0, ours.encode(x) > 0)   # the same latents fire
        assert compare(theirs.encode(x), ours.encode(x), TOLERANCE["float32"]).passed
        assert compare(theirs(x), ours(x), TOLERANCE["float32"]).passed
        assert not torch.allclose(ours(x), ours.b_dec.expand_as(x))      # a reconstruction, not its bias alone
    if activation == "topk":
        assert theirs.cfg.k == 4 and (ours.encode(x) > 0).sum(-1).max() == 4


@pytest.mark.parametrize("lens_cfg", [StandardSAEConfig(d_in=16, d_sae=48), TopKSAEConfig(d_in=16, d_sae=48, k=3)])
def test_ours_loads_an_sae_saelens_saved_and_computes_what_it_computes(tmp_path, lens_cfg):
    torch.manual_seed(0)
    theirs = LensSAE.get_sae_class_for_architecture(lens_cfg.architecture())(lens_cfg)
    with torch.no_grad():  # SAELens starts b_enc and b_dec at zero: give them values, so the test sees them used
        theirs.b_enc.normal_(0, 0.5)
        theirs.b_dec.normal_(0, 0.5)
    theirs.save_model(tmp_path)
    ours = sae_lens_format.load(tmp_path)
    assert ours.cfg.activation == {"standard": "relu", "topk": "topk"}[lens_cfg.architecture()]
    x = acts(seed=2)
    with torch.no_grad():
        assert compare(ours(x), theirs(x), TOLERANCE["float32"]).passed
        assert compare(ours.encode(x), theirs.encode(x), TOLERANCE["float32"]).passed


def test_a_float64_sae_keeps_its_dtype_both_ways(tmp_path):
    ours = trained("topk", torch.float64)
    sae_lens_format.save(ours, tmp_path)
    assert json.loads((tmp_path / "cfg.json").read_text())["dtype"] == "float64"
    assert LensSAE.load_from_disk(tmp_path).W_enc.dtype == torch.float64
    back = sae_lens_format.load(tmp_path)
    assert back.W_dec.dtype == torch.float64 and torch.equal(back.W_dec, ours.W_dec)


def test_l0_and_variance_explained_are_saelens_own():
    """SAELens's evals count L0 as the latents ≠ 0 per activation and compute the variance explained with its
    ExplainedVarianceCalculator (1 − E‖x − x̂‖² / Var x): ``sae_stats`` gives the same numbers."""
    sae, x = trained("relu"), acts(seed=3)
    with torch.no_grad():
        reconstruction, latents = sae(x), sae.encode(x)
    calculator = ExplainedVarianceCalculator()
    calculator.add_batch(reconstruction, x)
    stats = sae_stats(sae, x)
    assert 0.2 < stats.variance_explained < 1 and stats.l0 > 1
    assert stats.variance_explained == pytest.approx(calculator.compute(), abs=1e-5)
    assert stats.l0 == pytest.approx(float((latents != 0).sum(-1).float().mean()), rel=1e-6)


def saved(tmp_path, activation: str = "topk"):
    sae_lens_format.save(trained(activation), tmp_path)
    return tmp_path


def edit_cfg(folder, **changes) -> None:
    fields = json.loads((folder / "cfg.json").read_text())
    (folder / "cfg.json").write_text(json.dumps(fields | changes))


def refused(folder, *words: str) -> None:
    with pytest.raises(CheckpointError) as error:
        sae_lens_format.load(folder)
    assert all(word in str(error.value) for word in words), str(error.value)


@pytest.mark.parametrize(("changes", "words"), [
    ({"architecture": "jumprelu"}, ("architecture", "'standard' or 'topk'")),
    ({"d_sae": "64"}, ("d_sae", "int")),
    ({"d_sae": 10**9}, ("d_sae = 1000000000", "MB")),
    ({"dtype": "bfloat16"}, ("dtype", "'float32' or 'float64'")),
    ({"apply_b_dec_to_input": False}, ("apply_b_dec_to_input", "x − b_dec")),
    ({"normalize_activations": "layer_norm"}, ("normalizes",)),
    ({"rescale_acts_by_decoder_norm": True}, ("rescale_acts_by_decoder_norm",)),
    ({"k": 65}, ("k=65", "between 1 and 64")),
    ({"d_in": 8}, ("W_enc", "shape [16, 64]", "[8, 64]")),
])
def test_a_config_mechlib_cannot_compute_exactly_is_refused(tmp_path, changes, words):
    folder = saved(tmp_path)
    edit_cfg(folder, **changes)
    refused(folder, *words)


def test_bad_weights_are_refused_before_an_sae_is_built(tmp_path):
    folder, weights = saved(tmp_path), tmp_path / "sae_weights.safetensors"
    good = sae_lens_format.load(folder)
    tensors = {name: getattr(good, name).clone() for name in ("W_enc", "b_enc", "W_dec", "b_dec")}

    save_file(tensors | {"threshold": torch.zeros(64)}, weights)
    refused(folder, "threshold", "exactly W_enc, b_enc, W_dec and b_dec")
    save_file({name: t for name, t in tensors.items() if name != "b_dec"}, weights)
    refused(folder, "exactly W_enc")
    save_file(tensors | {"W_dec": tensors["W_dec"].double()}, weights)
    refused(folder, "W_dec is F64", "float32")
    save_file(tensors | {"b_enc": torch.full((64,), float("nan"))}, weights)
    refused(folder, "b_enc holds NaN")

    save_file(tensors, weights)
    weights.write_bytes(weights.read_bytes()[:-100])                   # cut short
    refused(folder, "cannot be read as safetensors", "cut or damaged")
    weights.write_bytes(b"\x80\x04" + b"\x00" * 64)                    # a pickle's first bytes: never unpickled
    refused(folder, "cannot be read as safetensors")
    weights.write_bytes(struct.pack("<Q", 10) + b"not json!!")
    refused(folder, "not JSON")
    weights.unlink()
    refused(folder, "no sae_weights.safetensors")


def test_a_folder_without_a_config_or_with_a_broken_one_is_refused(tmp_path):
    refused(tmp_path, "no cfg.json")
    folder = saved(tmp_path)
    (folder / "cfg.json").write_text("{not json")
    refused(folder, "cfg.json is not JSON")
    (folder / "cfg.json").write_text("[1, 2]")
    refused(folder, "not a JSON object")
    (folder / "cfg.json").write_text(" " * (sae_lens_format.MAX_CFG_BYTES + 1))
    refused(folder, "more than a config's")
