"""The transformer: TransformerLens names and shapes, the cache, and the residual-stream identities."""

import copy

import pytest
import torch

from mechlib import attention
from mechlib.checks import compare
from mechlib.config import ModelConfig
from mechlib.model import NO_RECORDING, Recorder, Transformer
from tests.unit.helpers import with_random_biases

CONFIGS = [
    ModelConfig(n_layers=0, d_model=8, n_heads=2, d_vocab=11, n_ctx=5),
    ModelConfig(n_layers=1, d_model=16, n_heads=4, d_vocab=20, n_ctx=8),
    ModelConfig(n_layers=2, d_model=24, n_heads=3, d_vocab=30, n_ctx=10, d_mlp=48, normalization="LN", seed=3),
    ModelConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=13, n_ctx=9, normalization="LN", positional="shortformer"),
    ModelConfig(n_layers=1, d_model=12, n_heads=2, d_head=8, d_vocab=9, n_ctx=6, d_mlp=20),
    ModelConfig(n_layers=2, d_model=16, n_heads=4, d_vocab=13, n_ctx=7, d_mlp=32, positional="shortformer"),
    ModelConfig(n_layers=0, d_model=8, n_heads=2, d_vocab=11, n_ctx=5, normalization="LN", positional="shortformer"),
]


def transformerlens_shapes(cfg: ModelConfig) -> dict[str, tuple]:
    """The state dict of a TransformerLens HookedTransformer of this config, written out from its docs."""
    d, h, dh, V, n = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_vocab, cfg.n_ctx
    shapes = {"embed.W_E": (V, d), "pos_embed.W_pos": (n, d)}
    for layer in range(cfg.n_layers):
        p = f"blocks.{layer}."
        if cfg.normalization == "LN":
            shapes |= {p + "ln1.w": (d,), p + "ln1.b": (d,)}
        shapes |= {p + "attn.W_Q": (h, d, dh), p + "attn.W_K": (h, d, dh), p + "attn.W_V": (h, d, dh),
                   p + "attn.W_O": (h, dh, d), p + "attn.b_Q": (h, dh), p + "attn.b_K": (h, dh),
                   p + "attn.b_V": (h, dh), p + "attn.b_O": (d,), p + "attn.mask": (n, n), p + "attn.IGNORE": ()}
        if cfg.d_mlp is not None:
            if cfg.normalization == "LN":
                shapes |= {p + "ln2.w": (d,), p + "ln2.b": (d,)}
            shapes |= {p + "mlp.W_in": (d, cfg.d_mlp), p + "mlp.b_in": (cfg.d_mlp,),
                       p + "mlp.W_out": (cfg.d_mlp, d), p + "mlp.b_out": (d,)}
    if cfg.normalization == "LN":
        shapes |= {"ln_final.w": (d,), "ln_final.b": (d,)}
    return shapes | {"unembed.W_U": (d, V), "unembed.b_U": (V,)}


def tokens_for(cfg, batch=3, seed=0):
    return torch.randint(0, cfg.d_vocab, (batch, cfg.n_ctx), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_state_dict_keys_and_shapes_are_transformerlens(cfg):
    got = {k: tuple(v.shape) for k, v in Transformer(cfg).state_dict().items()}
    assert got == transformerlens_shapes(cfg)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_run_with_cache_logits_equal_plain_forward(cfg):
    model = Transformer(cfg).double()
    tokens = tokens_for(cfg)
    logits, cache = model.run_with_cache(tokens)
    with torch.no_grad():
        plain = model(tokens)  # the fast path: fused kernels round differently, so not bit for bit
    assert logits.shape == (3, cfg.n_ctx, cfg.d_vocab)
    assert compare(plain, logits, 1e-10).passed


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c.n_layers])
@torch.inference_mode()
def test_cache_identities(cfg):
    model = with_random_biases(Transformer(cfg).double())
    _, cache = model.run_with_cache(tokens_for(cfg))
    for layer in range(cfg.n_layers):
        p = f"blocks.{layer}."
        b_O = model.blocks[layer].attn.b_O
        # Σ_h result_h + b_O = attention output (float64 ≤ 1e-10).
        assert (cache[p + "attn.hook_result"].sum(-2) + b_O - cache[p + "hook_attn_out"]).abs().max() <= 1e-10
        pattern = cache[p + "attn.hook_pattern"]
        assert (pattern.sum(-1) - 1).abs().max() <= 1e-12 and torch.all(pattern.triu(1) == 0)
        # The residual stream is literal addition.
        mlp = cache.get(p + "hook_mlp_out", 0)
        assert (cache[p + "hook_resid_pre"] + cache[p + "hook_attn_out"] + mlp - cache[p + "hook_resid_post"]).abs().max() <= 1e-12
        # Patterns times messages gives the same per-head results (no LayerNorm: x is resid_pre).
        if cfg.normalization is None:
            attn = model.blocks[layer].attn
            messages = attention.pattern_times_messages(pattern, cache[p + "hook_resid_pre"], attn.W_V, attn.W_O, attn.b_V)
            assert (messages - cache[p + "attn.hook_result"]).abs().max() <= 1e-10


def test_cache_has_transformerlens_keys():
    cfg = CONFIGS[2]
    _, cache = Transformer(cfg).run_with_cache(tokens_for(cfg))
    for key in ["hook_embed", "hook_pos_embed", "ln_final.hook_scale", "ln_final.hook_normalized"] + [
        f"blocks.1.{k}" for k in ["hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
                                  "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.hook_attn_scores",
                                  "attn.hook_pattern", "attn.hook_result", "ln1.hook_scale", "mlp.hook_pre", "mlp.hook_post"]]:
        assert key in cache, key
    assert cache["blocks.0.attn.hook_q"].shape == (3, 10, 3, 8)          # [batch pos head d_head]
    assert cache["blocks.0.attn.hook_pattern"].shape == (3, 3, 10, 10)   # [batch head query_pos key_pos]
    assert cache["blocks.0.attn.hook_result"].shape == (3, 10, 3, 24)    # [batch pos head d_model]


def test_standard_positions_enter_the_residual_and_shortformer_keeps_them_out():
    standard, shortformer = CONFIGS[1], CONFIGS[3]
    _, cache = Transformer(standard).run_with_cache(tokens_for(standard))
    assert torch.equal(cache["blocks.0.hook_resid_pre"], cache["hook_embed"] + cache["hook_pos_embed"])
    _, cache = Transformer(shortformer).run_with_cache(tokens_for(shortformer))
    assert torch.equal(cache["blocks.0.hook_resid_pre"], cache["hook_embed"])


def test_forward_never_mutates_the_model():
    cfg = CONFIGS[2]
    model = Transformer(cfg)
    before = copy.deepcopy(model.state_dict())
    model.run_with_cache(tokens_for(cfg))
    model(tokens_for(cfg, seed=1))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_weights_are_drawn_from_the_seed():
    cfg = CONFIGS[1]
    a, b = Transformer(cfg).state_dict(), Transformer(cfg).state_dict()
    c = Transformer(ModelConfig(**{**cfg.__dict__, "seed": 1})).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["blocks.0.attn.W_Q"], c["blocks.0.attn.W_Q"])


def test_bad_tokens_get_clear_messages():
    model = Transformer(CONFIGS[1])
    with pytest.raises(ValueError, match="longer than the context of 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 20\)"):
        model(torch.tensor([[0, 20]]))
    with pytest.raises(ValueError, match="integer ids"):
        model(torch.zeros(1, 3))


@torch.inference_mode()
def test_shortformer_adds_positions_after_ln1_as_transformerlens_does():
    cfg = CONFIGS[3]  # shortformer with LayerNorm
    model = with_random_biases(Transformer(cfg).double())
    tokens = tokens_for(cfg)
    _, cache = model.run_with_cache(tokens)
    attn = model.blocks[0].attn
    qk_input = cache["blocks.0.ln1.hook_normalized"] + cache["hook_pos_embed"]
    assert (qk_input @ attn.W_Q[1] + attn.b_Q[1] - cache["blocks.0.attn.hook_q"][:, :, 1]).abs().max() <= 1e-10
    v = cache["blocks.0.ln1.hook_normalized"] @ attn.W_V[1] + attn.b_V[1]  # values carry no position
    assert (v - cache["blocks.0.attn.hook_v"][:, :, 1]).abs().max() <= 1e-10


@torch.inference_mode()
def test_ablation_is_functional_and_replaces_one_heads_output():
    cfg = CONFIGS[1]
    model = with_random_biases(Transformer(cfg).double())
    tokens = tokens_for(cfg)
    before = copy.deepcopy(model.state_dict())
    clean, cache = model.run_with_cache(tokens)
    zero = torch.zeros(cfg.d_head, dtype=torch.float64)
    ablated, ablated_cache = model.run_with_cache(tokens, ablate={(0, 2): zero})
    assert torch.all(ablated_cache["blocks.0.attn.hook_z"][:, :, 2] == 0)
    assert torch.equal(ablated_cache["blocks.0.attn.hook_z"][:, :, 1], cache["blocks.0.attn.hook_z"][:, :, 1])
    # Zero-ablating head 2 removes exactly its result from the attention output.
    removed = cache["blocks.0.hook_attn_out"] - cache["blocks.0.attn.hook_result"][:, :, 2]
    assert (ablated_cache["blocks.0.hook_attn_out"] - removed).abs().max() <= 1e-10
    assert not torch.equal(clean, ablated)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    again, _ = model.run_with_cache(tokens)
    assert torch.equal(again, clean)  # nothing lingers: no hooks


def reference_forward(model: Transformer, tokens, ablate=None):
    """The formula written out from the weights, one line per step, with TransformerLens's hook names."""
    cfg, cache = model.cfg, {}

    def layer_norm(x, ln, name):
        x = x - x.mean(-1, keepdim=True)
        cache[name + ".hook_scale"] = scale = (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
        cache[name + ".hook_normalized"] = normalized = x / scale * ln.w + ln.b
        return normalized

    cache["hook_embed"] = embed = model.embed.W_E[tokens]
    cache["hook_pos_embed"] = pos = model.pos_embed.W_pos[: tokens.shape[1]].expand_as(embed)
    resid = embed if cfg.positional == "shortformer" else embed + pos
    for layer, block in enumerate(model.blocks):
        p, attn = f"blocks.{layer}.", block.attn
        cache[p + "hook_resid_pre"] = resid
        x = layer_norm(resid, block.ln1, p + "ln1") if cfg.normalization == "LN" else resid
        qk_input = x + pos if cfg.positional == "shortformer" else x
        cache[p + "attn.hook_q"] = q = attention.qkv(qk_input, attn.W_Q, attn.b_Q)
        cache[p + "attn.hook_k"] = k = attention.qkv(qk_input, attn.W_K, attn.b_K)
        cache[p + "attn.hook_v"] = v = attention.qkv(x, attn.W_V, attn.b_V)
        cache[p + "attn.hook_attn_scores"] = scores = attention.attention_scores(q, k)
        cache[p + "attn.hook_pattern"] = pattern = attention.attention_pattern(scores)
        z = attention.mix_values(pattern, v)
        for (ablated_layer, head), replacement in (ablate or {}).items():
            if ablated_layer == layer:
                z[..., head, :] = replacement
        cache[p + "attn.hook_z"] = z
        cache[p + "attn.hook_result"] = attention.per_head_results(z, attn.W_O)
        cache[p + "hook_attn_out"] = attn_out = attention.concat_then_project(z, attn.W_O) + attn.b_O
        resid = resid + attn_out
        if cfg.d_mlp is not None:
            cache[p + "hook_resid_mid"] = resid
            x = layer_norm(resid, block.ln2, p + "ln2") if cfg.normalization == "LN" else resid
            cache[p + "mlp.hook_pre"] = pre = x @ block.mlp.W_in + block.mlp.b_in
            cache[p + "mlp.hook_post"] = post = torch.nn.functional.gelu(pre)
            cache[p + "hook_mlp_out"] = mlp_out = post @ block.mlp.W_out + block.mlp.b_out
            resid = resid + mlp_out
        cache[p + "hook_resid_post"] = resid
    if cfg.normalization == "LN":
        resid = layer_norm(resid, model.ln_final, "ln_final")
    return resid @ model.unembed.W_U + model.unembed.b_U, cache


def ablations(cfg):
    """No ablation, and (when there are layers) two heads replaced: one by zeros, one by a random z."""
    if not cfg.n_layers:
        return [None]
    z = torch.randn(cfg.d_head, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    return [None, {(cfg.n_layers - 1, 0): z, (0, cfg.n_heads - 1): torch.zeros(cfg.d_head, dtype=torch.float64)}]


@pytest.mark.parametrize("cfg", CONFIGS)
@torch.inference_mode()
def test_forward_and_cache_are_the_formula_bit_for_bit(cfg):
    model = with_random_biases(Transformer(cfg).double())
    tokens = tokens_for(cfg)
    for ablate in ablations(cfg):
        logits, cache = model.run_with_cache(tokens, ablate=ablate)
        expected_logits, expected = reference_forward(model, tokens, ablate)
        assert set(cache) == set(expected)
        assert all(torch.equal(cache[key], expected[key]) for key in expected), [k for k in expected if not torch.equal(cache[k], expected[k])]
        assert torch.equal(logits, expected_logits)
        if ablate:  # the same without a cache (without an ablation too, the fast path runs: see below)
            assert torch.equal(model(tokens, ablate=ablate), expected_logits)


def test_per_head_results_are_computed_only_for_the_cache(monkeypatch):
    cfg = CONFIGS[2]
    model, calls = Transformer(cfg), []
    counting = attention.per_head_results
    monkeypatch.setattr(attention, "per_head_results", lambda *args: calls.append(1) or counting(*args))
    with torch.inference_mode():
        model(tokens_for(cfg))
        model(tokens_for(cfg), ablate={(0, 1): torch.zeros(cfg.d_head)})
    assert calls == []
    model.run_with_cache(tokens_for(cfg))
    assert len(calls) == cfg.n_layers


def test_the_null_recorder_hands_every_tensor_back_and_a_recording_one_writes_hook_names():
    x = torch.arange(24.0).reshape(1, 2, 3, 4)  # [batch pos head d_head]
    assert not NO_RECORDING.active and NO_RECORDING.scope("blocks.0") is NO_RECORDING
    assert NO_RECORDING("hook_z", x) is x
    cache = {}
    recorder = Recorder(cache).scope("blocks.1").scope("attn")
    assert recorder.active and recorder.recording
    assert recorder("hook_z", x) is x and cache == {"blocks.1.attn.hook_z": x}


def test_a_patching_recorder_replaces_only_where_asked():
    x = torch.arange(24.0).reshape(1, 2, 3, 4)  # [batch pos head d_head]
    where = torch.tensor([False, False, True])[:, None]                    # [head 1]: head 2
    recorder = Recorder(patch={"blocks.1.attn.hook_z": (where, torch.full((3, 4), -1.0))})
    assert recorder.active and not recorder.recording
    assert recorder.scope("blocks.0").scope("attn")("hook_z", x) is x      # another layer: untouched
    assert recorder.scope("blocks.1").scope("attn")("hook_q", x) is x      # another hook: untouched
    z = recorder.scope("blocks.1").scope("attn")("hook_z", x)
    assert torch.all(z[..., 2, :] == -1) and torch.equal(z[..., :2, :], x[..., :2, :])
    assert x.min() == 0  # the input itself is not written to


@pytest.mark.parametrize("cfg", [cfg for cfg in CONFIGS if cfg.n_layers])
def test_patching_a_residual_stream_everywhere_runs_the_other_input_from_there_on(cfg):
    """Activation patching: block 0's input taken from input B's cache at every position, on input A, gives B's
    logits (the same positions, so the same positional embedding); at no position, A's: to 1e-10 in float64."""
    model = Transformer(cfg).double()
    a, b = tokens_for(cfg, seed=1), tokens_for(cfg, seed=2)
    logits_b, cache_b = model.run_with_cache(b)
    resid = cache_b["blocks.0.hook_resid_pre"]                                   # [batch pos d_model]
    for everywhere, expected in ((True, logits_b), (False, model(a).detach())):
        where = torch.full((1, 1, 1), everywhere)
        check = compare(model(a, patch={"blocks.0.hook_resid_pre": (where, resid)}).detach(), expected, 1e-10)
        assert check.passed, check  # not bit for bit: the unpatched pass takes the fused kernels


def test_a_patch_of_an_activation_the_model_lacks_or_one_also_ablated_is_refused():
    cfg = CONFIGS[1]  # 1 layer, 4 heads
    model, tokens = Transformer(cfg), tokens_for(cfg)
    nowhere = (torch.zeros(1, dtype=torch.bool), torch.zeros(1))
    with pytest.raises(ValueError, match="patch names blocks.1.hook_resid_pre, which this model has no activation"):
        model(tokens, patch={"blocks.1.hook_resid_pre": nowhere})
    with pytest.raises(ValueError, match="ablate and patch both name blocks.0.attn.hook_z"):
        model(tokens, ablate={(0, 1): torch.zeros(cfg.d_head)}, patch={"blocks.0.attn.hook_z": nowhere})


def test_ablating_a_head_the_model_does_not_have_is_refused():
    cfg = CONFIGS[1]  # 1 layer, 4 heads
    model = Transformer(cfg)
    for head in [(1, 0), (0, 4), (-1, 0)]:
        with pytest.raises(ValueError, match=r"ablate names head \(.*\), but the model has heads \(0…0, 0…3\)"):
            model(tokens_for(cfg), ablate={head: torch.zeros(cfg.d_head)})


def test_initial_weights_have_the_documented_spreads():
    """The class docstring: W_E ~ N(0, 1), W_pos ~ N(0, 0.1²), fan-in scaling for the rest (within 5 %)."""
    cfg = ModelConfig(n_layers=1, d_model=256, n_heads=4, d_vocab=512, n_ctx=512, d_mlp=512)
    weights = dict(Transformer(cfg).named_parameters())
    expected = {"embed.W_E": 1.0, "pos_embed.W_pos": 0.1, "blocks.0.attn.W_Q": 256**-0.5, "blocks.0.attn.W_K": 256**-0.5,
                "blocks.0.attn.W_V": 256**-0.5, "blocks.0.attn.W_O": (4 * 64) ** -0.5, "blocks.0.mlp.W_in": 256**-0.5,
                "blocks.0.mlp.W_out": 512**-0.5, "unembed.W_U": 256**-0.5}
    for name, std in expected.items():
        assert abs(weights[name].std().item() / std - 1) < 0.05, (name, weights[name].std().item(), std)
        assert abs(weights[name].mean().item()) < 0.05 * std, name


def _logits_and_gradients(model: Transformer, tokens: torch.Tensor, cache: dict | None) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    logits = model(tokens, cache)
    logits.pow(2).mean().backward()
    return [logits.detach()] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_the_fast_path_gives_the_recording_paths_logits_and_gradients(cfg, dtype, tolerance):
    """With nothing recorded, attention runs as one fused Q/K/V matmul and scaled_dot_product_attention, and
    LayerNorm as F.layer_norm; logits and every gradient equal the recording path's to 1e-5 (float32) and 1e-10
    (float64), relative to max(1, |value|)."""
    model = with_random_biases(Transformer(cfg).to(dtype))
    tokens = tokens_for(cfg)
    fast, recorded = _logits_and_gradients(model, tokens, None), _logits_and_gradients(model, tokens, {})
    assert [a is None for a in fast] == [b is None for b in recorded]  # unused weights (W_pos with no layers)
    for a, b in ((a, b) for a, b in zip(fast, recorded) if a is not None):
        check = compare(a, b, tolerance)
        assert check.passed, check


def test_the_plain_forward_takes_the_fused_kernels_and_a_recording_one_does_not(monkeypatch):
    cfg, calls = CONFIGS[2], []
    fused = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or fused(*a, **k))
    model, tokens = Transformer(cfg), tokens_for(cfg)
    with torch.inference_mode():
        model(tokens)
        assert len(calls) == cfg.n_layers
        model.run_with_cache(tokens)
        model(tokens, ablate={(0, 0): torch.zeros(cfg.d_head)})
    assert len(calls) == cfg.n_layers


@pytest.mark.parametrize("cfg", [cfg for cfg in CONFIGS if cfg.n_layers])
@torch.inference_mode()
def test_stopping_at_a_layer_returns_the_residual_stream_there_and_caches_nothing_after_it(cfg):
    model, tokens = with_random_biases(Transformer(cfg).double()), tokens_for(cfg)
    _, full = model.run_with_cache(tokens)
    for stop in range(cfg.n_layers + 1):
        resid, cache = model.run_with_cache(tokens, stop_at_layer=stop)
        expected = full[f"blocks.{stop - 1}.hook_resid_post"] if stop else (
            full["hook_embed"] + (full["hook_pos_embed"] if cfg.positional == "standard" else 0))
        assert torch.equal(resid, expected)                     # [batch pos d_model], no final LayerNorm, no logits
        assert not [name for name in cache if name.startswith((f"blocks.{stop}.", "ln_final"))]


def test_a_patch_after_the_layer_a_run_stops_at_is_refused():
    cfg = CONFIGS[2]  # 2 layers
    model, tokens = Transformer(cfg), tokens_for(cfg)
    nowhere = (torch.zeros(1, dtype=torch.bool), torch.zeros(1))
    with pytest.raises(ValueError, match="blocks.1.hook_resid_pre, which this model has no activation for before "
                                         "layer 1, where it stops"):
        model(tokens, patch={"blocks.1.hook_resid_pre": nowhere}, stop_at_layer=1)
