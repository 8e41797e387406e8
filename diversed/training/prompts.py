"""Task examples in batches for the training loops (heads in `train.py`, drafts in `distill.py`).

`PromptDataModule` serves the train split for rollouts and a validation set for model selection.
The validation set is another split of the dataset (`val_split: validation`), or, for datasets
without one (GSM8K has train and test only), `val_split: holdout`: `n_val` examples drawn by the
seed from the TRAIN split and left out of training. Either way no example of the split the task
is evaluated on (`task.split`, e.g. test) trains or selects a checkpoint: such examples are left
out (a warning says how many), and a data file that serves every split is refused. The held-out
examples never appear among the training ones.

The training batches come in an order drawn from (seed, epoch) alone (`SeededShuffle`, and
`LengthGroupedBatches` for rows served by the module), by a `ResumableLoader` whose position
(epoch, batches served) Lightning keeps in the checkpoints: a resumed run trains on the batches the
uninterrupted run trained on, from the one after the checkpoint. Validation batches keep their order.

It does not decode or score (the training modules do).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler

from diversed.errors import ConfigError
from diversed.tasks.data import DatasetUnavailable, MissingSplit

HOLDOUT = "holdout"
log = logging.getLogger(__name__)


def _row_key(example: dict[str, Any]) -> str:
    return json.dumps(example, sort_keys=True, default=str)


class PromptDataModule(L.LightningDataModule):
    """Serves task examples (dicts) in batches: train split for rollouts, held-out for validation."""

    def __init__(
        self,
        task: Callable[..., Any],
        *,
        train_split: str = "train",
        val_split: str = "validation",
        n_train: int | None = None,
        n_val: int | None = 128,
        batch_size: int = 16,
        val_batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if val_split == HOLDOUT and not n_val:
            raise ConfigError(
                "data.val_split=holdout needs data.n_val >= 1 examples to hold out of the train split"
            )
        self.task_factory = task
        self.train_split, self.val_split = train_split, val_split
        self.n_train, self.n_val, self.seed = n_train, n_val, seed
        self.batch_size, self.val_batch_size, self.num_workers = batch_size, val_batch_size, num_workers
        self.train_task = self.val_task = None
        self.train_items: list[Any] | None = None

    def serve(self, items: list[Any]) -> None:
        """Train on `items` instead of the train examples (distillation's samples drawn once from
        them, `distill.reuse`); validation is unchanged."""
        self.train_items = list(items)

    def setup(self, stage: str | None = None) -> None:
        if self.train_task is not None or self.val_task is not None:
            return
        if self.val_split == HOLDOUT:
            self.train_task, self.val_task = self._held_out()
            self._apart_from_evaluation()
            return
        if stage in (None, "fit"):
            self.train_task = self.task_factory(split=self.train_split, n_examples=self.n_train)
        self.val_task = self.task_factory(split=self.val_split, n_examples=self.n_val)
        if self.train_task is not None and self.train_split != self.val_split:
            train_rows = {_row_key(e) for e in self.train_task}
            if all(_row_key(e) in train_rows for e in self.val_task):
                raise ConfigError(
                    f"the {self.val_split!r} examples are all in the {self.train_split!r} split: a single "
                    "task.data_files path serves every split; give a mapping instead, e.g. "
                    "task.data_files='{train: train.jsonl, validation: val.jsonl}', or data.val_split=holdout"
                )
        self._apart_from_evaluation()

    def _apart_from_evaluation(self) -> None:
        """Drop every training and validation example that is also in the split the task is
        evaluated on (`split` of the task factory, e.g. test): none may train or select a
        checkpoint. Refuses when nothing is left (one data file serving every split)."""
        keywords = getattr(self.task_factory, "keywords", {}) or {}
        split = keywords.get("split")
        if not split or split in (self.train_split, self.val_split):
            return  # the schema refuses these combinations before anything loads
        try:
            evaluation = self.task_factory(split=split, n_examples=None)
        except (MissingSplit, DatasetUnavailable) as e:  # e.g. a data_files mapping without the test file
            log.warning(
                f"could not read the evaluation split {split!r} to check that none of its examples trains "
                f"or selects a checkpoint: {e}"
            )
            return
        seen = {_row_key(e) for e in evaluation}
        for attr, name in (("train_task", self.train_split), ("val_task", self.val_split)):
            task = getattr(self, attr)
            if task is None:
                continue
            keep = [i for i, e in enumerate(task) if _row_key(e) not in seen]
            if not keep:
                raise ConfigError(
                    f"every {name!r} example is also in the evaluation split {split!r} (task.split): one "
                    "task.data_files path serves every split; give a split mapping, e.g. "
                    "task.data_files='{train: train.jsonl, test: test.jsonl}'"
                )
            if len(keep) < len(task):
                log.warning(
                    f"{len(task) - len(keep)} of the {len(task)} {name!r} examples are also in the "
                    f"evaluation split {split!r}: left out of "
                    f"{'training' if attr == 'train_task' else 'validation'}"
                )
                setattr(
                    self,
                    attr,
                    task.select(keep, f"{task.source.get('selection', name)}, without {split!r} examples"),
                )

    def _held_out(self) -> tuple[Any, Any]:
        """(train, validation): `n_val` examples of the train split drawn by the seed, and up to
        `n_train` of the others."""
        full = self.task_factory(split=self.train_split, n_examples=None)
        order = list(range(len(full)))
        random.Random(f"holdout-{self.seed}").shuffle(order)
        if len(order) <= self.n_val:
            raise ConfigError(
                f"data.val_split=holdout: the {self.train_split!r} split has {len(order)} examples, "
                f"not more than data.n_val={self.n_val}; lower data.n_val"
            )
        val, rest = sorted(order[: self.n_val]), order[self.n_val :]
        train = sorted(rest if self.n_train is None else rest[: self.n_train])
        return full.select(train, "train, without the held-out examples"), full.select(
            val, "held out of train"
        )

    def train_dataloader(self) -> DataLoader:
        """The training rows (the train examples, or the served ones) in an order drawn from (seed,
        epoch) alone, by a loader whose position Lightning keeps in its checkpoints: a resumed run
        gets the batches the uninterrupted one got, from the batch after the checkpoint's."""
        rows = list(self.train_task) if self.train_items is None else self.train_items
        order = SeededShuffle(len(rows), self.seed)
        common = {
            "collate_fn": list,
            "num_workers": self.num_workers,
            "generator": torch.Generator().manual_seed(self.seed),
        }
        if self.train_items is None:
            return ResumableLoader(rows, batch_size=self.batch_size, sampler=order, **common)
        # served rows (token sequences): batches of similar lengths, so that little of each is padding
        lengths = [len(item.ids) for item in rows]
        return ResumableLoader(
            rows, batch_sampler=LengthGroupedBatches(order, self.batch_size, lengths=lengths), **common
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            list(self.val_task),
            batch_size=self.val_batch_size,
            shuffle=False,
            collate_fn=list,
            num_workers=self.num_workers,
        )


# ----------------------------------------------------------------------------- resumable batches


class SeededShuffle(Sampler[int]):
    """0 .. n − 1 in a random order drawn from (seed, epoch) alone (not from the global generators):
    the same order in every run, resumed or not. Lightning sets the epoch (`set_epoch`)."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n, self.seed, self.epoch = int(n), int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        order = list(range(self.n))
        random.Random(f"shuffle-{self.seed}-{self.epoch}").shuffle(order)
        return iter(order)


class LengthGroupedBatches(BatchSampler):
    """Batches of rows of similar lengths, in a new random order each epoch (as transformers'
    `group_by_length`): the rows in `sampler`'s order (a `SeededShuffle`, or Lightning's distributed
    wrapper of it: this process's share) are cut into groups of `group` batches, each group sorted
    by length and cut into batches, and the batches shuffled by (seed, epoch). Every row once per epoch."""

    def __init__(
        self,
        sampler: Sampler[int],
        batch_size: int,
        drop_last: bool = False,
        *,
        lengths: list[int],
        group: int = 16,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.lengths, self.group = list(lengths), int(group)

    def __iter__(self) -> Iterator[list[int]]:
        order, size = list(self.sampler), self.batch_size * self.group
        batches = []
        for start in range(0, len(order), size):
            chunk = sorted(order[start : start + size], key=self.lengths.__getitem__)
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        seed, epoch = (getattr(self.sampler, k, 0) for k in ("seed", "epoch"))
        random.Random(f"length-grouped-{seed}-{epoch}").shuffle(batches)
        return iter(batches)


class ResumableLoader(DataLoader):
    """A DataLoader whose position is part of Lightning's checkpoints (Lightning's protocol for
    stateful loaders, `state_dict` / `load_state_dict`): the epoch of its samplers' order and how
    many batches of it were served. Given that state, its next pass starts after those batches (the
    next epoch's first batch where the epoch was done); Lightning restores the loops' counters."""

    def __iter__(self) -> Iterator[Any]:
        skip, self._skip = getattr(self, "_skip", 0), 0
        self._served = skip
        for i, batch in enumerate(super().__iter__()):
            if i < skip:  # served before the checkpoint (rows in memory: skipping them costs nothing)
                continue
            self._served = i + 1
            yield batch

    def _epoch_samplers(self) -> list[Any]:
        found = {}
        for sampler in (
            self.sampler,
            getattr(self.batch_sampler, "sampler", None),
        ):  # as Lightning's set_epoch
            if callable(getattr(sampler, "set_epoch", None)):
                found[id(sampler)] = sampler
        return list(found.values())

    def state_dict(self) -> dict[str, int]:
        epochs = [getattr(s, "epoch", 0) for s in self._epoch_samplers()]
        return {"epoch": int(epochs[0]) if epochs else 0, "served": int(getattr(self, "_served", 0))}

    def load_state_dict(self, state: dict[str, int]) -> None:
        epoch, served = int(state.get("epoch", 0)), int(state.get("served", 0))
        if served >= len(self):  # the epoch was done: the next one from its start
            epoch, served = epoch + 1, 0
        for sampler in self._epoch_samplers():
            sampler.set_epoch(epoch)
        self._skip = served
