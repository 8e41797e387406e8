"""The engine's model calls: the direct way agrees with `model(...)` on every architecture it
claims, keeps its cache right through growth, crops and row removal, and steps aside otherwise."""

from __future__ import annotations

import logging

import pytest
import torch
import transformers
from tiny_models import EOS, PAD, ragged_prompts

from diversed import speculative_generate
from diversed.decoding.forward import Plan, SlotModel, plan, sliding_window, use_forward

VOCAB = 64


def tiny(config_cls, layers: int, seed: int, **extra):
    torch.manual_seed(seed)
    config = config_cls(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.2,
        bos_token_id=1,
        eos_token_id=EOS,
        pad_token_id=PAD,
        tie_word_embeddings=False,
        **extra,
    )
    model = transformers.AutoModelForCausalLM.from_config(config).eval().requires_grad_(False)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = EOS, PAD
    return model


def assert_exact(target, draft, n: int, max_new: int) -> None:
    """Lossless greedy speculative decoding emits exactly `target.generate`'s tokens."""
    ids, mask = ragged_prompts(vocab=VOCAB)
    out = speculative_generate(
        target, draft, ids, mask, num_draft_tokens=n, max_new_tokens=max_new, eos_token_id=[]
    )
    ref = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new, eos_token_id=None, pad_token_id=PAD
    )
    assert torch.equal(out.sequences, ref)


FAMILIES = {
    "llama": (transformers.LlamaConfig, {"attention_bias": True, "mlp_bias": True}),
    "mistral": (transformers.MistralConfig, {"sliding_window": None}),
    "qwen2": (transformers.Qwen2Config, {"use_sliding_window": False}),
    "qwen3": (
        transformers.Qwen3Config,
        {"head_dim": 24, "use_sliding_window": False},
    ),  # q/k norms, odd head dim
}


@pytest.mark.parametrize("family", FAMILIES)
def test_direct_way_is_taken_and_exact(family):
    config_cls, extra = FAMILIES[family]
    target, draft = tiny(config_cls, 2, 0, **extra), tiny(config_cls, 1, 1, **extra)
    assert plan(target).direct and plan(draft).direct
    assert_exact(target, draft, 4, 40)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_direct_cache_follows_growth_crops_and_row_removal(dtype):
    """The same call sequence through both ways: a ragged prompt, rounds that crop back and leave
    holes, the buffer doubling, and rows leaving the batch."""
    model = tiny(transformers.Qwen3Config, 2, 0, use_sliding_window=False).to(dtype)
    ids, mask = ragged_prompts(vocab=VOCAB)
    B, P = ids.shape
    g = torch.Generator().manual_seed(0)
    ids = torch.cat([ids, torch.randint(3, VOCAB, (B, 60), generator=g)], 1)
    mask = torch.cat([mask, (torch.rand(B, 60, generator=g) > 0.3).long()], 1)  # holes
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    ways = [SlotModel(model, VOCAB, hidden=False, how=Plan(model, direct)) for direct in (False, True)]
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    end, step = P, 0
    with torch.inference_mode():
        while end + 6 <= ids.shape[1]:
            new = 1 if step % 2 else 6
            outs = [w.forward(ids, mask, pos, end + new, keep=new)[0] for w in ways]
            torch.testing.assert_close(outs[1], outs[0], rtol=tol, atol=tol)
            end += new
            if new > 1:  # crop the last 3 slots, as a round that rejected them
                end -= 3
                for w in ways:
                    w.crop(end)
            if step == 4:  # rows 1 and 2 finish
                keep = torch.tensor([0, 3])
                ids, mask, pos = ids[keep], mask[keep], pos[keep]
                for w in ways:
                    w.select(keep)
            step += 1
    assert ways[1].cache.shape[4] >= end > P + 8  # grew past the first allocation


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (6, 1), (4, 4)])
def test_grouped_query_attention_folded_or_copied_agrees_with_the_model(heads, kv_heads):
    """Short calls fold the query groups into the query axis (no copy of the cache); a prefill
    longer than 2·heads·head_dim / groups slots copies each kv head per group (as HF): both agree
    with `model(...)`, ragged rows and a hole included."""
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=512,
        initializer_range=0.2, pad_token_id=PAD, use_sliding_window=False, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval().requires_grad_(False)
    long = 2 * heads * (48 // heads) // (heads // kv_heads) + 5  # past the fold's bound
    ids, mask = ragged_prompts(lengths=(long, long - 9, 4), vocab=VOCAB)
    g = torch.Generator().manual_seed(0)
    ids = torch.cat([ids, torch.randint(3, VOCAB, (3, 12), generator=g)], 1)
    mask = torch.cat([mask, torch.ones(3, 12, dtype=torch.long)], 1)
    mask[1, -7] = 0  # a hole, as a rejected draft leaves
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    ways = [SlotModel(model, VOCAB, hidden=False, how=Plan(model, direct)) for direct in (False, True)]
    with torch.inference_mode():
        start = 0
        for end in (long, long + 1, long + 7, long + 12):  # the prefill (copied where groups > 1),
            # then folded calls of 1, 6 and 5 slots
            outs = [w.forward(ids, mask, pos, end, keep=end - start)[0] for w in ways]
            text = mask[:, start:end].bool()  # a padding slot's logits are nobody's
            torch.testing.assert_close(outs[1][text], outs[0][text], rtol=1e-4, atol=1e-4)
            start = end


SLIDING = {
    "gemma3, sliding and full layers": (transformers.Gemma3TextConfig, {"sliding_window": 4, "head_dim": 16}),
    "mistral, every layer sliding": (transformers.MistralConfig, {"sliding_window": 4}),
}


@pytest.mark.parametrize("family", SLIDING)
def test_sliding_window_models_give_each_row_what_it_gets_alone(family):
    """Windows (4 tokens here) count positions, not slots: a left-padded row, and a row with holes
    where other rows took more drafts, get exactly the tokens it gets decoded alone."""
    config_cls, extra = SLIDING[family]
    types = (
        {"layer_types": ["sliding_attention", "full_attention"]}
        if config_cls is transformers.Gemma3TextConfig
        else {}
    )
    target, draft = tiny(config_cls, 2, 0, **extra, **types), tiny(config_cls, 2, 0, **extra, **types)
    g = torch.Generator().manual_seed(0)
    for p in draft.parameters():  # a draft near the target: some drafts accepted, some not
        p.add_(0.3 * p.std() * torch.randn(p.shape, generator=g))
    assert sliding_window(target) == (4, bool(types)) and not plan(target).direct
    ids, mask = ragged_prompts(vocab=VOCAB)
    P, new = ids.shape[1], 20
    out = speculative_generate(
        target, draft, ids, mask, num_draft_tokens=3, max_new_tokens=new, eos_token_id=[]
    )
    assert 0 < out.stats.acceptance_rate < 1  # rows accept different numbers of drafts: holes
    for i in range(ids.shape[0]):
        alone = ids[i : i + 1, mask[i].bool()]
        ref = target.generate(alone, do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=PAD)
        assert torch.equal(out.sequences[i, P:], ref[0, alone.shape[1] :]), i
    # a full forward (what training and distillation score, with transformers' own masks) over the
    # left-padded batch: padding before a row does not move its tokens apart, so the window is right
    seq, attn = out.sequences, torch.cat([mask, torch.ones(mask.shape[0], new, dtype=mask.dtype)], 1)
    pos = (attn.cumsum(-1) - 1).clamp_min(0)
    logits = target(input_ids=seq, attention_mask=attn, position_ids=pos).logits
    for i in range(ids.shape[0]):
        alone = seq[i : i + 1, attn[i].bool()]
        torch.testing.assert_close(
            logits[i, attn[i].bool()], target(input_ids=alone).logits[0], atol=1e-5, rtol=1e-4
        )


def test_architectures_outside_the_family_take_the_general_way():
    target = tiny(transformers.GPTNeoXConfig, 2, 0)
    draft = tiny(transformers.GPTNeoXConfig, 1, 1)
    assert not plan(target).direct
    assert_exact(target, draft, 3, 16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_model_that_differs_inside_is_not_run_directly(dtype):
    """A Llama whose layer does something the direct way does not know (here a forward hook that
    shifts its output, as a steering vector would) fails the agreement check, so the engine calls
    `model(...)` and stays exact; in half precision too, where the check's tolerance is wider."""
    target, draft = tiny(transformers.LlamaConfig, 2, 0), tiny(transformers.LlamaConfig, 1, 1)
    target, draft = target.to(dtype), draft.to(dtype)
    target.model.layers[0].register_forward_hook(lambda module, args, output: output + 0.5)
    assert not plan(target).direct and plan(draft).direct
    if dtype == torch.float32:  # (bf16 greedy has near-ties that the two ways may break apart)
        assert_exact(target, draft, 3, 12)


@pytest.mark.parametrize("layers", [4, 8])
def test_a_half_precision_llama_is_run_directly(layers):
    """In bf16 the two ways round differently, by a few hundredths of the values' scale after a
    few layers (SmolLM2's 30: 0.02–0.04, each as far from the fp32 result): that is rounding, and
    the model is run the direct way (a fault is still caught: the test above)."""
    model = tiny(transformers.LlamaConfig, layers, 0).to(torch.bfloat16)
    assert plan(model).direct, plan(model).reason


def test_a_hook_added_later_is_noticed():
    """The plan is re-checked when hooks change: a hook added after a first generation is honoured,
    and removing it brings the direct way back."""
    target, draft = tiny(transformers.LlamaConfig, 2, 0), tiny(transformers.LlamaConfig, 1, 1)
    ids, mask = ragged_prompts(vocab=VOCAB)
    speculative_generate(target, draft, ids, mask, max_new_tokens=4)
    assert plan(target).direct
    handle = target.model.layers[0].register_forward_hook(lambda module, args, output: output + 0.5)
    assert_exact(target, draft, 3, 12)
    assert not plan(target).direct
    handle.remove()
    assert plan(target).direct


def test_a_global_hook_is_noticed():
    """A hook registered for every module (`register_module_forward_hook`) after a first generation
    makes the plan be re-checked; one that changes the decoder layers' outputs sends the model the
    general way, which runs it."""
    target, draft = tiny(transformers.LlamaConfig, 2, 0), tiny(transformers.LlamaConfig, 1, 1)
    assert_exact(target, draft, 3, 12)
    assert plan(target).direct
    layer = type(target.model.layers[0])
    shift = lambda module, args, output: output + 0.5 if isinstance(module, layer) else None  # noqa: E731
    handle = torch.nn.modules.module.register_module_forward_hook(shift)
    try:
        assert_exact(target, draft, 3, 12)
        assert not plan(target).direct
    finally:
        handle.remove()
    assert plan(target).direct


@pytest.mark.parametrize("how", ["load_state_dict", "in_place", "replaced"])
def test_weights_changed_after_a_generation_are_used(how):
    """On CPU a small model's plan holds [in, out] copies of its linear weights; weights updated in
    place (load_state_dict, an optimizer step) or replaced between generations must not leave the
    direct way on the old ones: the next generation equals `generate` with the new weights."""
    target, draft = tiny(transformers.LlamaConfig, 2, 0), tiny(transformers.LlamaConfig, 1, 1)
    assert_exact(target, draft, 3, 12)
    first = plan(target)
    assert first.direct and first.layers[0].q[0].is_contiguous()  # a copy, not a view
    other = tiny(transformers.LlamaConfig, 2, 7)
    proj = target.model.layers[1].self_attn.q_proj
    with torch.no_grad():
        if how == "load_state_dict":
            target.load_state_dict(other.state_dict())
        elif how == "in_place":
            proj.weight.add_(torch.randn_like(proj.weight))
            target.lm_head.weight.mul_(-1.0)
        else:
            proj.weight = torch.nn.Parameter(torch.randn_like(proj.weight), requires_grad=False)
    assert_exact(target, draft, 3, 12)
    assert plan(target) is not first and plan(target).direct


def test_a_model_built_under_inference_mode_is_run_on_views_of_its_weights():
    """Inference tensors keep no version counter, so in-place updates could not be seen: such a
    model gets views of its weights (always current), not copies, and still runs directly."""
    with torch.inference_mode():
        target, draft = tiny(transformers.LlamaConfig, 2, 0), tiny(transformers.LlamaConfig, 1, 1)
    assert next(target.parameters()).is_inference()
    assert_exact(target, draft, 3, 12)
    assert plan(target).direct and not plan(target).layers[0].q[0].is_contiguous()


def test_hooks_on_the_embeddings_and_lm_head_still_fire():
    """The direct way reads the embedding and LM head weights itself unless those modules carry
    hooks: then it calls them, so a hook there (the bench times forwards that way) sees every call."""
    target, draft = tiny(transformers.LlamaConfig, 2, 0), tiny(transformers.LlamaConfig, 1, 1)
    ids, mask = ragged_prompts(vocab=VOCAB)
    plain = speculative_generate(
        target, draft, ids, mask, num_draft_tokens=3, max_new_tokens=10, eos_token_id=[]
    )
    seen = {"embed": 0, "head": 0}
    count = lambda key: lambda *a: seen.__setitem__(key, seen[key] + 1)  # noqa: E731
    handles = [
        target.get_input_embeddings().register_forward_pre_hook(count("embed")),
        target.get_output_embeddings().register_forward_hook(count("head")),
    ]
    assert plan(target).direct  # re-checked with the hooks on (the check's own calls fire them too)
    seen.update(embed=0, head=0)
    out = speculative_generate(
        target, draft, ids, mask, num_draft_tokens=3, max_new_tokens=10, eos_token_id=[]
    )
    assert torch.equal(out.sequences, plain.sequences)
    assert seen["embed"] == seen["head"] == out.stats.target_calls > 0
    for h in handles:
        h.remove()


# ----------------------------------------------------------------------------- choosing the path


def test_the_forward_path_is_asked_for_and_logged(caplog):
    """`use_forward` picks the path; each choice is logged once with its reason; "direct" on a model
    the direct way cannot run is an error naming why, not a silent fallback."""
    import logging

    from diversed.decoding.forward import forward_path, use_forward

    caplog.set_level(logging.INFO, logger="diversed.decoding.forward")
    target, draft = tiny(transformers.LlamaConfig, 2, 0), tiny(transformers.LlamaConfig, 1, 1)
    assert forward_path(target) == "direct" and "direct forward path: llama on cpu" in caplog.text
    use_forward(target, "hf")
    assert forward_path(target) == "hf" and "asked for (forward=hf)" in caplog.text
    assert_exact(target, draft, 3, 12)  # the hf path is exact too
    use_forward(target, "direct")
    assert forward_path(target) == "direct"
    with pytest.raises(ValueError, match="forward must be one of"):
        use_forward(target, "fast")

    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=VOCAB, n_layer=1, n_embd=32, n_head=2)
    ).eval()
    assert forward_path(gpt2) == "hf" and "model type 'gpt2' is not one of" in caplog.text
    use_forward(gpt2, "direct")
    with pytest.raises(ValueError, match=r"forward=direct was asked for .*model type 'gpt2'"):
        forward_path(gpt2)


def test_a_surprise_in_the_direct_check_is_a_warning_with_its_cause(caplog, monkeypatch):
    from diversed.decoding.forward import forward_path

    def broken(self, *a, **k):
        raise RuntimeError("kernel went missing")

    monkeypatch.setattr(Plan, "run", broken)
    model = tiny(transformers.LlamaConfig, 1, 2)
    assert forward_path(model) == "hf"
    warned = [r for r in caplog.records if r.levelname == "WARNING" and r.name == "diversed.decoding.forward"]
    assert warned and "raised RuntimeError: kernel went missing" in warned[0].getMessage()


def test_auto_takes_the_direct_path_on_cpu_only(caplog):
    """Off the CPU (here the meta device stands in for a GPU), auto takes the hf path and says why."""
    import logging

    from diversed.decoding.forward import forward_path

    caplog.set_level(logging.INFO, logger="diversed.decoding.forward")
    model = tiny(transformers.LlamaConfig, 1, 3).to("meta")
    assert forward_path(model) == "hf" and "direct path on CPU only" in caplog.text


def test_a_deep_model_with_large_logits_takes_the_direct_path_when_it_agrees(caplog):
    """The agreement check is relative to the values' scale: a deep Llama whose logits run to the
    hundreds (fp32 reassociation then moves them by more than 1e-4) still takes the direct path, and
    the log says the gap and the tolerance; a hooked copy does not."""
    model = tiny(transformers.LlamaConfig, 12, 3)
    with torch.no_grad():
        model.lm_head.weight.mul_(60.0)
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.mul_(3.0)
    ids = torch.arange(12).view(2, 6) % VOCAB
    assert float(model(ids).logits.abs().max()) > 100
    with caplog.at_level(logging.INFO, logger="diversed.decoding.forward"):
        assert plan(model).direct
    assert "of the values' scale (tolerance 5e-05)" in caplog.text
    model.model.layers[5].register_forward_hook(lambda module, args, output: output * 1.001)
    assert not plan(model).direct


def test_the_cache_is_passed_by_the_name_the_model_takes():
    """transformers 5.x renamed `past_key_values` to `cache`; the old name warns on every forward
    (6 warnings in one toy decode, 36 lines of the demo's stderr)."""
    import warnings

    from diversed.decoding.forward import use_forward

    target, draft = tiny(transformers.LlamaConfig, 2, 0), tiny(transformers.LlamaConfig, 1, 1)
    for model in (target, draft):
        use_forward(model, "hf")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any deprecation raised inside a forward fails the test
        assert_exact(target, draft, 3, 8)


def test_autocast_takes_the_hf_path_and_the_plan_follows_it():
    """Under autocast (Lightning's bf16-mixed: fp32 weights, bf16 products) the model takes the hf
    path, saying why (not as a disagreement); a plan made without autocast is not reused under it,
    nor the other way round."""
    model = tiny(transformers.LlamaConfig, 2, 0)
    assert plan(model).direct
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = plan(model)
        assert not under.direct and "under autocast" in under.reason
        assert_exact(model, tiny(transformers.LlamaConfig, 1, 1), 3, 8)
    after = plan(model)
    assert after is not under and after.direct and "tolerance 5e-05" in after.reason
    use_forward(model, "direct")  # asked for: taken under autocast too, at half precision's tolerance
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert plan(model).direct and "tolerance 0.1" in plan(model).reason
