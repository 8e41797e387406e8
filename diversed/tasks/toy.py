"""The toy task: two-digit addition with free wording, the task the toy pair is trained on.

A row (built by `diversed.toy_corpus.examples`, deterministic from the seed)::

    {"id": "toy-37+48", "a": 37, "b": 48, "prompt": "Q: 37+48=", "answer": "85",
     "reference": " so we get 85."}

The completion is free wording then the answer; the score is exact match of the last integer
before the first "." (or newline) with the answer, so the wording never changes the reward.
The split of problems depends on `seed`, which must be the toy pair's build seed (0 by default)
for test problems to be unseen by the pair.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from diversed.tasks.base import Task

_INT = re.compile(r"-?\d+")


class ToyTask(Task):
    name: ClassVar[str] = "toy"
    metric: ClassVar[str] = "exact_match"
    stop = (".", "\n")
    max_new_tokens = 16

    @classmethod
    def load(
        cls,
        *,
        split: str | None = None,
        data_files: str | Sequence[str] | None = None,
        n_examples: int | None = None,
        seed: int = 0,
        **options: Any,
    ) -> ToyTask:
        """Examples of `split` (default test), generated from `seed`, or read from JSONL `data_files`."""
        if data_files is not None:
            files = [data_files] if isinstance(data_files, str | Path) else list(data_files)
            rows = [
                json.loads(line) for f in files for line in Path(f).read_text().splitlines() if line.strip()
            ]
        else:
            from diversed.toy_corpus import examples

            rows = examples(split or "test", seed)
        if n_examples is not None:
            rows = rows[: int(n_examples)]
        return cls(rows, **options)

    def prompt(self, example: dict[str, Any]) -> str:
        return example["prompt"]

    def target(self, example: dict[str, Any]) -> str:
        return example["reference"]

    @staticmethod
    def extract_answer(completion: str) -> str | None:
        """The last integer in the text (call on a truncated completion)."""
        found = _INT.findall(completion)
        return found[-1] if found else None

    def score(self, example: dict[str, Any], completion: str) -> float:
        answer = self.extract_answer(self.truncate(completion))
        return float(answer is not None and int(answer) == int(example["answer"]))
