"""Statistics: one summary whether counted in one batch or summed over many, and across processes."""

from __future__ import annotations

import pytest
import torch
from tiny_models import ragged_prompts, tiny_pair

from diversed import StaticEnsemble, Totals, speculative_generate
from diversed.decoding.stats import theoretical_speedup, tokens_per_call_bound


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def test_totals_over_rows_equal_the_batch(pair):
    """A batch decodes each row as it would alone, so the rows' statistics summed with `Totals`
    give the batch's summary (counts exactly; rates from them)."""
    target, draft = pair
    ids, mask = ragged_prompts()
    kwargs = {"verifier": StaticEnsemble(0.5), "num_draft_tokens": 3, "max_new_tokens": 14}
    batch = speculative_generate(target, draft, ids, mask, **kwargs).stats
    rows = Totals()
    for i in range(ids.shape[0]):
        keep = mask[i].bool()
        rows.add(speculative_generate(target, draft, ids[i : i + 1, keep], **kwargs).stats)
    whole = batch.summary()
    for key in (
        "proposed",
        "accepted",
        "rounds",
        "new_tokens",
        "acceptance_rate",
        "mean_accepted_length",
        "tokens_per_target_call",
        "accepted_length_histogram",
    ):
        assert rows.summary()[key] == whole[key], key
    assert rows.target_calls > batch.target_calls  # one call per round per batch, not per row
    assert Totals().add(batch).summary() == whole


def test_totals_travel_as_a_vector_and_merge():
    t = Totals(
        proposed=10,
        accepted=7,
        rounds=4,
        new_tokens=11,
        w_sum=2.5,
        w_count=5,
        target_calls=4,
        draft_calls=12,
        wall_time_s=0.25,
        records_w=True,
    )
    back = Totals.from_vector(t.to_vector())
    assert back.summary() | {"accepted_length_histogram": []} == t.summary() | {
        "accepted_length_histogram": []
    }
    doubled = Totals.from_vector(t.to_vector() * 2)  # what a sum over two processes gives
    assert doubled.acceptance_rate == t.acceptance_rate == 0.7 and doubled.new_tokens == 22
    merged = Totals(accepted_hist=[1, 2]).merge(Totals(accepted_hist=[0, 1, 5]))
    assert merged.accepted_hist == [1, 3, 5]
    assert Totals().mean_w is None and t.mean_w == 0.5
    assert Totals().acceptance_rate == 0.0  # nothing proposed


def test_bounds_on_known_numbers():
    assert tokens_per_call_bound(0.5, 3) == pytest.approx(1.875)
    assert theoretical_speedup(0.5, 3, 0.1) == pytest.approx(1.875 / 1.3)
    assert tokens_per_call_bound(1.0, 4) == 5.0
    assert torch.isfinite(torch.tensor(tokens_per_call_bound(1 - 1e-12, 4)))


def test_mean_tv_predicts_the_ensembles_acceptance_and_w_is_kept_per_token(pair):
    """Proposition 1: a static ensemble accepts a tested draft with probability 1 − w·TV(p, q); over a
    sampled generation, α (accepted over verified drafts) ≈ 1 − w·mean_tv (over the same drafts)."""
    import math

    from diversed import DynamicEnsemble, WeightHead

    target, draft = pair
    ids, mask = ragged_prompts()
    ids, mask = ids.repeat(40, 1), mask.repeat(40, 1)
    for w in (1.0, 0.6, 0.3):
        s = speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=StaticEnsemble(w),
            num_draft_tokens=3,
            max_new_tokens=12,
            do_sample=True,
            generator=torch.Generator().manual_seed(3),
        ).stats
        predicted = 1 - w * s.mean_tv
        n = int(s.verified.sum())
        assert abs(s.alpha - predicted) < 4 * math.sqrt(predicted * (1 - predicted) / n), (
            w,
            s.alpha,
            predicted,
        )
        assert s.acceptance_rate < s.alpha  # untested drafts count against the acceptance rate
        assert Totals().add(s).mean_tv == pytest.approx(s.mean_tv)
    greedy = speculative_generate(target, draft, ids[:4], mask[:4], max_new_tokens=5).stats
    assert greedy.mean_tv is None and greedy.summary()["mean_tv"] is None
    head = WeightHead(draft.config.hidden_size, target.config.hidden_size)
    with torch.no_grad():
        head.net[-1].weight.normal_(0, 0.05)
    out = speculative_generate(
        target,
        draft,
        ids[:4],
        mask[:4],
        verifier=DynamicEnsemble(head),
        max_new_tokens=9,
        do_sample=True,
        generator=torch.Generator().manual_seed(1),
    )
    tw = out.stats.token_w
    for i, n in enumerate(out.stats.new_tokens.tolist()):
        assert not tw[i, :n].isnan().any() and tw[i, n:].isnan().all()  # one w per emitted token
        assert float(tw[i, :n].sum()) == pytest.approx(float(out.stats.w_sum[i]), rel=1e-5)


def _finish(counter):
    class Model:  # what `finish` reads of a `forward.SlotModel`
        calls, maxima = 1, []

    return counter.finish(target=Model(), draft=Model(), verifier="test")


def test_a_round_is_counted_from_what_happened_in_it():
    """`RowCounter.count` takes the round: a row's proposals stop at its first drafted EOS and at its
    own budget (the drafts it would get alone), verified = accepted + the first rejected."""
    from diversed.decoding.rounds import Round
    from diversed.decoding.stats import RowCounter

    eos = torch.tensor([2])
    x = torch.tensor([[5, 2, 6], [7, 8, 9], [7, 8, 9]])  # row 0 drafted EOS second
    k, keep = torch.tensor([3, 1, 0]), torch.tensor([2, 2, 1])
    steps = torch.arange(4)
    r = Round(
        n=3,
        lengths=3,
        x=x,
        k=k,
        full=k == 3,
        nxt=torch.tensor([4, 4, 4]),
        keep=keep,
        kept=steps < keep.unsqueeze(1),
        cols=steps.expand(3, 4),
    )
    counter = RowCounter(4, 3, torch.device("cpu"), records_w=False, max_new=3, eos=eos)
    counter.count(torch.tensor([0, 1, 3]), r)  # original rows 0, 1 and 3 (row 2 left earlier)
    s = _finish(counter)
    # alone with 3 tokens left a row drafts 2: row 1's third draft does not count
    assert s.proposed.tolist() == [2, 2, 0, 2] and s.accepted.tolist() == [2, 1, 0, 0]
    assert s.verified.tolist() == [2, 2, 0, 1] and s.rounds.tolist() == [1, 1, 0, 1]
    assert s.new_tokens.tolist() == [2, 2, 0, 1] and s.num_draft_tokens == [3]
    assert s.accepted_hist.tolist() == [[0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]]
    assert s.w_sum.tolist() == [0.0] * 4 and s.tv_sum is None


def test_a_round_without_drafts_is_one_token():
    """`Round.single`: plain decoding's step (and the engine's first token from the target alone):
    one round, one token, nothing proposed, w at the token where w is recorded."""
    from diversed.decoding.rounds import Round
    from diversed.decoding.stats import RowCounter

    counter = RowCounter(2, 0, torch.device("cpu"), records_w=True, max_new=2)
    for step in range(2):
        r = Round.single(torch.tensor([7, 8]), torch.tensor([0.25, 0.5]))
        keep = torch.tensor([1, step == 0])  # row 1 keeps its first token only
        cols = torch.where(keep > 0, step, 2)[:, None]
        counter.count(torch.tensor([0, 1]), r._replace(keep=keep, kept=keep[:, None] > 0, cols=cols))
    s = _finish(counter)
    assert s.rounds.tolist() == [2, 2] and s.new_tokens.tolist() == [2, 1]
    assert s.proposed.tolist() == s.accepted.tolist() == s.verified.tolist() == [0, 0]
    assert s.accepted_hist.tolist() == [[2], [2]] and s.w_count.tolist() == [2, 1]
    assert s.w_sum.tolist() == [0.5, 0.5] and s.row_mean_w.tolist() == [0.25, 0.5]
    assert s.token_w[0].tolist() == [0.25, 0.25] and s.token_w[1, 0] == 0.5 and s.token_w[1, 1].isnan()


def test_the_records_statistics_come_from_the_totals():
    """Every statistic in `RECORDED` is a `Totals` attribute and a results record field of its kind;
    a record of decoding without drafts has None (or the plain value) for those about drafts."""
    from diversed.decoding.stats import RECORDED
    from diversed.sweep import results

    t = Totals(
        proposed=10,
        accepted=7,
        rounds=4,
        new_tokens=11,
        verified=9,
        tv_sum=1.5,
        w_sum=2.5,
        w_count=5,
        records_w=True,
    )
    record = t.record()
    assert list(record) == list(RECORDED) and set(RECORDED) <= set(results.run_fields())
    assert record["acceptance_rate"] == 0.7 and record["alpha"] == 7 / 9 and record["verified_drafts"] == 9
    assert record["tokens_per_target_call"] == 11 / 4 and record["mean_w"] == 0.5
    plain = t.record(drafts=False)
    assert plain["acceptance_rate"] is plain["alpha"] is plain["verified_drafts"] is None
    assert plain["tokens_per_target_call"] == 1.0 and plain["mean_w"] == 0.5
    point = dict(pair="p", task="t", method="lossless", temperature=0.0)
    assert results.as_record(point | record)["alpha"] == 7 / 9
    with pytest.raises(ValueError, match="alpha"):  # a fraction past 1
        results.as_record(point | record | {"alpha": 1.5})
    with pytest.raises(ValueError, match="verified_drafts"):  # a count below 0
        results.as_record(point | record | {"verified_drafts": -1})


def test_results_read_the_statistics_without_torch():
    """results.py (and the plots) take the record's statistics from stats.py, which imports torch only
    where it counts."""
    import subprocess
    import sys

    code = "import sys, diversed.sweep.results; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
