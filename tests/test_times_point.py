"""`time_point`'s latency passes on the tiny pair: per-example times, tokens and scores of the timed
samples, and at batch size 1 the timed samples are the scored ones."""

from __future__ import annotations

import hydra
import pytest
from tiny_models import compose_run

import diversed.sweep.point as point_module
from diversed.decoding.verify import Lossless
from diversed.sweep.point import run_point, time_point
from diversed.tasks.toy import ToyTask

TIMING = {"warmup": 0, "repeats": 0, "latency": True, "latency_examples": 4, "latency_repeats": 2}


@pytest.fixture(scope="module")
def pair(toy_tiny_dir, tmp_path_factory):
    cfg = compose_run("evaluate", tmp_path_factory.mktemp("cfg"), toy_tiny_dir, ["+experiment=toy"], ())
    return hydra.utils.instantiate(cfg.pair)


@pytest.mark.parametrize("reordered", [False, True])
def test_at_batch_1_the_timed_samples_are_the_scored_ones(pair, reordered, monkeypatch):
    """Each example alone with the seed the scored pass gave it (seed + its position in the decoding
    order, which `batch_by_length` may change: here reversed), so the same completion."""
    if reordered:
        monkeypatch.setattr(
            point_module, "batch_indices", lambda lengths, b, by: [[j] for j in range(5, -1, -1)]
        )
    seeds: dict[tuple, list[int]] = {}
    real = point_module.decode

    def spy(pair, point, verifier, ids, mask, *, seed, **kw):
        seeds.setdefault(tuple(ids[0].tolist()), []).append(seed)
        return real(pair, point, verifier, ids, mask, seed=seed, **kw)

    monkeypatch.setattr(point_module, "decode", spy)
    task = ToyTask.load(n_examples=6)
    point = {"method": "lossless", "temperature": 1.0, "num_draft_tokens": 2}
    args = {"batch_size": 1, "seed": 3}
    _, rows = run_point(pair, task, point, Lossless(), **args)
    out = time_point(pair, task, point, Lossless(), timing=TIMING, **args)
    prompts = task.encode(pair.tokenizer, list(task))
    for j, prompt in enumerate(prompts[: TIMING["latency_examples"]]):
        scored, *timed = seeds[tuple(prompt)]
        # the timed passes, then as many timed to the first token: all with the scored seed
        assert timed == [scored] * 2 * TIMING["latency_repeats"] and scored == 3 + (5 - j if reordered else j)
    k = TIMING["latency_examples"]
    assert out["latency_example_ids"] == [r["example_id"] for r in rows[:k]]
    # the same seed per example as the scored pass (its position in the decoding order): the same samples
    assert out["latency_example_tokens"] == [r["new_tokens"] for r in rows[:k]]
    assert out["latency_example_scores"] == [r["score"] for r in rows[:k]]
    assert len(out["latency_example_s"]) == k and all(t > 0 for t in out["latency_example_s"])
    assert out["latency_new_tokens"] == sum(out["latency_example_tokens"])
    # decode only: each example also timed to its first token, and the time per token after it
    assert len(out["latency_example_first_s"]) == k and all(f > 0 for f in out["latency_example_first_s"])
    assert out["latency_decode_per_token_s"] > 0


def test_at_a_larger_batch_the_timed_samples_are_scored_themselves(pair):
    task = ToyTask.load(n_examples=6)
    point = {"method": "autoregressive", "temperature": 1.0}
    out = time_point(pair, task, point, None, batch_size=4, seed=0, timing={**TIMING, "latency_repeats": 1})
    # one pass: its mean per sample is the mean of its calls, each example's own time
    assert out["latency_runs"] == [pytest.approx(sum(out["latency_example_s"]) / 4)]
    k = TIMING["latency_examples"]
    assert len(out["latency_example_scores"]) == k and all(0 <= s <= 1 for s in out["latency_example_scores"])
    assert len(out["latency_example_tokens"]) == k and out["latency_examples"] == k
    assert "latency_example_ids" in out and "wall_time_s" not in out  # repeats 0: no pass at the batch size


def test_more_latency_examples_than_the_task_has_times_them_all(pair):
    """`timing.latency_examples` above the number of examples: every example timed alone, and the record
    says how many were."""
    task = ToyTask.load(n_examples=3)
    point = {"method": "autoregressive", "temperature": 0.0}
    timing = {**TIMING, "latency_examples": 10, "latency_repeats": 1}
    out = time_point(pair, task, point, None, batch_size=2, seed=0, timing=timing)
    assert out["latency_examples"] == 3
    assert len(out["latency_example_s"]) == len(out["latency_example_scores"]) == 3


def test_timed_calls_pad_and_no_scoring_runs_between_them(pair, monkeypatch):
    """Each timed call pads its batch (as it always did: the padding and the copy to the device are in
    the time), and the timed samples are scored after every timed pass, never between timed calls."""
    events: list[str] = []
    real_pad, real_decode = point_module.left_pad, point_module.decode

    def pad(*args, **kw):
        events.append("pad")
        return real_pad(*args, **kw)

    def decode(*args, **kw):
        events.append("decode")
        return real_decode(*args, **kw)

    real_perf = point_module.time.perf_counter

    class Clock:
        @staticmethod
        def perf_counter():
            events.append("clock")
            return real_perf()

    task = ToyTask.load(n_examples=2)
    real_score = type(task).checked_metrics

    def checked(self, *args, **kw):
        events.append("score")
        return real_score(self, *args, **kw)

    monkeypatch.setattr(point_module, "left_pad", pad)
    monkeypatch.setattr(point_module, "decode", decode)
    monkeypatch.setattr(point_module, "time", Clock)
    monkeypatch.setattr(type(task), "checked_metrics", checked)
    point = {"method": "autoregressive", "temperature": 1.0}
    timing = {"warmup": 0, "repeats": 1, "latency": True, "latency_examples": 2, "latency_repeats": 2}
    out = time_point(pair, task, point, None, batch_size=2, seed=0, timing=timing)
    # every call: the clock started, the batch padded and decoded, the clock read
    timed = len(events) - events[::-1].index("clock")
    calls = [events[i : i + 4] for i in range(0, timed, 4)]
    assert all(c == ["clock", "pad", "decode", "clock"] for c in calls), " ".join(events)
    assert events[timed:] == ["score"] * 2  # each timed sample once, after the last timed pass
    assert len(calls) == 1 + 2 * 2 * 2  # the pass at the batch size, then 2 examples x 2 repeats, twice
    assert len(out["latency_example_scores"]) == 2
