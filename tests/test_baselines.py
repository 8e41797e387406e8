"""The baselines beside the engine: token-by-token decoding on its forward path, and transformers'
own decoding as a reference. Both return the engine's (sequences, stats)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import EOS, PAD, VOCAB, ragged_prompts, tiny_pair

from diversed import (
    DynamicEnsemble,
    StaticEnsemble,
    WeightHead,
    autoregressive_generate,
    speculative_generate,
    transformers_generate,
)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def test_the_loop_matches_generate_and_lets_finished_rows_go(pair):
    target, _ = pair
    ids, mask = ragged_prompts()
    ref = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=20, pad_token_id=PAD, eos_token_id=EOS
    )
    out = autoregressive_generate(target, ids, mask, max_new_tokens=20, eos_token_id=EOS, pad_token_id=PAD)
    assert torch.equal(out.sequences, ref[:, : out.sequences.shape[1]])
    s = out.stats
    assert (
        torch.equal(s.rounds, s.new_tokens) and int(s.proposed.sum()) == 0 and s.tokens_per_target_call == 1.0
    )
    assert s.target_calls == int(s.new_tokens.max())  # one batched call per step; finished rows leave
    ended = [n < 20 for n in s.new_tokens.tolist()]
    assert any(ended)  # a row ended at EOS: its last token is EOS and it is padded after it
    for i, n in enumerate(s.new_tokens.tolist()):
        if ended[i]:
            assert int(out.sequences[i, ids.shape[1] + n - 1]) == EOS


def test_the_loop_stops_where_the_callback_says(pair):
    target, _ = pair
    ids, mask = ragged_prompts()
    P = ids.shape[1]
    free = autoregressive_generate(target, ids, mask, max_new_tokens=16, eos_token_id=[])
    a = int(free.sequences[0, P + 3])

    def stop(tokens, new):
        assert new == 1
        return next((i + 1 for i, t in enumerate(tokens) if t == a), None)

    out = autoregressive_generate(target, ids, mask, max_new_tokens=16, eos_token_id=[], stop=stop)
    for i in range(ids.shape[0]):
        text = free.sequences[i, P:].tolist()
        cut = text.index(a) + 1 if a in text else 16
        assert int(out.stats.new_tokens[i]) == cut
        assert out.sequences[i, P : P + cut].tolist() == text[:cut]


def test_the_loop_samples_from_v_with_an_ensemble(pair):
    """w = 0 samples from the draft alone: the same tokens as the draft sampling by itself."""
    target, draft = pair
    ids, mask = ragged_prompts()
    kwargs = {"max_new_tokens": 10, "eos_token_id": [], "do_sample": True}
    from_v = autoregressive_generate(
        target,
        ids,
        mask,
        draft=draft,
        verifier=StaticEnsemble(0.0),
        generator=torch.Generator().manual_seed(2),
        **kwargs,
    )
    alone = autoregressive_generate(draft, ids, mask, generator=torch.Generator().manual_seed(2), **kwargs)
    assert torch.equal(from_v.sequences, alone.sequences)
    head = WeightHead(draft.config.hidden_size, target.config.hidden_size)
    dyn = autoregressive_generate(target, ids, mask, draft=draft, verifier=DynamicEnsemble(head), **kwargs)
    assert dyn.stats.mean_w == pytest.approx(0.5) and dyn.stats.draft_calls == dyn.stats.target_calls
    with pytest.raises(ValueError, match="both draft and verifier"):
        autoregressive_generate(target, ids, mask, draft=draft)


def test_transformers_reference_is_generate_with_the_engines_outputs(pair):
    target, draft = pair
    ids, mask = ragged_prompts()
    ref = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=12, pad_token_id=PAD, eos_token_id=EOS
    )
    out = transformers_generate(target, ids, mask, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD)
    assert torch.equal(out.sequences, ref[:, : out.sequences.shape[1]])
    assert torch.equal(out.stats.rounds, out.stats.new_tokens)
    # assisted, with transformers' static ensemble: the same tokens as our engine with its bonus rule
    one = ids[1:2, mask[1].bool()]
    for n in (2, 4):
        hf = transformers_generate(
            target,
            one,
            draft=draft,
            ensemble_weight=0.4,
            num_draft_tokens=n,
            max_new_tokens=15,
            eos_token_id=EOS,
            pad_token_id=PAD,
        )
        ours = speculative_generate(
            target,
            draft,
            one,
            verifier=StaticEnsemble(0.4),
            num_draft_tokens=n,
            max_new_tokens=15,
            bonus_token="target",
            eos_token_id=EOS,
            pad_token_id=PAD,
        )
        assert torch.equal(hf.sequences, ours.sequences)
        s = hf.stats
        assert int(s.accepted) == int(s.new_tokens) - int(s.rounds) and 0 < int(s.proposed) <= n * int(
            s.rounds
        )
    with pytest.raises(ValueError, match="batch 1 only"):
        transformers_generate(target, ids, mask, draft=draft, max_new_tokens=4)
    assert VOCAB > 0
