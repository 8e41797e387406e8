"""`sweep.point.decode_task`, the one loop every entry point decodes a task with, on the tiny toy pair:
its seeds (per batch, or given), its batches (computed, by length, or given), a shared generator, and
completions and metrics in the task's order, scored or not."""

from __future__ import annotations

import hydra
import pytest
import torch
from tiny_models import compose_run

import diversed.sweep.point as point_module
from diversed.decoding.verify import Lossless
from diversed.sweep.point import decode_task
from diversed.tasks.toy import ToyTask

LOSSLESS = {"method": "lossless", "num_draft_tokens": 2}


@pytest.fixture(scope="module")
def pair(toy_tiny_dir, tmp_path_factory):
    cfg = compose_run("evaluate", tmp_path_factory.mktemp("cfg"), toy_tiny_dir, ["+experiment=toy"], ())
    return hydra.utils.instantiate(cfg.pair)


@pytest.fixture
def seeds(monkeypatch):
    """Each decoder call's (prompt rows, seed, generator), in call order."""
    calls: list[tuple[list[list[int]], int, torch.Generator | None]] = []
    real = point_module.decode

    def spy(pair, point, verifier, ids, mask, *, seed, generator=None, **kw):
        rows = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        calls.append((rows, seed, generator))
        return real(pair, point, verifier, ids, mask, seed=seed, generator=generator, **kw)

    monkeypatch.setattr(point_module, "decode", spy)
    return calls


def varied() -> ToyTask:
    """Toy examples whose prompts differ in length (the generated ones are all alike)."""
    sums = [(123, 45), (1, 2), (65, 39), (7, 8), (1234, 5), (12, 3)]
    return ToyTask([{"prompt": f"Q: {a}+{b}=", "answer": a + b, "reference": f"{a + b}"} for a, b in sums])


def test_greedy_completions_do_not_depend_on_the_batch_size(pair):
    task = ToyTask.load(n_examples=6)
    point = {**LOSSLESS, "temperature": 0.0}
    outs = [decode_task(pair, point, Lossless(), task, batch_size=b, seed=0) for b in (1, 4, 6)]
    assert outs[0].completions == outs[1].completions == outs[2].completions
    assert [m["exact_match"] for m in outs[0].metrics] == [m["exact_match"] for m in outs[2].metrics]


def test_each_batch_is_seeded_by_its_first_position_and_reproduces(pair, seeds):
    task = ToyTask.load(n_examples=5)
    point = {**LOSSLESS, "temperature": 1.0}
    first = decode_task(pair, point, Lossless(), task, batch_size=2, seed=7)
    assert [s for _, s, _ in seeds] == [7, 9, 11]  # seed + the position of each batch's first example
    again = decode_task(pair, point, Lossless(), task, batch_size=2, seed=7)
    assert again.completions == first.completions and again.per_example("new_tokens") == first.per_example(
        "new_tokens"
    )


def test_given_batches_and_seeds_are_honoured(pair, seeds):
    task = ToyTask.load(n_examples=4)
    point = {**LOSSLESS, "temperature": 1.0}
    prompts = task.encode(pair.tokenizer, list(task))
    batches = [[3], [1, 0], [2]]
    out = decode_task(pair, point, Lossless(), task, batch_size=2, batches=batches, seeds=[5, 6, 7])
    assert out.batches == batches
    assert [rows for rows, _, _ in seeds] == [[prompts[j] for j in index] for index in batches]
    assert [s for _, s, _ in seeds] == [5, 6, 7]
    assert len(out.completions) == 4  # in the task's order, whatever the batches'
    # example 3 alone with seed 5 is what a batch of it alone seeded 5 gives
    alone = decode_task(pair, point, Lossless(), task, batch_size=1, batches=[[3]], seeds=[5])
    assert alone.completions == [out.completions[3]]


def test_one_generator_is_drawn_from_by_every_batch(pair, seeds):
    task = ToyTask.load(n_examples=4)
    point = {**LOSSLESS, "temperature": 1.0}
    outs, states = [], []
    for _ in range(2):
        gen = torch.Generator().manual_seed(11)
        outs.append(decode_task(pair, point, Lossless(), task, batch_size=2, generator=gen))
        states.append(gen.get_state())
    assert all(g is not None for _, _, g in seeds) and len({id(g) for _, _, g in seeds[:2]}) == 1
    assert outs[0].completions == outs[1].completions  # the same generator state, the same draws
    assert not torch.equal(states[0], torch.Generator().manual_seed(11).get_state())  # drawn from


def test_not_scored_gives_no_completions_or_metrics(pair):
    task = ToyTask.load(n_examples=3)
    point = {**LOSSLESS, "temperature": 0.0}
    out = decode_task(pair, point, Lossless(), task, batch_size=2, score=False)
    assert out.completions == [] and out.metrics == []
    assert out.totals.new_tokens == sum(out.per_example("new_tokens")) > 0


def test_batched_by_length_the_completions_are_in_the_tasks_order(pair):
    task = varied()
    point = {**LOSSLESS, "temperature": 0.0}
    by_length = decode_task(pair, point, Lossless(), task, batch_size=2, by_length=True)
    prompts = task.encode(pair.tokenizer, list(task))
    order = [j for index in by_length.batches for j in index]
    assert order == sorted(range(len(prompts)), key=lambda j: len(prompts[j])) != list(range(len(prompts)))
    one = decode_task(pair, point, Lossless(), task, batch_size=1)  # in the task's order
    assert by_length.completions == one.completions
    assert [m["exact_match"] for m in by_length.metrics] == [m["exact_match"] for m in one.metrics]
    assert by_length.cuts == [0] * len(prompts)


def test_prompts_without_a_task_are_decoded_and_not_cut(pair):
    prompts = [[5, 6, 7], [8, 9]]
    point = {**LOSSLESS, "temperature": 0.0}
    out = decode_task(pair, point, Lossless(), prompts=prompts, batch_size=2, max_new=4)
    assert out.cuts == [0, 0] and out.completions == [] and out.widths == [3]
    assert all(n <= 4 for n in out.per_example("new_tokens"))
