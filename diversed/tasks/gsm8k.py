"""GSM8K (openai/gsm8k, config `main`): grade-school maths word problems, scored by the final number.

A row::

    {"question": "Janet’s ducks lay 16 eggs per day. ... How much in dollars does she make every day
                  at the farmers' market?",
     "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\\nShe makes 9 * 2 =
                $<<9*2=18>>18 every day at the farmer’s market.\\n#### 18"}

The prompt is the paper's zero-shot format `Question: {question}\\n\\nAnswer:`. The predicted answer is
the number after `####` (the official format, and lm-evaluation-harness' strict filter), else the last
number in the completion (its flexible filter). Commas and `$` are dropped and numbers compare by
value, so "1,000", "$1000" and "1000.0" all equal 1000 and "-5" is negative five. Fractions ("3/4"),
number words ("five") and units are not parsed: such completions score 0.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, ClassVar

from diversed.tasks.base import Task

# An optional sign (before or after `$`), digits with thousands commas, an optional decimal part.
# The comma class must end on a digit so that "3, 4 and 5" is three numbers, not "345".
_NUMBER = re.compile(r"(-?)\$?(-?)(\d(?:[\d,]*\d)?(?:\.\d+)?)")


def _value(match: re.Match[str]) -> Decimal:
    value = Decimal(match.group(3).replace(",", ""))
    return -value if (match.group(1) or match.group(2)) else value


def extract_answer(text: str) -> Decimal | None:
    """The number after the first `####`, else the last number in `text`; None if there is none."""
    _, marker, after = text.partition("####")
    if marker and (m := _NUMBER.search(after)):
        return _value(m)
    numbers = list(_NUMBER.finditer(text))
    return _value(numbers[-1]) if numbers else None


def _plain(value: Decimal | None) -> str | None:
    """A number as it is compared: "1000" for 1,000 and 1000.0."""
    return None if value is None else format(value.normalize(), "f")


class GSM8K(Task):
    name: ClassVar[str] = "gsm8k"
    metric: ClassVar[str] = "accuracy"
    # The model starts a new problem after its answer; "\n\nQuestion:" is the usual form, and
    # "Question:" alone also catches a single newline.
    stop = ("\n\nQuestion:", "Question:")
    max_new_tokens = 256

    dataset: ClassVar[str] = "openai/gsm8k"
    dataset_config: ClassVar[str | None] = "main"
    hub_splits: ClassVar[tuple[str, ...]] = ("train", "test")  # no validation split
    fields: ClassVar[tuple[str, ...]] = ("question", "answer")

    def prompt(self, example: dict[str, Any]) -> str:
        return f"Question: {example['question']}\n\nAnswer:"

    def target(self, example: dict[str, Any]) -> str:
        return example["answer"]

    def reference(self, example: dict[str, Any]) -> str:
        return _plain(extract_answer(example["answer"]))

    def extract(self, example: dict[str, Any], completion: str) -> str | None:
        predicted = extract_answer(self.truncate(completion))
        return None if predicted is None else _plain(predicted)

    def score(self, example: dict[str, Any], completion: str) -> float:
        predicted = extract_answer(self.truncate(completion))
        gold = extract_answer(example["answer"])
        return float(predicted is not None and predicted == gold)
