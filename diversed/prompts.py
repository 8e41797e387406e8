"""Task examples in batches for the training loops (heads in `train.py`, drafts in `distill.py`).

`PromptDataModule` serves the train split for rollouts and a validation set for model selection.
The validation set is another split of the dataset (`val_split: validation`), or, for datasets
without one (GSM8K has train and test only), `val_split: holdout`: `n_val` examples drawn by the
seed from the TRAIN split and left out of training. Either way no example of the split the task
is evaluated on (`task.split`, e.g. test) trains or selects a checkpoint: such examples are left
out (a warning says how many), and a data file that serves every split is refused. The held-out
examples never appear among the training ones.

It does not decode or score (the training modules do).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
from torch.utils.data import DataLoader, Sampler

from diversed.errors import ConfigError

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
            raise ConfigError("data.val_split=holdout needs data.n_val >= 1 examples to hold out of the train split")
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
        from diversed.tasks.data import DatasetUnavailable, MissingSplit

        try:
            evaluation = self.task_factory(split=split, n_examples=None)
        except (MissingSplit, DatasetUnavailable) as e:  # e.g. a data_files mapping without the test file
            log.warning(f"could not read the evaluation split {split!r} to check that none of its examples trains "
                        f"or selects a checkpoint: {e}")  # fmt: skip
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
                log.warning(f"{len(task) - len(keep)} of the {len(task)} {name!r} examples are also in the evaluation "
                            f"split {split!r}: left out of {'training' if attr == 'train_task' else 'validation'}")  # fmt: skip
                setattr(self, attr, task.select(keep, f"{task.source.get('selection', name)}, without {split!r} examples"))

    def _held_out(self) -> tuple[Any, Any]:
        """(train, validation): `n_val` examples of the train split drawn by the seed, and up to
        `n_train` of the others."""
        full = self.task_factory(split=self.train_split, n_examples=None)
        order = list(range(len(full)))
        random.Random(f"holdout-{self.seed}").shuffle(order)
        if len(order) <= self.n_val:
            raise ConfigError(
                f"data.val_split=holdout: the {self.train_split!r} split has {len(order)} examples, not more than "
                f"data.n_val={self.n_val}; lower data.n_val"
            )
        val, rest = sorted(order[: self.n_val]), order[self.n_val :]
        train = sorted(rest if self.n_train is None else rest[: self.n_train])
        return full.select(train, "train, without the held-out examples"), full.select(val, "held out of train")

    def _loader(self, task: Any, batch_size: int, shuffle: bool) -> DataLoader:
        return DataLoader(list(task), batch_size=batch_size, shuffle=shuffle, collate_fn=list, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        if self.train_items is None:
            return self._loader(self.train_task, self.batch_size, shuffle=True)
        # served rows (token sequences): batches of similar lengths, so that little of each is padding
        sampler = LengthGroupedBatches([len(item.ids) for item in self.train_items], self.batch_size, self.seed)
        return DataLoader(self.train_items, batch_sampler=sampler, collate_fn=list, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_task, self.val_batch_size, shuffle=False)


class LengthGroupedBatches(Sampler[list[int]]):
    """Batches of rows of similar lengths, in a new random order each epoch (as transformers'
    `group_by_length`): the rows are shuffled, cut into groups of 16 batches, each group sorted by
    length and cut into batches, and the batches shuffled. Every row once per epoch."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int = 0, group: int = 16) -> None:
        self.lengths, self.batch_size, self.seed, self.group = list(lengths), int(batch_size), int(seed), int(group)
        self.epoch = 0

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        rng = random.Random(f"length-grouped-{self.seed}-{self.epoch}")
        self.epoch += 1
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        size = self.batch_size * self.group
        batches = []
        for start in range(0, len(order), size):
            chunk = sorted(order[start : start + size], key=self.lengths.__getitem__)
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        rng.shuffle(batches)
        return iter(batches)
