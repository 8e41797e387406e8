"""The relaxed verification rules: limit cases, the first token's distribution, monotone knobs."""

from __future__ import annotations

import math

import pytest
import torch
from test_engine import chi2_pvalue, first_position, random_head  # noqa: F401  (shared helpers)
from tiny_models import ragged_prompts, tiny_pair

from diversed import Cascade, Lossless, LossySD, TypicalAcceptance, speculative_generate
from diversed.decoding.rules import defer, entropy, lossy_first_token, typical_threshold
from diversed.decoding.verify import mix, total_variation

N_ROWS = 6000


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


PROMPT = torch.tensor([[5, 17, 33, 8, 61, 12]])


def first_tokens(target, draft, verifier, seed=1, **kwargs):
    """The first emitted token of N_ROWS copies of PROMPT, with one draft at stake, and the stats."""
    out = speculative_generate(
        target,
        draft,
        PROMPT.expand(N_ROWS, -1),
        verifier=verifier,
        num_draft_tokens=3,
        max_new_tokens=2,
        do_sample=True,
        generator=torch.Generator().manual_seed(seed),
        eos_token_id=[],
        **kwargs,
    )
    return out.sequences[:, PROMPT.shape[1]], out.stats


def same_tokens(target, draft, a, b, **kwargs):
    ids, mask = ragged_prompts()
    outs = [
        speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=v,
            num_draft_tokens=3,
            max_new_tokens=20,
            generator=torch.Generator().manual_seed(4),
            **kwargs,
        )
        for v in (a, b)
    ]
    return torch.equal(outs[0].sequences, outs[1].sequences) and torch.equal(
        outs[0].stats.accepted, outs[1].stats.accepted
    )


def close(rate: float, expected: float, n: int = N_ROWS) -> bool:
    return abs(rate - expected) < 4 * math.sqrt(max(expected * (1 - expected), 1e-4) / n)


# ----------------------------------------------------------------------------- lossy SD


def test_lossy_with_lenience_one_is_lossless(pair):
    target, draft = pair
    for do_sample in (False, True):
        assert same_tokens(target, draft, LossySD(1.0), Lossless(), do_sample=do_sample)


def test_lossy_first_token_has_the_distribution_its_rule_implies(pair):
    target, draft = pair
    p, q, _ = first_position(target, draft, PROMPT)
    l = 0.4  # noqa: E741
    first, stats = first_tokens(target, draft, LossySD(l))
    implied = lossy_first_token(p, q, l)
    assert abs(float(implied.sum()) - 1) < 1e-5
    assert chi2_pvalue(first, implied) > 1e-3
    assert chi2_pvalue(first, p) < 1e-6  # lossy: not the target's distribution (the test has power)
    assert close(stats.acceptance_rate, float(torch.minimum(q, p / l).sum()))


def test_lossy_acceptance_rises_as_lenience_falls(pair):
    target, draft = pair
    rates = [
        first_tokens(target, draft, LossySD(lenience))[1].acceptance_rate for lenience in (1.0, 0.6, 0.3, 0.1)
    ]
    assert rates == sorted(rates) and rates[-1] - rates[0] > 0.1
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        LossySD(0.0)


# ----------------------------------------------------------------------------- speculative cascades


def test_cascade_rules_against_their_definitions():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(64, 30, generator=g) * 5, -1)
    q = torch.softmax(torch.randn(64, 30, generator=g) * 5, -1)
    a = 0.2
    mq, mp, tv = q.max(-1).values, p.max(-1).values, total_variation(p, q)
    assert torch.equal(defer("chow", a, p, q), (mq < 1 - a).float())
    assert torch.equal(defer("diff", a, p, q), (mq < mp - a).float())
    assert torch.equal(defer("opt", a, p, q), (mq < mp - a * tv).float())
    for rule in ("chow", "diff", "opt"):
        d = defer(rule, a, p, q)
        assert 0 < d.mean() < 1  # the fixture exercises both outcomes
        # π = w·p + (1 − w)·q with w = 1[defer] is p where deferring, q elsewhere
        assert torch.equal(mix(p, q, d), torch.where(d.bool().unsqueeze(-1), p, q))
    with pytest.raises(ValueError, match="cascade rule"):
        Cascade("maybe", 0.1)


def test_a_cascade_that_always_defers_is_lossless_and_one_that_never_does_accepts_everything(pair):
    target, draft = pair
    always, never = Cascade("chow", -1.0), Cascade("chow", 1.0)  # max q < 2: always; max q < 0: never
    for do_sample in (False, True):  # with the target's bonus rule, the same random draws as lossless
        assert same_tokens(target, draft, always, Lossless(), do_sample=do_sample, bonus_token="target")
    ids, mask = ragged_prompts()
    out = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=never,
        num_draft_tokens=3,
        max_new_tokens=12,
        do_sample=True,
        generator=torch.Generator().manual_seed(0),
        eos_token_id=[],
    )
    assert out.stats.acceptance_rate == 1.0 and out.stats.mean_w == 0.0
    greedy = speculative_generate(
        target, draft, ids, mask, verifier=never, max_new_tokens=12, eos_token_id=[]
    )
    alone = draft.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=12, eos_token_id=None, pad_token_id=0
    )
    assert torch.equal(greedy.sequences, alone)  # never deferring, greedy: the draft's own text


def test_cascade_first_token_and_acceptance_follow_its_mixture(pair):
    target, draft = pair
    p, q, _ = first_position(target, draft, PROMPT)
    rule = Cascade("diff", 0.05)
    w = float(defer("diff", 0.05, p, q))
    first, stats = first_tokens(target, draft, rule)
    assert chi2_pvalue(first, mix(p, q, w)) > 1e-3
    assert close(stats.acceptance_rate, 1 - w * float(total_variation(p, q)))
    # a larger α defers less: acceptance does not fall (chow, over a batch of contexts)
    ids, mask = ragged_prompts(lengths=(5, 9, 3, 7, 6, 4, 8, 5))
    rates = []
    for alpha in (0.0, 0.3, 0.6, 0.9):
        out = speculative_generate(
            target,
            draft,
            ids.repeat(50, 1),
            mask.repeat(50, 1),
            verifier=Cascade("chow", alpha),
            num_draft_tokens=3,
            max_new_tokens=8,
            do_sample=True,
            eos_token_id=[],
            generator=torch.Generator().manual_seed(2),
        )
        rates.append(out.stats.acceptance_rate)
    assert rates == sorted(rates) and rates[-1] > rates[0]


# ----------------------------------------------------------------------------- typical acceptance


def test_typical_test_against_a_direct_computation():
    g = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(8, 4, 50, generator=g) * 3, -1)
    q = torch.softmax(torch.randn(8, 4, 50, generator=g), -1)
    x = torch.randint(0, 50, (8, 4), generator=g)
    rule = TypicalAcceptance(0.09, 0.3)
    direct = torch.empty(8, 4, dtype=torch.bool)
    for i in range(8):
        for j in range(4):
            pj = p[i, j].double()
            h = -float((pj * pj.log()).sum())
            direct[i, j] = float(pj[x[i, j]]) > min(0.09, 0.3 * math.exp(-h))
    assert torch.equal(rule.accept(p, q, x, None, None), direct)
    assert 0 < direct.float().mean() < 1
    assert torch.allclose(entropy(p[0, 0]), -(p[0, 0] * p[0, 0].log()).sum())
    kept = rule.rejection(p[:, 0], q[:, 0], None)  # p restricted to the tokens that pass the test
    passes = p[:, 0] >= typical_threshold(p[:, 0], 0.09, 0.3).unsqueeze(-1)
    assert torch.allclose(kept, torch.where(passes, p[:, 0], 0.0) / (p[:, 0] * passes).sum(-1, keepdim=True))


def test_typical_first_token_and_greedy(pair):
    target, draft = pair
    p, q, _ = first_position(target, draft, PROMPT)
    rule = TypicalAcceptance(0.05, 0.3)
    threshold = typical_threshold(p, 0.05, 0.3)
    accepted = (p > threshold).float()
    typical = torch.where(p >= threshold, p, 0.0)
    typical = typical / typical.sum()
    implied = q * accepted + (1 - float((q * accepted).sum())) * typical
    first, stats = first_tokens(target, draft, rule)
    assert chi2_pvalue(first, implied) > 1e-3
    assert close(stats.acceptance_rate, float((q * accepted).sum()))
    # greedy: Medusa at temperature 0 is lossless greedy
    assert same_tokens(target, draft, rule, Lossless())
    # a lower ε accepts more
    rates = [
        first_tokens(target, draft, TypicalAcceptance(e, 0.3))[1].acceptance_rate
        for e in (0.5, 0.1, 0.02, 0.001)
    ]
    assert rates == sorted(rates) and rates[-1] > rates[0]


@pytest.mark.parametrize(
    "no_drafts",
    [{"max_new_tokens": 1}, {"max_new_tokens": 2, "first_token": "target"}],
    ids=["budget", "target-first"],
)
def test_a_round_without_drafts_emits_from_the_rules_own_law(pair, no_drafts):
    """A round with no drafts (the budget leaves room for one token only, or the target's own first
    token) emits from the rule's bonus law, typical(p) = p restricted to the tokens that pass the
    test, as every other round of typical acceptance does; not from p."""
    target, draft = pair
    p, _, _ = first_position(target, draft, PROMPT)
    typical = torch.where(p >= typical_threshold(p, 0.05, 0.3), p, 0.0)
    typical = typical / typical.sum()
    rule = TypicalAcceptance(0.05, 0.3)
    out = speculative_generate(
        target,
        draft,
        PROMPT.expand(N_ROWS, -1),
        verifier=rule,
        num_draft_tokens=3,
        do_sample=True,
        generator=torch.Generator().manual_seed(1),
        eos_token_id=[],
        **no_drafts,
    )
    first = out.sequences[:, PROMPT.shape[1]]
    assert out.stats.num_draft_tokens[0] == 0  # the round that emitted it had no drafts
    assert chi2_pvalue(first, typical) > 1e-3
    assert chi2_pvalue(first, p) < 1e-6  # the test has power
