"""The toy tasks: two-digit addition (`toy`) and counting a string's first letter (`toy_count`),
with free wording, the two skills the toy pair is trained on.

A row (built by `diversed.models.toy_corpus.examples`, deterministic from the seed)::

    {"id": "toy-37+48", "a": 37, "b": 48, "prompt": "Q: 37+48=", "answer": "85",
     "reference": " so we get 85."}

The completion is free wording then the answer; the score is exact match of the last integer
before the first "." (or newline) with the answer, so the wording never changes the reward.
The split of problems depends on `seed`, which must be the toy pair's build seed (0 by default)
for test problems to be unseen by the pair.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from diversed.models.toy_corpus import examples
from diversed.tasks.base import Task
from diversed.tasks.data import DataFileError, as_plain, check_fields, load_rows, skipped, subset_indices

_INT = re.compile(r"-?\d+")


class ToyTask(Task):
    name: ClassVar[str] = "toy"
    metric: ClassVar[str] = "exact_match"
    skill: ClassVar[str] = "add"  # which toy_corpus skill the examples come from
    stop = (".", "\n")
    max_new_tokens = 16

    fields: ClassVar[tuple[str, ...]] = ("prompt", "answer", "reference")
    required_fields: ClassVar[tuple[str, ...] | None] = ("prompt", "answer")

    @classmethod
    def load(
        cls,
        *,
        split: str | None = None,
        data_files: Any = None,
        n_examples: int | None = None,
        seed: int = 0,
        skip_examples: int = 0,
        **options: Any,
    ) -> ToyTask:
        """The first `n_examples` of `split` (default test) after its first `skip_examples`, generated
        from `seed`, or read from local `data_files` (a path, paths, or a split mapping, as for every
        task)."""
        split = split or "test"
        if data_files is not None:
            rows = load_rows("toy", None, split, data_files)
            where = f"task.data_files ({as_plain(data_files)}), split {split!r}"
            if not rows:
                raise DataFileError(f"toy: {where} has no rows")
            check_fields(rows, cls.missing_fields, cls.needed_fields(), where)
        else:
            rows = examples(split, seed, cls.skill)
        count = len(subset_indices(len(rows), n_examples, seed, skip=skip_examples))  # (n and skip checked)
        # the first n after the skipped ones (the split is shuffled by the seed already)
        indices = list(range(skip_examples, skip_examples + count))
        task = cls([rows[i] for i in indices], **options)
        task.indices = indices
        task.source = {
            "dataset": "toy",
            "split": split,
            "data_files": as_plain(data_files),
            "n_examples": n_examples,
            "seed": seed,
            **skipped(skip_examples),
        }
        return task

    def prompt(self, example: dict[str, Any]) -> str:
        return example["prompt"]

    def target(self, example: dict[str, Any]) -> str:
        return example["reference"]

    @staticmethod
    def extract_answer(completion: str) -> str | None:
        """The last integer in the text (call on a truncated completion)."""
        found = _INT.findall(completion)
        return found[-1] if found else None

    def reference(self, example: dict[str, Any]) -> str:
        return str(example["answer"])

    def extract(self, example: dict[str, Any], completion: str) -> str | None:
        return self.extract_answer(self.truncate(completion))

    def score(self, example: dict[str, Any], completion: str) -> float:
        answer = self.extract_answer(self.truncate(completion))
        return float(answer is not None and int(answer) == int(example["answer"]))


class ToyCountTask(ToyTask):
    """The toy pair's second skill: how often a string's first letter occurs in it
    ("C: bacbdba=" -> " so we get 3."), exact match of the number."""

    name: ClassVar[str] = "toy_count"
    skill: ClassVar[str] = "count"


SKILL_TASKS: dict[str, type[ToyTask]] = {"add": ToyTask, "count": ToyCountTask}
