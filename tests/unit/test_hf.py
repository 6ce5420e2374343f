"""mechlib.interop.from_transformers: Hugging Face GPT-2 models, as objects and as directories, to mechlib.

Random-weight GPT-2 models of several shapes are built with ``transformers`` (nothing is downloaded; every weight,
biases and LayerNorm included, drawn afresh so each one's mapping shows), saved in Hugging Face's format with a
byte-level BPE tokenizer trained here with ``tokenizers`` on Python's documentation, and read back. Logits agree
under |a − b| ≤ tol · max(1, |reference|): tol 1e-10 in float64, 1e-4 in float32 (``GPT2_TOLERANCE``).
"""

import json
import math

import pytest
import torch

from mechlib import Transformer
from mechlib.checks import compare
from mechlib.hf import HFError, read_config
from mechlib.interop import from_transformers, to_transformer_lens
from tests.unit.helpers import bpe_tokenizer, documentation, gpt2, required

GPT2_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10}
SHAPES = {  # GPT2Config fields: one layer; an MLP narrower than 4·d_model; exact GELU, three heads, untied unembedding
    "1 layer": dict(n_layer=1, n_embd=16, n_head=2, vocab_size=300, n_positions=16),
    "2 layers, n_inner 48": dict(n_layer=2, n_embd=32, n_head=4, vocab_size=300, n_positions=24, n_inner=48),
    "3 layers, gelu, untied": dict(n_layer=3, n_embd=24, n_head=3, vocab_size=320, n_positions=20,
                                   activation_function="gelu", tie_word_embeddings=False),
}


@pytest.fixture(scope="module")
def transformers():
    return required("transformers")


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A byte-level BPE tokenizer of 300 tokens (GPT-2's kind), trained on Python's documentation."""
    return bpe_tokenizer(tmp_path_factory.mktemp("tokenizer") / "tokenizer.json")


def tokens(fields: dict, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, fields["vocab_size"], (3, fields["n_positions"]), generator=generator)


def assert_same_logits(model: Transformer, hf, ids: torch.Tensor) -> None:
    with torch.inference_mode():
        check = compare(model(ids), hf(ids).logits, GPT2_TOLERANCE[model.embed.W_E.dtype])
    assert check.passed, check


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_gpt2_object_computes_the_logits_transformers_computes(transformers, shape, dtype):
    hf = gpt2(transformers, SHAPES[shape], dtype)
    model = from_transformers(hf)
    assert model.embed.W_E.dtype == dtype and model.tokenizer is None
    assert_same_logits(model, hf, tokens(SHAPES[shape]))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_saved_directory_reads_back_with_its_tokenizer(transformers, tokenizer_file, tmp_path, shape):
    hf = gpt2(transformers, SHAPES[shape], torch.float64, seed=3)
    hf.save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    model = from_transformers(tmp_path)
    assert read_config(tmp_path) == model.cfg
    assert_same_logits(model, hf, tokens(SHAPES[shape], seed=2))
    reference = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
    for text in documentation()[300:400]:
        assert model.tokenizer.encode(text) == reference(text)["input_ids"]
        assert model.tokenizer.decode(model.tokenizer.encode(text)) == text


@pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")
def test_the_weights_are_transformer_lens_own_conversion_of_gpt2(transformers):
    """TransformerLens's ``convert_gpt2_weights`` on the same model: every weight equal, under the same name."""
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights
    hf = gpt2(transformers, SHAPES["2 layers, n_inner 48"])
    model = from_transformers(hf)
    theirs = convert_gpt2_weights(hf, to_transformer_lens(model).cfg)
    ours = dict(model.named_parameters())
    assert set(theirs) == set(ours) - {"unembed.b_U"}  # GPT-2's unembedding has no bias: mechlib's is zero
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
    assert not ours["unembed.b_U"].any()


def test_the_cache_holds_what_transformers_computes(transformers):
    """The residual stream before each block and after the final LayerNorm, and each layer's attention pattern,
    against ``transformers``' hidden states and attentions (its eager attention returns the pattern)."""
    fields = SHAPES["2 layers, n_inner 48"]
    hf = gpt2(transformers, fields, torch.float64)
    hf.config._attn_implementation = "eager"
    ids = tokens(fields)
    with torch.inference_mode():
        out = hf(ids, output_hidden_states=True, output_attentions=True)
        _, cache = from_transformers(hf).run_with_cache(ids)
    ours = [cache[f"blocks.{layer}.hook_resid_pre"] for layer in range(fields["n_layer"])]
    for mine, theirs in zip([*ours, cache["ln_final.hook_normalized"]], out.hidden_states, strict=True):
        assert compare(mine, theirs, 1e-10).passed
    for layer, theirs in enumerate(out.attentions):
        assert compare(cache[f"blocks.{layer}.attn.hook_pattern"], theirs, 1e-10).passed


def test_half_precision_weights_become_float32(transformers):
    hf = gpt2(transformers, SHAPES["1 layer"], torch.float16)
    model = from_transformers(hf)
    assert model.embed.W_E.dtype == torch.float32
    assert torch.equal(model.embed.W_E, hf.transformer.wte.weight.float())


def test_labels_show_each_tokens_own_text(transformers, tokenizer_file, tmp_path):
    gpt2(transformers, SHAPES["1 layer"]).save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    tokenizer = from_transformers(tmp_path).tokenizer
    ids = tokenizer.encode("def f(x):\n    return x")
    assert "".join(tokenizer.vocab[i] for i in ids) == "def f(x):\n    return x"
    assert "␣" in "".join(tokenizer.labels(ids)) and "⏎" in "".join(tokenizer.labels(ids))


def test_a_model_with_its_hugging_face_tokenizer_is_not_saved_as_a_mechlib_checkpoint(transformers, tokenizer_file,
                                                                                        tmp_path):
    from mechlib import io

    gpt2(transformers, SHAPES["1 layer"]).save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    model = from_transformers(tmp_path)
    with pytest.raises(TypeError, match="a Hugging Face tokenizer is not stored in a mechlib checkpoint"):
        io.to_bytes(model)
    model.tokenizer = None
    assert torch.equal(io.load(io.to_bytes(model)).embed.W_E, model.embed.W_E)


# ---------------------------------------------------------------------------------------------
# Refusals: each with its reason, before anything is built

@pytest.mark.parametrize("change, reason", [
    ({"activation_function": "relu"}, "activation_function='relu' has no counterpart in mechlib"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True has no counterpart"),
    ({"scale_attn_weights": False}, "scale_attn_weights=False has no counterpart"),
    ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon=1e-06 has no counterpart in mechlib"),
    ({"model_type": "llama"}, "the model's type is 'llama'; only GPT-2"),
    ({"n_layer": 49}, "n_layers=49 is out of range"),
    ({"n_head": 5}, "d_model=16 is not divisible by n_heads=5"),
])
def test_a_config_mechlib_cannot_compute_is_refused_by_name(transformers, tmp_path, change, reason):
    gpt2(transformers, SHAPES["1 layer"]).save_pretrained(tmp_path)
    fields = json.loads((tmp_path / "config.json").read_text()) | change
    (tmp_path / "config.json").write_text(json.dumps(fields))
    with pytest.raises(HFError, match=reason):
        from_transformers(tmp_path)


def edit_weights(tmp_path, edit) -> None:
    from safetensors.torch import load_file, save_file
    tensors = load_file(tmp_path / "model.safetensors")
    edit(tensors)
    save_file(tensors, tmp_path / "model.safetensors")


@pytest.mark.parametrize("edit, reason", [
    (lambda t: t.pop("transformer.h.0.mlp.c_fc.bias"), "lack 1 tensor.* h.0.mlp.c_fc.bias"),
    (lambda t: t.update({"transformer.h.0.attn.c_attn.weight": torch.zeros(16, 47)}),
     r"h.0.attn.c_attn.weight has shape \[16, 47\], but the config needs \[16, 48\]"),
    (lambda t: t.update({"transformer.h.1.ln_1.weight": torch.ones(16)}), "1 tensor.* does not: h.1.ln_1.weight"),
    (lambda t: t["transformer.wpe.weight"].__setitem__((0, 0), math.nan), "wpe.weight holds NaN"),
    (lambda t: t.update({"transformer.ln_f.bias": torch.zeros(16, dtype=torch.int32)}), "ln_f.bias is I32"),
])
def test_bad_weights_are_refused_with_their_reason(transformers, tmp_path, edit, reason):
    gpt2(transformers, SHAPES["1 layer"]).save_pretrained(tmp_path)
    edit_weights(tmp_path, edit)
    with pytest.raises(HFError, match=reason):
        from_transformers(tmp_path)


def test_a_pickled_checkpoint_is_never_opened(transformers, tmp_path):
    gpt2(transformers, SHAPES["1 layer"]).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"not even a pickle: never read")
    with pytest.raises(HFError, match="only pytorch_model.bin: a pickle, never opened here"):
        from_transformers(tmp_path)


@pytest.mark.parametrize("content, reason", [(None, "no config.json"), (b"{not json", "is not JSON"),
                                             (b" " * 1_000_001, "a model's config.json is a few kB")],
                         ids=["missing", "not JSON", "1 MB"])
def test_a_directory_without_a_readable_config_is_refused(tmp_path, content, reason):
    if content is not None:
        (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(HFError, match=reason):
        from_transformers(tmp_path)


def test_a_prompt_starts_with_the_configs_bos_token_and_the_tables_leave_it_out(transformers, tokenizer_file,
                                                                                tmp_path):
    """GPT-2's sequences start with <|endoftext|>, its config's bos_token_id (50256): mechlib's prompts take it from
    there, not mechlib's own id 0; a config's id outside the vocabulary (GPT2Config's default here) leaves 0."""
    from mechlib import circuits, data

    fields = SHAPES["1 layer"]
    for bos, expected in ((299, 299), (None, 0)):
        extra = {} if bos is None else {"bos_token_id": bos, "eos_token_id": bos}
        gpt2(transformers, fields | extra).save_pretrained(tmp_path)
        (tmp_path / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
        model = from_transformers(tmp_path)
        prompt = data.prompt_ids(model.tokenizer, "the class of an object", 64)
        assert model.tokenizer.bos_id == data.bos_id(model.tokenizer) == prompt.ids[0] == expected
        assert list(prompt.ids[1:]) == model.tokenizer.encode("the class of an object") and prompt.unknown_share == 0
        assert data.random_ids(fields["vocab_size"], 5, 0, data.bos_id(model.tokenizer))[0] == expected
        assert expected not in circuits.frequent_tokens(model, 50)
    words = [model.tokenizer.vocab[i] for i in circuits.frequent_tokens(model, 50, words_only=True)]
    assert any(word.startswith(" ") for word in words) and all(word.removeprefix(" ").isalpha() for word in words)
