"""Prompt passes kept across calls (`PromptCache`): a hit gives exactly what a miss gives, on both
forward paths and a sliding-window model, for every decoder; the cache keys, bounds and copies."""

from __future__ import annotations

import pytest
import torch
import transformers
from test_forward import VOCAB, tiny
from tiny_models import PAD, ragged_prompts, tiny_pair

from diversed import DynamicEnsemble, StaticEnsemble, WeightHead, speculative_generate
from diversed.decoding.autoregressive import autoregressive_generate
from diversed.decoding.forward import plan, use_forward
from diversed.decoding.prompt_cache import PromptCache


def _models(kind: str):
    if kind == "gemma3 (sliding, hf path)":
        extra = {"sliding_window": 4, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"]}
        target = tiny(transformers.Gemma3TextConfig, 2, 0, **extra)
        draft = tiny(transformers.Gemma3TextConfig, 2, 0, **extra)
        g = torch.Generator().manual_seed(0)
        for p in draft.parameters():  # near the target: some drafts accepted, some not
            p.add_(0.3 * p.std() * torch.randn(p.shape, generator=g))
        return target, draft
    target, draft = tiny_pair(vocab=VOCAB)
    for m in (target, draft):
        use_forward(m, "hf" if kind == "llama (hf path)" else "direct")
    return target, draft


KINDS = ("llama (direct path)", "llama (hf path)", "gemma3 (sliding, hf path)")


def _decoders(target, draft):
    head = WeightHead(draft.config.hidden_size, target.config.hidden_size)

    def spec(v, **kw):
        return lambda ids, mask, prompts, seed: speculative_generate(  # noqa: E731
            target,
            draft,
            ids,
            mask,
            verifier=v,
            num_draft_tokens=3,
            max_new_tokens=12,
            do_sample=True,
            generator=torch.Generator().manual_seed(seed),
            eos_token_id=[],
            prompt_cache=prompts,
            **kw,
        )

    return {
        "lossless": spec(None),
        "static, first token from the target": spec(StaticEnsemble(0.4), first_token="target"),
        "dynamic": spec(DynamicEnsemble(head)),
        "autoregressive": lambda ids, mask, prompts, seed: autoregressive_generate(
            target,
            ids,
            mask,
            max_new_tokens=12,
            do_sample=True,
            generator=torch.Generator().manual_seed(seed),
            eos_token_id=[],
            prompt_cache=prompts,
        ),
    }


@pytest.mark.parametrize("kind", KINDS)
def test_a_kept_prompt_pass_gives_exactly_what_computing_it_gives(kind):
    """Every decoder, one cache across them (as a sweep's points share it): the first call of each
    model misses, every later one hits, and each output equals the one with nothing kept."""
    target, draft = _models(kind)
    assert plan(target).direct == (kind == "llama (direct path)")
    ids, mask = ragged_prompts(vocab=VOCAB)
    kept = PromptCache(1e9)
    for name, decode in _decoders(target, draft).items():
        alone = decode(ids, mask, PromptCache(0), 7)  # recomputed
        for _ in range(2):
            out = decode(ids, mask, kept, 7)
            assert torch.equal(out.sequences, alone.sequences), name
            assert out.stats.target_calls == alone.stats.target_calls, name  # the prompt pass is no call
    # the target's and the draft's passes computed once, read by every later call
    assert kept.misses == 2 and kept.hits == 2 + 4 + 4 + 2 and len(kept.entries) == 2


def test_greedy_lossless_with_a_kept_prompt_pass_is_still_generate():
    target, draft = tiny_pair(vocab=VOCAB)
    ids, mask = ragged_prompts(vocab=VOCAB)
    kept = PromptCache(1e9)
    ref = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=10, eos_token_id=None, pad_token_id=PAD
    )
    for _ in range(2):
        out = speculative_generate(
            target,
            draft,
            ids,
            mask,
            num_draft_tokens=3,
            max_new_tokens=10,
            eos_token_id=[],
            prompt_cache=kept,
        )
        assert torch.equal(out.sequences, ref)
    assert kept.hits == 2


def test_keys_bounds_and_copies():
    target, draft = tiny_pair(vocab=VOCAB)
    ids, mask = ragged_prompts(vocab=VOCAB)
    run = lambda i, m, cache: speculative_generate(  # noqa: E731
        target, draft, i, m, num_draft_tokens=3, max_new_tokens=6, eos_token_id=[], prompt_cache=cache
    )
    kept = PromptCache(1e9)
    first = run(ids, mask, kept)
    # another batch (one token changed) and another mask are other keys
    other = ids.clone()
    other[0, -2] = (other[0, -2] + 1) % VOCAB or 3
    run(other, mask, kept)
    assert kept.misses == 4 and kept.hits == 0
    # what the cache keeps is a copy: a later call writing into its caches leaves it as it was
    assert torch.equal(run(ids, mask, kept).sequences, first.sequences) and kept.hits == 2
    assert torch.equal(run(ids, mask, kept).sequences, first.sequences) and kept.hits == 4
    # bounded: with room for one model's pass, the first one read (the target's) is kept and hit
    # again, the draft's never (nothing is evicted: a sweep's cyclic reads would thrash), 0 keeps nothing
    one = max(size for _, size, _ in kept.entries.values())
    small = PromptCache(one)
    for _ in range(2):
        assert torch.equal(run(ids, mask, small).sequences, first.sequences)
    assert len(small.entries) == 1 and small.bytes <= one
    assert next(iter(small.entries.values()))[2] is target and (small.hits, small.misses) == (1, 3)
    none = PromptCache(0)
    run(ids, mask, none)
    assert not none.entries and none.hits == 0
    with pytest.raises(ValueError, match=">= 0"):
        PromptCache(-1)


def test_recording_the_prompt_states_takes_no_prompt_cache():
    target, _ = tiny_pair(vocab=VOCAB)
    ids, mask = ragged_prompts(vocab=VOCAB)
    with pytest.raises(ValueError, match="no prompt_cache"):
        autoregressive_generate(
            target, ids, mask, max_new_tokens=2, record=lambda s: None, prompt_cache=PromptCache(1e9)
        )
