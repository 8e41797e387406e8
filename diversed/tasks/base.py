"""The task interface shared by every dataset: examples, a prompt, a score and a reward.

A task holds a list of examples (dicts with the dataset's own fields) and knows how to turn
one into a prompt, how to cut a raw completion at its stop sequences, and how to score it.
It does not generate text: the runner and the trainer feed `encode()`'s token ids to the
engine and hand the decoded completions back to `score()` / `reward()`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar


class Task:
    """Base class: subclasses set `name`, `stop`, `max_new_tokens` and implement `prompt`/`score`."""

    name: ClassVar[str] = "task"
    metric: ClassVar[str] = "score"  # the headline metric that `score()` returns
    stop: tuple[str, ...] = ()
    max_new_tokens: int = 256

    def __init__(
        self,
        examples: Sequence[dict[str, Any]],
        *,
        chat_template: bool = False,
        max_prompt_tokens: int | None = None,
        max_new_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        few_shot: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.examples = list(examples)
        self.chat_template = chat_template
        self.max_prompt_tokens = max_prompt_tokens
        if max_new_tokens is not None:
            self.max_new_tokens = int(max_new_tokens)
        if stop is not None:
            self.stop = tuple(stop)
        self.few_shot = list(few_shot)

    # ---------------------------------------------------------------- examples

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.examples[i]

    def example_id(self, example: dict[str, Any], index: int) -> str:
        """A stable id for results files: the dataset's own id field where it has one."""
        for key in ("id", "task_id", "example_id"):
            if key in example:
                return str(example[key])
        return str(index)

    # ---------------------------------------------------------------- prompts

    def prompt(self, example: dict[str, Any]) -> str:
        raise NotImplementedError

    def target(self, example: dict[str, Any]) -> str:
        """The reference completion (used for few-shot examples and by the toy trainer)."""
        raise NotImplementedError

    def full_prompt(self, example: dict[str, Any]) -> str:
        """`prompt(example)` preceded by the few-shot examples, each followed by its target."""
        shots = "".join(f"{self.prompt(s)} {self.target(s).strip()}\n\n" for s in self.few_shot)
        return shots + self.prompt(example)

    def encode(self, tokenizer: Any, examples: Sequence[dict[str, Any]]) -> list[list[int]]:
        """Token ids of each example's prompt: chat template if asked, long prompts keep their end."""
        out = []
        for example in examples:
            text = self.full_prompt(example)
            if self.chat_template:
                ids = tokenizer.apply_chat_template(
                    [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
                )
                if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                    ids = ids["input_ids"]
                ids = list(ids)
            else:
                ids = tokenizer(text)["input_ids"]
            if self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
                ids = ids[-self.max_prompt_tokens :]
            out.append(list(ids))
        return out

    # ---------------------------------------------------------------- scoring

    def truncate(self, completion: str) -> str:
        """Cut a raw completion at the first stop sequence."""
        cut = len(completion)
        for s in self.stop:
            i = completion.find(s)
            if i != -1:
                cut = min(cut, i)
        return completion[:cut]

    def score(self, example: dict[str, Any], completion: str) -> float:
        raise NotImplementedError

    def metrics(self, example: dict[str, Any], completion: str) -> dict[str, float]:
        """All metrics of one completion; `metrics()[self.metric] == score()`."""
        return {self.metric: self.score(example, completion)}

    def score_batch(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[float]:
        """Scores of many completions (MBPP overrides this to run programs in parallel)."""
        return [self.score(e, c) for e, c in zip(examples, completions, strict=True)]

    def reward(self, example: dict[str, Any], completion: str) -> float:
        """Training reward: the task's score of the sample."""
        return self.score(example, completion)

    def reward_batch(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[float]:
        return self.score_batch(examples, completions)
