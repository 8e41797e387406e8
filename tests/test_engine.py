"""The engine: exact tokens against transformers, distributions in sampling mode, stats, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chi2
from tiny_models import EOS, PAD, VOCAB, ragged_prompts, tiny_pair

from diversed import DynamicEnsemble, Lossless, StaticEnsemble, WeightHead, speculative_generate
from diversed.decoding.verify import mix, sample, total_variation


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


@pytest.fixture(scope="module")
def prompts():
    return ragged_prompts()


def random_head(target, draft, seed=0, scale=0.05):
    """A head with non-trivial weights: w varies with the context (about 0.25 on the test prompt)."""
    torch.manual_seed(seed)
    head = WeightHead(draft.config.hidden_size, target.config.hidden_size)
    with torch.no_grad():
        head.net[-1].weight.normal_(0, scale)
    return head.eval()


def ar_greedy(model, ids, mask, max_new):
    return model.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new, pad_token_id=PAD, eos_token_id=EOS
    )


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("n", [1, 3, 6])
@pytest.mark.parametrize("bonus", ["ensemble", "target"])
def test_lossless_greedy_equals_target_generate(pair, prompts, n, bonus):
    target, draft = pair
    ids, mask = prompts
    ref = ar_greedy(target, ids, mask, 24)
    out = speculative_generate(
        target, draft, ids, mask, num_draft_tokens=n, max_new_tokens=24, bonus_token=bonus
    )
    assert out.sequences.shape == ref.shape
    assert torch.equal(out.sequences, ref)


def test_lossless_greedy_exact_with_adaptive_drafting(pair, prompts):
    target, draft = pair
    ids, mask = prompts
    ref = ar_greedy(target, ids, mask, 30)
    for kwargs in ({"num_draft_tokens_schedule": "heuristic"}, {"draft_confidence_threshold": 0.3}):
        out = speculative_generate(target, draft, ids, mask, num_draft_tokens=3, max_new_tokens=30, **kwargs)
        assert torch.equal(out.sequences, ref), kwargs
    heuristic = speculative_generate(
        target, draft, ids, mask, num_draft_tokens=3, max_new_tokens=30, num_draft_tokens_schedule="heuristic"
    ).stats.num_draft_tokens
    assert len(set(heuristic)) > 1  # the schedule moved


def test_drafting_stops_once_every_row_has_drafted_eos(pair):
    """On CPU a round's drafting ends once every row has drafted EOS (the drafts after it would be
    cut anyway); outputs stay exact, and a batch where some row has not drafted EOS drafts on."""
    target, draft = pair
    ids, mask = ragged_prompts(lengths=(6,), seed=4)
    drafts = draft.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=6, eos_token_id=None, pad_token_id=PAD
    )[0, 6:].tolist()
    eos = drafts[2]  # round 1 drafts x_1, x_2 and then this token (if it is not among them already)
    j = drafts.index(eos)
    for rows in ((ids, mask), (ids.repeat(2, 1), mask.repeat(2, 1))):
        ref = target.generate(
            *rows[:1],
            attention_mask=rows[1],
            do_sample=False,
            max_new_tokens=24,
            pad_token_id=PAD,
            eos_token_id=eos,
        )
        out = speculative_generate(
            target, draft, *rows, num_draft_tokens=5, max_new_tokens=24, eos_token_id=eos
        )
        assert torch.equal(out.sequences, ref)
        assert out.stats.num_draft_tokens[0] == j + 1
    # another row that does not draft EOS keeps the batch drafting; the first row's drafts after its
    # EOS are not counted as proposals, so its statistics are those it has alone
    other = ragged_prompts(lengths=(6, 6), seed=4)[0]
    other[1] = torch.randint(3, VOCAB, (6,), generator=torch.Generator().manual_seed(9))
    kwargs = {
        "verifier": StaticEnsemble(0.0),
        "num_draft_tokens": 5,
        "max_new_tokens": 24,
        "eos_token_id": eos,
    }
    out = speculative_generate(
        target, draft, other, **kwargs
    )  # w = 0 accepts every draft: row 0 ends at its EOS
    alone = speculative_generate(target, draft, ids, mask, **kwargs)
    assert out.stats.num_draft_tokens[0] == 5 and alone.stats.num_draft_tokens == [j + 1]
    assert out.sequences[0, 6:].tolist() == drafts[: j + 1] + [PAD] * (out.sequences.shape[1] - 7 - j)
    for f in ("proposed", "accepted", "rounds", "new_tokens", "accepted_hist"):
        assert getattr(out.stats, f)[0].tolist() == getattr(alone.stats, f)[0].tolist(), f
    # with per-row proposal lengths (a confidence threshold that never fires) the same break gives
    # the same outputs: rows that stopped at EOS count their proposals up to it
    for v in (StaticEnsemble(0.4), Lossless()):
        plain = speculative_generate(
            target, draft, ids, mask, verifier=v, num_draft_tokens=5, max_new_tokens=24, eos_token_id=eos
        )
        thresh = speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=v,
            num_draft_tokens=5,
            max_new_tokens=24,
            eos_token_id=eos,
            draft_confidence_threshold=0.0,
        )
        assert torch.equal(plain.sequences, thresh.sequences)
        assert torch.equal(plain.stats.proposed, thresh.stats.proposed)
        assert thresh.stats.num_draft_tokens[0] == j + 1


@pytest.mark.parametrize("w", [0.3, 0.7])
@pytest.mark.parametrize("n", [2, 5])
def test_static_greedy_equals_transformers_assisted_ensemble(pair, w, n):
    target, draft = pair
    draft.generation_config.num_assistant_tokens = n
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    for seed in range(3):
        ids, _ = ragged_prompts(lengths=(4 + 3 * seed,), seed=seed)
        ref = target.generate(
            ids,
            assistant_model=draft,
            assistant_ensemble_weight=w,
            do_sample=False,
            max_new_tokens=25,
            pad_token_id=PAD,
            eos_token_id=EOS,
        )
        out = speculative_generate(
            target,
            draft,
            ids,
            verifier=StaticEnsemble(w),
            num_draft_tokens=n,
            max_new_tokens=25,
            bonus_token="target",
        )
        assert torch.equal(out.sequences, ref), (seed, out.sequences, ref)


@pytest.mark.parametrize("verifier", ["lossless", "static", "dynamic"])
def test_batch_equals_rows_one_by_one(pair, prompts, verifier):
    target, draft = pair
    ids, mask = prompts
    v = {
        "lossless": Lossless(),
        "static": StaticEnsemble(0.4),
        "dynamic": DynamicEnsemble(random_head(target, draft)),
    }[verifier]
    batch = speculative_generate(target, draft, ids, mask, verifier=v, num_draft_tokens=4, max_new_tokens=20)
    for i in range(ids.shape[0]):
        keep = mask[i].bool()
        one = speculative_generate(
            target, draft, ids[i : i + 1, keep], verifier=v, num_draft_tokens=4, max_new_tokens=20
        )
        new = one.sequences[0, keep.sum() :]
        row = batch.sequences[i, ids.shape[1] :][: new.numel()]
        assert torch.equal(row, new), i
        assert int(batch.stats.new_tokens[i]) == new.numel()
        assert (batch.sequences[i, ids.shape[1] + new.numel() :] == PAD).all()


def test_static_w1_is_lossless_and_w0_accepts_everything(pair, prompts):
    target, draft = pair
    ids, mask = prompts
    a = speculative_generate(target, draft, ids, mask, verifier=StaticEnsemble(1.0), max_new_tokens=16)
    b = speculative_generate(target, draft, ids, mask, max_new_tokens=16)
    assert torch.equal(a.sequences, b.sequences)
    g = torch.Generator().manual_seed(0)
    c = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=StaticEnsemble(0.0),
        do_sample=True,
        max_new_tokens=16,
        generator=g,
        eos_token_id=[],
    )
    assert c.stats.acceptance_rate == 1.0
    # w = 0 samples from the draft alone: greedy gives the draft's own greedy text
    d = speculative_generate(target, draft, ids, mask, verifier=StaticEnsemble(0.0), max_new_tokens=16)
    assert torch.equal(d.sequences, ar_greedy(draft, ids, mask, 16))


def test_identical_models_accept_everything_without_nan(pair, prompts):
    target, _ = pair
    ids, mask = prompts
    for v in (Lossless(), StaticEnsemble(0.5)):
        out = speculative_generate(
            target,
            target,
            ids,
            mask,
            verifier=v,
            do_sample=True,
            max_new_tokens=12,
            generator=torch.Generator().manual_seed(0),
            eos_token_id=[],
        )
        assert out.stats.acceptance_rate == 1.0
        assert (out.sequences >= 0).all() and (out.sequences < VOCAB).all()


def test_bf16_models_run_and_accept_in_float32(prompts):
    target, draft = (m.to(torch.bfloat16) for m in tiny_pair(seed=3))
    ids, mask = prompts
    out = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=StaticEnsemble(0.6),
        do_sample=True,
        max_new_tokens=12,
        generator=torch.Generator().manual_seed(0),
    )
    assert 0.0 < out.stats.acceptance_rate <= 1.0
    assert (out.sequences < VOCAB).all()


# ----------------------------------------------------------------------------- distributions


def first_position(target, draft, prompt, head=None):
    """p, q (T = 1) and the dynamic w at the first generated position, by a direct forward; in float32
    whatever the models' dtype (scripts/gpu_checks.py runs it on bf16 models, with a float32 head)."""
    with torch.no_grad():
        t = target(prompt, output_hidden_states=True)
        d = draft(prompt, output_hidden_states=True)
        p, q = t.logits[0, -1].float().softmax(-1), d.logits[0, -1].float().softmax(-1)
        states = d.hidden_states[-1][:, -1:].float(), t.hidden_states[-1][:, -1:].float()
        w = None if head is None else float(head(*states))
    return p, q, w


def chi2_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    expected = probs.double() * samples.numel()
    big = expected >= 5  # pool the rare categories into one bin
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    stat = ((obs - exp) ** 2 / exp.clamp_min(1e-12)).sum().item()
    return float(chi2.sf(stat, obs.numel() - 1))


def test_sample_inverts_the_running_mass_and_never_draws_an_empty_id():
    """`sample` by inversion: u in [0, 1) picks the id whose interval [F(x − 1), F(x)) of the running
    mass holds u·F(V); ids with p = 0 (the first, the last, between) are skipped at every edge, and an
    unnormalised row is read as its normalisation."""
    p = torch.tensor([0.0, 0.25, 0.0, 0.5, 0.25, 0.0])  # F = 0, .25, .25, .75, 1, 1
    u = torch.tensor([0.0, 0.2499, 0.25, 0.7499, 0.75, 1.0 - 2.0**-53], dtype=torch.float64)
    assert sample(p.expand(6, 6), noise=u).tolist() == [1, 1, 3, 3, 4, 4]
    assert sample(3.0 * p.expand(6, 6), noise=u).tolist() == [1, 1, 3, 3, 4, 4]
    # a u of 1 (out of range, or rounded there in float32) still lands on an id with mass
    assert sample(p.expand(2, 6), noise=torch.tensor([1.0, 1.0])).tolist() == [4, 4]
    # [b, n, V] in, [b, n] out, one uniform per row; a u per row or nothing
    assert sample(p.expand(2, 3, 6), noise=u.view(2, 3)).tolist() == [[1, 1, 3], [3, 4, 4]]
    with pytest.raises(ValueError, match="one u per row"):
        sample(p.expand(2, 6), noise=torch.tensor([0.5]))


def test_sample_keeps_the_mass_of_ids_far_down_a_large_vocabulary():
    """Running sums in float64: 151,935 ids of mass 2^-30 after one of almost all the mass. In float32
    every sum past the first rounds back to it (2^-30 is under its step at 1), so the draw would land
    far from the id whose interval holds u·F(V); in float64 the sums are exact and it lands there."""
    V, tiny = 151_936, 2.0**-30
    p = torch.full((V,), tiny)
    p[0] = 1.0 - (V - 1) * tiny
    head, k = float(p[0]), V // 2
    u = (head + (k + 0.5) * tiny) / (head + (V - 1) * tiny)  # halfway into id k + 1's interval
    assert sample(p[None], noise=torch.tensor([u], dtype=torch.float64)).tolist() == [k + 1]


def test_sample_draws_the_law_over_a_large_vocabulary():
    """χ² over 4,096 draws from a peaked law on 151,936 ids whose mass sits at both ends of the
    vocabulary, zeros never drawn."""
    V = 151_936
    p = torch.zeros(V)
    p[[0, 7, V // 2, V - 3, V - 1]] = torch.tensor([0.3, 0.05, 0.15, 0.1, 0.4])
    p[1000:1100] = 1e-5  # a tail of small ids
    p = p / p.sum()
    g = torch.Generator().manual_seed(0)
    x = torch.cat([sample(p.expand(256, V), g) for _ in range(16)])  # 0.3 GB of running sums each
    assert bool((p[x] > 0).all())
    assert chi2_pvalue(x, p) > 1e-3
    # a generator's seed fixes the draws; another seed gives others
    again = sample(p.expand(64, V), torch.Generator().manual_seed(5))
    assert torch.equal(again, sample(p.expand(64, V), torch.Generator().manual_seed(5)))
    assert not torch.equal(again, sample(p.expand(64, V), torch.Generator().manual_seed(6)))


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_first_token_is_distributed_as_v(pair, kind):
    target, draft = pair
    prompt = torch.tensor([[5, 17, 33, 8, 61, 12]])
    head = random_head(target, draft) if kind == "dynamic" else None
    p, q, w = first_position(target, draft, prompt, head)
    w = 0.6 if kind == "static" else w
    verifier = StaticEnsemble(w) if kind == "static" else DynamicEnsemble(head)
    v = mix(p, q, w)
    n = 6000
    out = speculative_generate(
        target,
        draft,
        prompt.expand(n, -1),
        verifier=verifier,
        num_draft_tokens=3,
        max_new_tokens=2,
        do_sample=True,
        generator=torch.Generator().manual_seed(1),
        eos_token_id=[],
    )
    first = out.sequences[:, prompt.shape[1]]
    assert chi2_pvalue(first, v) > 1e-3
    assert chi2_pvalue(first, p) < 1e-6 and chi2_pvalue(first, q) < 1e-6  # the test has power
    # acceptance of x_1 ~ q is Bernoulli(1 − w·TV(p, q)); n = min(3, 2 − 1) = 1 draft per row
    expected = 1 - w * float(total_variation(p, q))
    rate = out.stats.acceptance_rate
    assert abs(rate - expected) < 4 * math.sqrt(expected * (1 - expected) / n), (rate, expected)
    if kind == "dynamic":
        assert 0 < out.stats.mean_w < 1


def second_given_first(target, draft, prompt, verifier, n, seed, **options):
    """n rows of `prompt` decoded to two new tokens, one draft per round; the second token of the rows
    whose first is the most common one, and p, q at that context (the law the second must follow)."""
    out = speculative_generate(
        target,
        draft,
        prompt.expand(n, -1),
        verifier=verifier,
        num_draft_tokens=1,
        max_new_tokens=2,
        do_sample=True,
        generator=torch.Generator().manual_seed(seed),
        eos_token_id=[],
        **options,
    )
    anchor = int(torch.mode(out.sequences[:, -2]).values)  # condition on the most common first token
    rows = out.sequences[:, -2] == anchor
    p, q, _ = first_position(target, draft, torch.cat([prompt, torch.tensor([[anchor]])], 1))
    return out.sequences[rows, -1], p, q


def test_ensemble_bonus_is_distributed_as_v(pair):
    """With w = 0 every draft is accepted, so the token after N drafts is always the bonus: it must be
    distributed as v = q (ensemble bonus), not p (what the 'target' bonus would give)."""
    target, draft = pair
    second, p, q = second_given_first(
        target, draft, torch.tensor([[9, 40, 22]]), StaticEnsemble(0.0), 4000, 2
    )
    assert len(second) > 300
    assert chi2_pvalue(second, q) > 1e-3
    assert chi2_pvalue(second, p) < 1e-6


def test_static_bonus_tosses_its_coin_first_keeps_v_and_calls_the_draft_only_for_q(pair, monkeypatch):
    """v = w·p + (1 − w)·q: the static ensemble's bonus is x ~ p with probability w, else x ~ q, so
    the draft's extra call over x_n is made only in a share 1 − w of fully accepted rounds (batch 1),
    and the token after the first is still v-distributed, whatever path drew it."""
    import diversed.decoding.engine as engine

    target, draft = pair
    calls = []
    bonus = engine._draft_bonus
    monkeypatch.setattr(engine, "_draft_bonus", lambda *a, **k: calls.append(1) or bonus(*a, **k))
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, VOCAB, (1, 6), generator=g) for _ in range(40)]
    share = {}
    for w in (1.0, 0.7, 0.3):
        calls.clear()
        full = 0
        for prompt in prompts:
            out = speculative_generate(
                target,
                draft,
                prompt,
                verifier=StaticEnsemble(w),
                num_draft_tokens=3,
                max_new_tokens=31,
                do_sample=True,
                generator=g,
                eos_token_id=[],
            )
            full += int(out.stats.accepted_hist[0, 3])  # rounds that took all 3 drafts
        share[w] = (len(calls), full)
    assert share[1.0][0] == 0  # w = 1: every bonus from p, no extra draft call
    for w in (0.7, 0.3):  # about 1 − w of the full rounds (a few shorter full rounds at the budget's end)
        n_calls, full = share[w]
        sd = math.sqrt(full * w * (1 - w))
        assert abs(n_calls - (1 - w) * full) < 4 * sd + 0.1 * full, (w, n_calls, full)

    # the law: the second token given the first, one draft per round, is v at 0 < w < 1 (bonus after
    # an accepted draft: the coin's p or q; after a rejection: the next round's verification); with a
    # confidence threshold of 0 no row stops early, but rows carry their own draft lengths
    prompt = torch.tensor([[9, 40, 22]])
    for threshold in (None, 0.0):
        calls.clear()
        second, p, q = second_given_first(
            target, draft, prompt, StaticEnsemble(0.5), 6000, 4, draft_confidence_threshold=threshold
        )
        assert len(second) > 300 and len(calls) > 0, threshold
        assert chi2_pvalue(second, mix(p, q, 0.5)) > 1e-3, threshold
        assert chi2_pvalue(second, p) < 1e-6 and chi2_pvalue(second, q) < 1e-6


# ----------------------------------------------------------------------------- stats


@pytest.mark.parametrize("do_sample", [False, True])
def test_stats_add_up(pair, prompts, do_sample):
    target, draft = pair
    ids, mask = prompts
    out = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=StaticEnsemble(0.5),
        num_draft_tokens=4,
        max_new_tokens=23,
        do_sample=do_sample,
        generator=torch.Generator().manual_seed(0),
    )
    s = out.stats
    P = ids.shape[1]
    for i in range(ids.shape[0]):
        gen = out.sequences[i, P:]
        n_out = int(s.new_tokens[i])
        assert n_out <= 23
        assert (gen[n_out:] == PAD).all()
        stopped_at_eos = n_out > 0 and int(gen[n_out - 1]) == EOS
        assert stopped_at_eos or n_out == 23
        assert EOS not in gen[: n_out - 1].tolist()
        produced = int(s.accepted[i]) + int(s.rounds[i])  # accepted drafts + one token per round
        assert n_out <= produced and produced - n_out <= 4  # only the last round is cut
        assert int(s.accepted_hist[i].sum()) == int(s.rounds[i])
        assert int((s.accepted_hist[i] * torch.arange(s.accepted_hist.shape[1])).sum()) == int(s.accepted[i])
        assert int(s.accepted[i]) <= int(s.proposed[i]) <= 4 * int(s.rounds[i])
    assert s.target_calls == len(s.num_draft_tokens) and s.target_calls >= int(s.rounds.max())
    assert s.tokens_per_target_call == pytest.approx(float(s.new_tokens.sum() / s.rounds.sum()))
    assert 0 <= s.acceptance_rate <= 1 and s.wall_time_s > 0
    summary = s.summary()
    assert summary["new_tokens"] == int(s.new_tokens.sum()) and len(summary["accepted_length_histogram"]) == 5


def test_no_eos_means_exact_budget(pair, prompts):
    target, draft = pair
    ids, mask = prompts
    out = speculative_generate(
        target, draft, ids, mask, num_draft_tokens=5, max_new_tokens=17, eos_token_id=[]
    )
    s = out.stats
    assert (s.new_tokens == 17).all()
    assert out.sequences.shape[1] == ids.shape[1] + 17
    # without cut-offs the identity is exact except for the last, budget-capped round
    assert ((s.accepted + s.rounds) >= 17).all()


# ----------------------------------------------------------------------------- stop callback


def first_bigram(a: int, b: int):
    """A `stop` callback: rows end right after the first `a, b` in their new tokens."""

    def stop(tokens: list[int], new: int) -> int | None:
        return next((i + 2 for i in range(len(tokens) - 1) if tokens[i : i + 2] == [a, b]), None)

    return stop


@pytest.mark.parametrize("verifier", [Lossless(), StaticEnsemble(0.4)], ids=["lossless", "static"])
def test_stop_cuts_greedy_rows_exactly_where_the_callback_says(pair, prompts, verifier):
    target, draft = pair
    ids, mask = prompts
    P, kwargs = ids.shape[1], {"verifier": verifier, "num_draft_tokens": 6, "max_new_tokens": 30}
    full = speculative_generate(target, draft, ids, mask, **kwargs)
    texts = [full.sequences[r, P : P + int(n)].tolist() for r, n in enumerate(full.stats.new_tokens)]
    stop = first_bigram(*texts[0][3:5])
    cuts = [stop(t, len(t)) or len(t) for t in texts]
    assert sum(c < len(t) for c, t in zip(cuts, texts, strict=True)) >= 1

    out = speculative_generate(target, draft, ids, mask, stop=stop, **kwargs)
    for r, (text, cut) in enumerate(zip(texts, cuts, strict=True)):
        assert int(out.stats.new_tokens[r]) == cut
        assert out.sequences[r, P : P + cut].tolist() == text[:cut]  # the same tokens up to the stop
        assert (out.sequences[r, P + cut :] == PAD).all()  # and nothing after it
    assert int(out.stats.rounds.sum()) < int(full.stats.rounds.sum())
    assert out.stats.target_calls <= full.stats.target_calls


def test_stop_in_sampled_rows_with_the_ensemble_bonus(pair, prompts):
    target, draft = pair
    ids, mask = prompts
    P = ids.shape[1]
    kwargs = {
        "verifier": DynamicEnsemble(random_head(target, draft)),
        "num_draft_tokens": 4,
        "max_new_tokens": 40,
        "do_sample": True,
        "eos_token_id": [],
    }
    g = torch.Generator().manual_seed(3)
    free = speculative_generate(target, draft, ids, mask, generator=g, **kwargs).sequences[:, P:]
    ends = set(free.mode(1).values.tolist())  # each row's commonest token: rows meet one early

    def stop(tokens: list[int], new: int) -> int | None:
        assert 1 <= new <= 5 and len(tokens) >= new  # the round's tokens: at most N + 1
        return next((i + 1 for i, t in enumerate(tokens) if t in ends), None)

    out = speculative_generate(target, draft, ids, mask, generator=g, stop=stop, **kwargs)
    s = out.stats
    for r in range(ids.shape[0]):
        n = int(s.new_tokens[r])
        text = out.sequences[r, P : P + n].tolist()
        assert not ends & set(text[:-1])  # nothing is kept past the first stop
        assert text[-1] in ends or n == 40
        assert (out.sequences[r, P + n :] == PAD).all()
        assert int(s.w_count[r]) == n  # w statistics count only the kept tokens
    assert (s.new_tokens < 40).sum() >= 3


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy-static", "sampled-dynamic"])
def test_stop_triggers_ask_only_rows_that_kept_one_and_change_nothing(pair, prompts, sampled):
    target, draft = pair
    ids, mask = prompts
    P = ids.shape[1]
    verifier = DynamicEnsemble(random_head(target, draft)) if sampled else StaticEnsemble(0.4)
    kwargs = {"verifier": verifier, "num_draft_tokens": 4, "max_new_tokens": 30, "do_sample": sampled}

    def run(stop=None):
        g = torch.Generator().manual_seed(5)
        return speculative_generate(target, draft, ids, mask, generator=g, stop=stop, **kwargs)

    full = run()
    texts = [full.sequences[r, P : P + int(n)].tolist() for r, n in enumerate(full.stats.new_tokens)]
    a, b = texts[0][3:5]
    assert b < VOCAB - 2
    bigram, asked = first_bigram(a, b), {"every row": [], "triggers": []}

    def spy(key):
        def stop(tokens, new):
            asked[key].append(tokens[-new:])
            return bigram(tokens, new)

        return stop

    plain, flagged = spy("every row"), spy("triggers")
    # only b can complete the bigram; the mask is two ids short of the vocabulary: those count as triggers
    flagged.triggers = torch.arange(VOCAB - 2) == b
    out_plain, out = run(plain), run(flagged)
    assert torch.equal(out.sequences, out_plain.sequences)
    for f in ("new_tokens", "accepted", "proposed", "rounds", "w_sum", "w_count"):
        assert torch.equal(getattr(out.stats, f), getattr(out_plain.stats, f)), f
    assert (out.stats.new_tokens < full.stats.new_tokens).any()  # some row did stop
    assert all(b in new or max(new) >= VOCAB - 2 for new in asked["triggers"])
    assert 0 < len(asked["triggers"]) < len(asked["every row"]) / 2
    # a mask with no trigger is never asked, and no row stops
    never = spy("never")
    never.triggers, asked["never"] = torch.zeros(VOCAB, dtype=torch.bool), []
    out = run(never)
    assert asked["never"] == [] and torch.equal(out.sequences, full.sequences)


# ----------------------------------------------------------------------------- vocabularies and bad input


def test_padded_vocabulary_is_compared_on_the_shared_part(prompts):
    target, draft = tiny_pair(draft_vocab=VOCAB + 32)  # 96 -> 128: padded to a multiple of 64
    ids, mask = prompts
    out = speculative_generate(target, draft, ids, mask, max_new_tokens=10)
    assert torch.equal(out.sequences, ar_greedy(target, ids, mask, 10))


def test_different_vocabularies_are_refused(prompts):
    target, draft = tiny_pair(draft_vocab=40)
    with pytest.raises(ValueError, match=r"96.*40"):
        speculative_generate(target, draft, *prompts, max_new_tokens=4)


class Exploding(torch.nn.Module):
    """Stands in for a model: any forward call fails the test."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config, self.generation_config = model, model.config, model.generation_config

    def forward(self, *a, **k):
        raise AssertionError("a model was called before input validation")

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_draft_tokens": 0}, "num_draft_tokens"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"bonus_token": "draft"}, "bonus_token"),
        ({"num_draft_tokens_schedule": "fast"}, "schedule"),
        ({"verifier": "static"}, "verifier"),
        ({"stop": "\n"}, "stop must be a callable"),
    ],
)
def test_bad_input_raises_before_any_model_call(pair, prompts, kwargs, message):
    target, draft = (Exploding(m) for m in pair)
    with pytest.raises(ValueError, match=message):
        speculative_generate(target, draft, *prompts, **kwargs)


def test_bad_weight_head_and_padding_raise(pair, prompts):
    target, draft = pair
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        StaticEnsemble(1.5)
    wrong = WeightHead(draft.config.hidden_size + 1, target.config.hidden_size)
    with pytest.raises(ValueError, match="hidden sizes"):
        speculative_generate(Exploding(target), Exploding(draft), *prompts, verifier=DynamicEnsemble(wrong))
    ids, mask = prompts
    with pytest.raises(ValueError, match="left-padded"):
        speculative_generate(Exploding(target), Exploding(draft), ids, mask.flip(1))


def test_an_empty_prompt_is_refused_by_both_loops_naming_the_row(pair, prompts):
    """A prompt without a token has nothing to decode from: a clear error, before any model call,
    from the engine and from the autoregressive loop alike."""
    from diversed.decoding.autoregressive import autoregressive_generate
    from diversed.decoding.inputs import left_pad

    target, draft = (Exploding(m) for m in pair)
    none = torch.zeros((2, 0), dtype=torch.long)
    ragged = left_pad([[5, 6, 7], [], [8]], PAD, "cpu")  # the second row is empty: all padding
    for ids, mask, message in ((none, None, "no token"), (*ragged, r"rows \[1\] of input_ids are empty")):
        with pytest.raises(ValueError, match=message):
            speculative_generate(target, draft, ids, mask)
        with pytest.raises(ValueError, match=message):
            autoregressive_generate(target, ids, mask)


@pytest.mark.parametrize("first_token", ["ensemble", "target"])
def test_most_drafts_is_what_the_first_round_proposes_whatever_n_asks(pair, prompts, first_token):
    """w = 0 accepts every draft, so the first round drafts as many as the budget lets it: an N above
    `most_drafts` runs as `most_drafts` (what the sweep refuses to record as N)."""
    from diversed.decoding.engine import most_drafts

    target, draft = pair
    ids, mask = prompts
    for n in (100, most_drafts(6, first_token)):
        out = speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=StaticEnsemble(0.0),
            num_draft_tokens=n,
            max_new_tokens=6,
            eos_token_id=[],
            first_token=first_token,
        )
        assert (out.stats.proposed == most_drafts(6, first_token)).all()
        assert (out.stats.new_tokens == 6).all()


def test_models_on_different_devices_raise(pair, prompts):
    target, draft = pair

    class Elsewhere(Exploding):
        def parameters(self, recurse=True):
            yield torch.empty(0, device="meta")

    with pytest.raises(ValueError, match="same device"):
        speculative_generate(Exploding(target), Elsewhere(draft), *prompts)


@pytest.mark.parametrize("verifier", ["static", "dynamic"])
def test_adaptive_drafting_with_ensemble_verifiers(pair, prompts, verifier):
    """With the ensemble bonus every greedy token is argmax v of its prefix, so how the draft
    proposes (threshold, schedule) cannot change the text; in sampling mode rounds get shorter."""
    target, draft = pair
    ids, mask = prompts
    v = StaticEnsemble(0.4) if verifier == "static" else DynamicEnsemble(random_head(target, draft))
    ref = speculative_generate(target, draft, ids, mask, verifier=v, num_draft_tokens=4, max_new_tokens=20)
    for kwargs in ({"draft_confidence_threshold": 0.3}, {"num_draft_tokens_schedule": "heuristic"}):
        out = speculative_generate(
            target, draft, ids, mask, verifier=v, num_draft_tokens=4, max_new_tokens=20, **kwargs
        )
        assert torch.equal(out.sequences, ref.sequences), kwargs
    s = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=v,
        num_draft_tokens=4,
        max_new_tokens=20,
        do_sample=True,
        draft_confidence_threshold=0.5,
        generator=torch.Generator().manual_seed(0),
    ).stats
    assert int(s.proposed.sum()) < 4 * int(s.rounds.sum())  # some rows stopped proposing early
    assert (s.accepted <= s.proposed).all() and 0 < s.acceptance_rate <= 1


def test_mlp_head_with_free_features_runs_and_round_trips(pair, prompts, tmp_path):
    target, draft = pair
    ids, mask = prompts
    head = WeightHead(
        draft.config.hidden_size,
        target.config.hidden_size,
        hidden_sizes=(16,),
        features=("entropy_p", "entropy_q", "tv"),
    ).eval()
    assert head.uses_distributions
    with torch.no_grad():
        head.net[-1].weight.normal_(0, 0.5)
    out = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=DynamicEnsemble(head),
        max_new_tokens=12,
        do_sample=True,
        generator=torch.Generator().manual_seed(0),
    )
    assert 0 < out.stats.mean_w < 1
    loaded = WeightHead.from_pretrained(head.save_pretrained(tmp_path / "mlp", task="toy"))
    assert loaded.features == head.features and loaded.hidden_sizes == (16,)
    again = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=DynamicEnsemble(loaded),
        max_new_tokens=12,
        do_sample=True,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(out.sequences, again.sequences)


# ----------------------------------------------------------------------------- the verifier interface


def test_a_verifier_with_only_the_defaults_is_standard_speculative_decoding(pair, prompts):
    """`Verifier`'s defaults are lossless speculative decoding: the same tokens as `Lossless`."""
    from diversed import Verifier

    class Plain(Verifier):
        kind = "plain"

    target, draft = pair
    ids, mask = prompts
    for do_sample in (False, True):
        kwargs = {"num_draft_tokens": 4, "max_new_tokens": 20, "do_sample": do_sample}
        a = speculative_generate(
            target, draft, ids, mask, verifier=Plain(), generator=torch.Generator().manual_seed(4), **kwargs
        )
        b = speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=Lossless(),
            generator=torch.Generator().manual_seed(4),
            **kwargs,
        )
        assert torch.equal(a.sequences, b.sequences), do_sample
        assert torch.equal(a.stats.accepted, b.stats.accepted) and a.stats.verifier == "plain"


def test_a_new_rule_runs_through_the_engine_unchanged(pair, prompts):
    """A rule that overrides only its accept test: accept every draft. Every round then emits its
    N drafts and a bonus from p, in both modes, and the statistics say so."""
    from diversed import Verifier

    class AcceptAll(Verifier):
        def accept(self, p, q, x, w, generator):
            return torch.ones_like(x, dtype=torch.bool)

        def greedy_accept(self, p, q, x, w):
            return torch.ones_like(x, dtype=torch.bool)

    target, draft = pair
    ids, mask = prompts
    for do_sample in (False, True):
        out = speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=AcceptAll(),
            num_draft_tokens=3,
            max_new_tokens=16,
            do_sample=do_sample,
            eos_token_id=[],
            generator=torch.Generator().manual_seed(0),
        )
        s = out.stats
        assert s.acceptance_rate == 1.0 and (s.new_tokens == 16).all()
        assert (s.rounds == 4).all() and s.tokens_per_target_call == 4.0  # 4 rounds of 3 drafts + 1 bonus
    # greedy: the drafts are the draft's argmax, the bonus the target's argmax after them
    ref = speculative_generate(
        target,
        draft,
        ids[:1],
        mask[:1],
        verifier=AcceptAll(),
        num_draft_tokens=3,
        max_new_tokens=4,
        eos_token_id=[],
    )
    new = ref.sequences[0, ids.shape[1] :].tolist()
    assert new[:3] == ar_greedy(draft, ids[:1], mask[:1], 3)[0, ids.shape[1] :].tolist()
    with torch.no_grad():
        seq = ref.sequences[:, :-1]
        after = target(
            seq, attention_mask=torch.cat([mask[:1], torch.ones(1, 3, dtype=torch.long)], 1)
        ).logits[0, -1]
    assert new[3] == int(after.argmax())


def count_syncs(monkeypatch):
    """Calls of the engine's one host-sync function, and every other host read of a tensor."""
    import diversed.decoding.engine as engine

    counts = {"sync": 0, "other": 0}
    real = engine._sync

    def sync(*a, **k):
        counts["sync"] += 1
        saved, counts["other"] = counts["other"], 0
        try:
            return real(*a, **k)
        finally:
            counts["other"] = saved

    monkeypatch.setattr(engine, "_sync", sync)
    for name in ("cpu", "tolist", "item", "__bool__", "__int__"):
        fn = getattr(torch.Tensor, name)

        def counted(self, *a, _fn=fn, **k):
            counts["other"] += 1
            return _fn(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


@pytest.mark.parametrize("verifier", ["lossless", "static", "dynamic"])
def test_one_host_sync_per_round_and_a_second_only_for_an_ensemble_bonus(
    pair, prompts, verifier, monkeypatch
):
    """Without EOS (as on a GPU: drafting never asks the host) the host reads tensors once per
    round, twice in rounds where an ensemble bonus is drawn, and a fixed few times at the end."""
    target, draft = pair
    ids, mask = prompts
    v = {
        "lossless": Lossless(),
        "static": StaticEnsemble(0.0),
        "dynamic": DynamicEnsemble(random_head(target, draft)),
    }
    counts = count_syncs(monkeypatch)
    out = speculative_generate(
        target,
        draft,
        ids,
        mask,
        verifier=v[verifier],
        num_draft_tokens=3,
        max_new_tokens=17,
        do_sample=True,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(1),
    )
    monkeypatch.undo()
    rounds = len(out.stats.num_draft_tokens)
    bonus_rounds = counts["sync"] - rounds
    if verifier == "lossless":
        assert bonus_rounds == 0
    else:  # w = 0 accepts everything: every round but the budget-capped last has a bonus
        assert 0 < bonus_rounds <= rounds
        if verifier == "static":
            assert bonus_rounds >= rounds - 1
    # before the loop the prompts' padding is checked (2 reads); after it the statistics come to the
    # host (2 tensors) with the longest row's length (1): nothing per round or per draft step
    assert counts["other"] == 5, counts


# ----------------------------------------------------------------------------- non-finite logits


@pytest.mark.parametrize("broken", ["draft", "target"])
@pytest.mark.parametrize("do_sample", [False, True])
@pytest.mark.parametrize("value", [float("-inf"), float("nan")])
def test_logits_that_are_not_finite_are_warned_about(pair, prompts, broken, do_sample, value):
    """A model whose logits have no finite maximum (all −inf, NaN) has no distribution: decoding
    runs (acceptance 0 or 1, TV NaN) but says which model, once per call; a sound pair says nothing."""
    import warnings

    from diversed.decoding.autoregressive import autoregressive_generate

    target, draft = pair
    ids, mask = prompts
    kw = dict(max_new_tokens=6, do_sample=do_sample, temperature=1.0, eos_token_id=EOS, pad_token_id=PAD)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a sound pair: no warning at all
        speculative_generate(target, draft, ids, mask, verifier=StaticEnsemble(0.5), num_draft_tokens=3, **kw)
    model = draft if broken == "draft" else target

    def poison(module, args, out):
        out.logits = torch.full_like(out.logits, value)
        return out

    handle = model.register_forward_hook(poison)
    try:
        with pytest.warns(RuntimeWarning, match=rf"^{broken} gave logits that are not finite") as caught:
            speculative_generate(
                target, draft, ids, mask, verifier=StaticEnsemble(0.5), num_draft_tokens=3, **kw
            )
        assert len([w for w in caught if "not finite" in str(w.message)]) == 1
        assert caught[0].filename == __file__  # points at the caller, not inside the package
        if broken == "target":  # the target alone too
            with pytest.warns(RuntimeWarning, match=r"^target gave logits that are not finite"):
                autoregressive_generate(target, ids, mask, **kw)
    finally:
        handle.remove()
