"""Where the first new token comes from (`speculative_generate(first_token=...)`): verified against
v like every other token (the default, and what transformers' assisted generation does), or from
the target's prefill alone ("target")."""

from __future__ import annotations

import pytest
import torch
from test_engine import chi2_pvalue, first_position, random_head
from tiny_models import EOS, PAD, ragged_prompts, tiny_pair

from diversed import DynamicEnsemble, Lossless, StaticEnsemble, speculative_generate
from diversed.decoding.reference import transformers_generate
from diversed.decoding.verify import mix

W = 0.3  # mostly the draft: argmax v often differs from argmax p


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def prompts_where_v_and_p_disagree(target, draft, count=3, seed=0):
    """Prompts whose first position has argmax v ≠ argmax p (v = W·p + (1 − W)·q)."""
    g, found = torch.Generator().manual_seed(seed), []
    for _ in range(400):
        prompt = torch.randint(3, 96, (1, int(torch.randint(3, 9, (1,), generator=g))), generator=g)
        p, q, _ = first_position(target, draft, prompt)
        if int(mix(p, q, W).argmax()) != int(p.argmax()):
            found.append(prompt)
            if len(found) == count:
                return found
    raise AssertionError("no prompt where argmax v and argmax p differ: the test would be vacuous")


def test_static_greedy_with_the_target_bonus_equals_transformers_and_target_first_takes_argmax_p(pair):
    """transformers (5.x) verifies its first new token against v too: our default equals its static
    ensemble for every prompt, also where argmax v ≠ argmax p at the first position; with
    first_token="target" the first token is argmax p instead (the decoding after it is the same rule)."""
    target, draft = pair
    g = torch.Generator().manual_seed(3)
    disagree = prompts_where_v_and_p_disagree(target, draft)
    kw = dict(
        verifier=StaticEnsemble(W),
        num_draft_tokens=3,
        max_new_tokens=12,
        bonus_token="target",
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    for prompt in disagree + [torch.randint(3, 96, (1, 6), generator=g) for _ in range(4)]:
        ref = transformers_generate(
            target,
            prompt,
            draft=draft,
            ensemble_weight=W,
            num_draft_tokens=3,
            max_new_tokens=12,
            eos_token_id=EOS,
            pad_token_id=PAD,
        ).sequences
        assert speculative_generate(target, draft, prompt, **kw).sequences.tolist() == ref.tolist(), (
            prompt.tolist()
        )
    for prompt in disagree:
        p, _, _ = first_position(target, draft, prompt)
        ours = speculative_generate(target, draft, prompt, first_token="target", **kw).sequences
        assert int(ours[0, prompt.shape[1]]) == int(p.argmax())  # the target's own choice, not v's


def test_lossless_with_the_target_first_still_equals_generate(pair):
    target, draft = pair
    ids, mask = ragged_prompts()
    ref = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=10, pad_token_id=PAD, eos_token_id=EOS
    )
    for n in (1, 3):
        out = speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=Lossless(),
            num_draft_tokens=n,
            max_new_tokens=10,
            first_token="target",
            eos_token_id=EOS,
            pad_token_id=PAD,
        )
        assert torch.equal(out.sequences[:, : ref.shape[1]], ref)
        st = out.stats
        assert int(st.rounds.min()) >= 1 and int(st.accepted_hist.sum()) == int(st.rounds.sum())
        assert 0 <= st.acceptance_rate <= 1 and int((st.new_tokens <= 10).all())


def test_the_first_token_is_p_with_target_first_and_v_by_default(pair):
    target, draft = pair
    prompt = prompts_where_v_and_p_disagree(target, draft, count=1, seed=5)[0]
    p, q, _ = first_position(target, draft, prompt)
    rows = prompt.expand(6000, -1)

    def first(**kw):
        out = speculative_generate(
            target,
            draft,
            rows,
            verifier=StaticEnsemble(W),
            num_draft_tokens=3,
            max_new_tokens=2,
            do_sample=True,
            generator=torch.Generator().manual_seed(1),
            eos_token_id=[],
            **kw,
        )
        return out.sequences[:, prompt.shape[1]], out.stats

    x, stats = first(first_token="target")
    assert chi2_pvalue(x, p) > 1e-3 and chi2_pvalue(x, mix(p, q, W)) < 1e-6
    assert int(stats.proposed.sum()) == 0 and int(stats.rounds.min()) == 2  # 1 token left after it: no drafts
    x, _ = first()
    assert chi2_pvalue(x, mix(p, q, W)) > 1e-3 and chi2_pvalue(x, p) < 1e-6


def test_the_first_token_from_the_target_records_w_one(pair):
    target, draft = pair
    ids, mask = ragged_prompts()
    out = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=DynamicEnsemble(random_head(target, draft)),
        num_draft_tokens=3,
        max_new_tokens=6,
        first_token="target",
        do_sample=True,
        generator=torch.Generator().manual_seed(0),
        eos_token_id=[],
    )
    assert torch.equal(out.stats.token_w[:, 0], torch.ones(ids.shape[0]))
    assert bool((out.stats.token_w[:, 1:6] < 1).any())  # the head's own w after it


def test_a_row_that_ends_on_its_first_token_and_bad_values(pair):
    target, draft = pair
    ids, mask = ragged_prompts()
    p1 = target(ids, attention_mask=mask).logits[:, -1].argmax(-1)
    out = speculative_generate(
        target,
        draft,
        ids,
        mask,
        num_draft_tokens=3,
        max_new_tokens=6,
        first_token="target",
        eos_token_id=[int(p1[0])],
        pad_token_id=PAD,
    )
    assert (
        int(out.stats.new_tokens[0]) == 1 and out.sequences[0, ids.shape[1]] == p1[0]
    )  # EOS first: the row ends
    one = speculative_generate(
        target,
        draft,
        ids,
        mask,
        num_draft_tokens=3,
        max_new_tokens=1,
        first_token="target",
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    assert one.sequences[:, ids.shape[1]].tolist() == p1.tolist() and int(one.stats.proposed.sum()) == 0
    with pytest.raises(ValueError, match="first_token"):
        speculative_generate(target, draft, ids, mask, first_token="draft")


@pytest.mark.parametrize("do_sample", [False, True])
def test_the_statistics_count_the_first_token_as_a_target_call_without_drafts(pair, do_sample):
    """The target's own first token is a round of every row (one target call, nothing proposed or
    accepted, k = 0 in the histogram); every later round is an ordinary one."""
    target, draft = pair
    ids, mask = ragged_prompts()
    kw = dict(
        verifier=Lossless(),
        num_draft_tokens=3,
        max_new_tokens=9,
        eos_token_id=[],
        pad_token_id=PAD,
        do_sample=do_sample,
        generator=torch.Generator().manual_seed(2),
    )
    first = speculative_generate(target, draft, ids, mask, first_token="target", **kw).stats
    assert first.num_draft_tokens[0] == 0 and first.target_calls == len(first.num_draft_tokens)
    assert first.draft_calls == sum(first.num_draft_tokens)  # the draft is not called for the first token
    assert bool((first.accepted_hist[:, 0] >= 1).all()) and first.accepted_hist[:, 1:].sum() > 0
    for st in (first, speculative_generate(target, draft, ids, mask, **kw).stats):
        assert torch.equal(st.new_tokens, torch.full((4,), 9))
        # without EOS every round keeps its accepted drafts and one token more
        assert torch.equal(st.accepted + st.rounds, st.new_tokens)
        assert torch.equal(st.accepted_hist.sum(1), st.rounds) and int(st.rounds.max()) == st.target_calls
        assert bool((st.verified <= st.proposed).all()) and bool((st.accepted <= st.verified).all())
        s = st.summary()
        assert s["tokens_per_target_call"] == pytest.approx(s["new_tokens"] / s["rounds"])
        assert s["acceptance_rate"] == pytest.approx(s["accepted"] / s["proposed"])
        assert s["alpha"] == pytest.approx(s["accepted"] / int(st.verified.sum()))


def test_stop_ends_rows_on_the_targets_first_token_and_later(pair):
    """`stop` is asked after the target's first token (its own sync) and after every round."""
    target, draft = pair
    ids, mask = ragged_prompts()
    kw = dict(num_draft_tokens=3, max_new_tokens=10, first_token="target", eos_token_id=EOS, pad_token_id=PAD)
    full = speculative_generate(target, draft, ids, mask, **kw).sequences[:, ids.shape[1] :]
    asked = []

    def after_one(tokens, n):
        asked.append(len(tokens))
        return 1

    one = speculative_generate(target, draft, ids, mask, stop=after_one, **kw)
    assert asked == [1] * 4 and torch.equal(one.sequences[:, ids.shape[1] :], full[:, :1])
    assert one.stats.target_calls == 1 and one.stats.draft_calls == 0 and int(one.stats.proposed.sum()) == 0
    four = speculative_generate(target, draft, ids, mask, stop=lambda t, n: 4 if len(t) >= 4 else None, **kw)
    assert torch.equal(four.sequences[:, ids.shape[1] :], full[:, :4])
    assert bool((four.stats.new_tokens == 4).all())
