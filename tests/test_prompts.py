"""The training data module: held-out validation and the evaluation split kept apart."""

from __future__ import annotations

import functools
import json
import logging

import hydra
import pytest
from hydra import compose, initialize_config_dir

from diversed import CONFIG_DIR
from diversed.tasks import load_task
from diversed.training.prompts import PromptDataModule


def _ids(task) -> set[str]:
    return {json.dumps(e, sort_keys=True) for e in task}


def test_holdout_comes_from_train_and_never_meets_the_evaluation_split():
    factory = functools.partial(load_task, "toy", split="test", seed=0)
    dm = PromptDataModule(factory, val_split="holdout", n_val=50, n_train=200, seed=3)
    dm.setup("fit")
    train, val, test = _ids(dm.train_task), _ids(dm.val_task), _ids(load_task("toy", split="test"))
    assert len(val) == 50 and len(train) == 200
    assert not train & val and not (train | val) & test
    assert val <= _ids(load_task("toy", split="train"))
    again = PromptDataModule(factory, val_split="holdout", n_val=50, n_train=200, seed=3)
    again.setup("fit")
    other = PromptDataModule(factory, val_split="holdout", n_val=50, n_train=200, seed=4)
    other.setup("fit")
    assert _ids(again.val_task) == val and _ids(other.val_task) != val


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _gsm8k_rows(start, n):
    return [
        {"question": f"What is {i} plus 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"}
        for i in range(start, start + n)
    ]


def test_one_file_for_every_split_is_refused(tmp_path):
    path = _write(tmp_path / "all.jsonl", _gsm8k_rows(0, 300))
    factory = functools.partial(load_task, "gsm8k", split="test", data_files=path)
    dm = PromptDataModule(factory, val_split="holdout", n_val=20)
    with pytest.raises(
        ValueError, match=r"every 'train' example is also in the evaluation split 'test'.*mapping"
    ):
        dm.setup("fit")


def test_examples_shared_with_the_evaluation_split_are_left_out(tmp_path, caplog):
    train = _write(tmp_path / "train.jsonl", _gsm8k_rows(0, 300))
    test = _write(tmp_path / "test.jsonl", _gsm8k_rows(1000, 150) + _gsm8k_rows(0, 40))  # 40 leaked
    factory = functools.partial(load_task, "gsm8k", split="test", data_files={"train": train, "test": test})
    dm = PromptDataModule(factory, val_split="holdout", n_val=50)
    with caplog.at_level(logging.WARNING, logger="diversed.training.prompts"):
        dm.setup("fit")
    evaluation = _ids(load_task("gsm8k", split="test", data_files={"test": test}))
    assert not (_ids(dm.train_task) | _ids(dm.val_task)) & evaluation
    assert len(dm.train_task) + len(dm.val_task) == 260
    assert "also in the evaluation split 'test'" in caplog.text
    # a mapping without the evaluation split cannot be checked: training still starts, with a warning
    caplog.clear()
    factory = functools.partial(load_task, "gsm8k", split="test", data_files={"train": train})
    dm = PromptDataModule(factory, val_split="holdout", n_val=50)
    with caplog.at_level(logging.WARNING, logger="diversed.training.prompts"):
        dm.setup("fit")
    assert len(dm.val_task) == 50 and "could not read the evaluation split 'test'" in caplog.text


@pytest.mark.parametrize("preset", ["gsm8k", "mbpp"])
def test_paper_presets_select_checkpoints_on_train_problems_only(preset, tmp_path, monkeypatch):
    """The paper presets' validation examples (held out of TRAIN) never overlap the 100 evaluation
    examples, nor anything else of the evaluation split."""
    monkeypatch.setenv("DIVERSED_ALLOW_CODE_EXECUTION", "1")
    if preset == "gsm8k":
        files = {
            "train": _write(tmp_path / "train.jsonl", _gsm8k_rows(0, 600)),
            "test": _write(tmp_path / "test.jsonl", _gsm8k_rows(5000, 300)),
        }
    else:

        def rows(start, n):
            return [
                {
                    "task_id": i,
                    "text": f"Write f{i}.",
                    "code": f"def f{i}(): return {i}",
                    "test_list": [f"assert f{i}() == {i}"],
                    "test_setup_code": "",
                }
                for i in range(start, start + n)
            ]

        files = {
            "train": _write(tmp_path / "train.jsonl", rows(0, 600)),
            "validation": _write(tmp_path / "val.jsonl", rows(5000, 90)),
        }
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"+paper={preset}",
                "task.data_files={" + ",".join(f"{k}:'{v}'" for k, v in files.items()) + "}",
            ],
        )
    assert cfg.data.val_split == "holdout"
    dm = hydra.utils.instantiate(cfg.data, task=hydra.utils.instantiate(cfg.task, _partial_=True))
    dm.setup("fit")
    evaluation = hydra.utils.instantiate(cfg.task)  # what python -m diversed.evaluate +paper=... scores
    assert len(evaluation) == (100 if preset == "gsm8k" else 90) and len(dm.val_task) == 100
    assert len(dm.train_task) == 400
    whole_split = _ids(hydra.utils.instantiate(cfg.task, n_examples=None))
    assert not _ids(dm.val_task) & whole_split and not _ids(dm.train_task) & whole_split
    assert not _ids(dm.val_task) & _ids(dm.train_task)


def test_length_grouped_batches_serve_every_row_once_per_epoch_in_batches_of_similar_lengths():
    import random

    from diversed.training.prompts import LengthGroupedBatches, SeededShuffle

    lengths = [random.Random(i).randint(10, 500) for i in range(203)]
    order = SeededShuffle(len(lengths), seed=3)
    sampler = LengthGroupedBatches(order, 8, lengths=lengths, group=4)
    epochs = []
    for epoch in range(2):
        order.set_epoch(epoch)  # as Lightning does at each epoch's start
        epochs.append(list(sampler))
    for batches in epochs:
        assert len(batches) == len(sampler) == 26
        assert sorted(i for b in batches for i in b) == list(range(203))  # every row once
        assert all(1 <= len(b) <= 8 for b in batches)
        spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
        assert spread < 150, spread  # random batches of 8 from [10, 500] spread about 380
    assert epochs[0] != epochs[1]  # a new order each epoch
    assert list(sampler) == epochs[1]  # drawn from (seed, epoch) alone: the same again
    assert list(LengthGroupedBatches(SeededShuffle(203, seed=3), 8, lengths=lengths, group=4)) == epochs[0]


@pytest.mark.parametrize("grouped", [False, True])
def test_the_train_loader_resumes_at_the_batch_after_its_checkpoint(grouped):
    """The loader's state (epoch, batches served) puts a new loader, in a new process, at the next
    batch of the same order; a finished epoch resumes at the next epoch's first batch."""
    from types import SimpleNamespace

    from diversed.training.prompts import PromptDataModule

    def loader():
        dm = PromptDataModule(lambda **_: None, batch_size=4, seed=7)
        dm.train_task = [{"i": i} for i in range(10)]  # 3 batches an epoch
        if grouped:
            dm.serve([SimpleNamespace(ids=[0] * (1 + i % 4), i=i) for i in range(10)])
        return dm.train_dataloader()

    def ids(batch):
        return [r["i"] if isinstance(r, dict) else r.i for r in batch]

    def set_epoch(dl, epoch):  # Lightning's `_set_sampler_epoch`
        for s in {id(x): x for x in (dl.sampler, getattr(dl.batch_sampler, "sampler", None))}.values():
            getattr(s, "set_epoch", lambda e: None)(epoch)

    whole, dl = [], loader()
    for epoch in range(4):
        set_epoch(dl, epoch)
        whole += [ids(b) for b in dl]
    assert sorted(sum(whole[:3], [])) == list(range(10)) and whole[:3] != whole[3:6]
    for stop in range(1, 9):  # stop after `stop` batches, resume in a fresh loader
        dl, seen, states = loader(), [], []
        for epoch in range(3):
            set_epoch(dl, epoch)
            for b in dl:
                seen.append(ids(b))
                if len(seen) == stop:
                    states.append(dl.state_dict())
                    break
            if states:
                break
        assert states[0] == {"epoch": (stop - 1) // 3, "served": (stop - 1) % 3 + 1}
        fresh = loader()
        fresh.load_state_dict(states[0])
        rest = [ids(b) for b in fresh]
        epoch = stop // 3
        assert seen + rest == whole[: 3 * (epoch + 1)], stop
        set_epoch(fresh, epoch + 1)
        assert [ids(b) for b in fresh] == whole[3 * (epoch + 1) : 3 * (epoch + 2)]
