"""The task interface shared by every dataset: examples, a prompt, a score and a reward.

A task holds a list of examples (dicts with the dataset's own fields) and knows how to turn
one into a prompt, how to cut a raw completion at its stop sequences, and how to score it.
It does not generate text: the runner and the trainer feed `encode()`'s token ids to the
engine (with `stopper()`, which ends a row at a stop sequence) and hand the decoded completions
back to `score()` / `reward()`.

`Task.load` reads the examples through `tasks/data.py` (local files or the Hugging Face Hub, a
seed-stable subset); stopping at a stop sequence is `diversed/stopping.py`'s.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from diversed.errors import ConfigError
from diversed.stopping import StopAtText
from diversed.tasks.data import DataFileError, as_plain, check_fields, load_rows, subset, subset_indices

log = logging.getLogger(__name__)


class Task:
    """Base class: subclasses set `name`, `stop`, `max_new_tokens` and implement `prompt`/`score`."""

    name: ClassVar[str] = "task"
    metric: ClassVar[str] = "score"  # the headline metric that `score()` returns
    stop: tuple[str, ...] = ()
    max_new_tokens: int = 256

    # Where `load` finds the rows: a Hub dataset (path, config, revision) and the fields a row has.
    dataset: ClassVar[str] = ""
    dataset_config: ClassVar[str | None] = None
    revision: ClassVar[str | None] = None
    fields: ClassVar[tuple[str, ...]] = ()
    required_fields: ClassVar[tuple[str, ...] | None] = None  # what scoring needs (default: `fields`)
    hub_splits: ClassVar[tuple[str, ...]] = ()  # the Hub dataset's splits (another is refused offline); (): unknown
    default_split: ClassVar[str] = "test"
    few_shot_split: ClassVar[str] = "train"
    # How few-shot examples are joined: prompt + target_delimiter + target + fewshot_delimiter.
    target_delimiter: ClassVar[str] = " "
    fewshot_delimiter: ClassVar[str] = "\n\n"

    def __init__(
        self,
        examples: Sequence[dict[str, Any]],
        *,
        chat_template: bool = False,
        max_prompt_tokens: int | None = None,
        max_new_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        stop_early: bool = True,
        few_shot: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.examples = list(examples)
        self.chat_template = chat_template
        self.max_prompt_tokens = max_prompt_tokens
        if max_new_tokens is not None:
            self.max_new_tokens = int(max_new_tokens)
        if stop is not None:
            if isinstance(stop, str) or not all(isinstance(x, str) and x for x in stop):
                raise ConfigError(
                    f"stop must be a list of non-empty strings, got {stop!r} (quote numbers in overrides: "
                    "task.stop=['\\n\\n','1'])"
                )
            self.stop = tuple(stop)
        self.stop_early = bool(stop_early)
        self.few_shot = list(few_shot)
        self.source: dict[str, Any] = {}  # where the examples came from; `load` fills it in
        self.indices: list[int] = list(range(len(self.examples)))  # each example's row in its split

    @classmethod
    def load(
        cls,
        *,
        split: str | None = None,
        data_files: Any = None,
        n_examples: int | None = None,
        seed: int = 0,
        num_few_shot: int = 0,
        hub_config: str | None = None,
        revision: str | None = None,
        **options: Any,
    ) -> Task:
        """Examples of `split` (local `data_files` or the Hub), a seed-stable subset of `n_examples`,
        and `num_few_shot` examples drawn from the train split; other options go to the constructor.

        `data_files` is a path, a list of paths (one split), or a mapping split -> path(s).
        `hub_config` and `revision` override the class's Hub config name and git revision.
        """
        split = split or cls.default_split
        hub_config = hub_config or cls.dataset_config
        revision = revision or cls.revision
        rows = load_rows(cls.dataset, hub_config, split, data_files, revision=revision, fields=cls.fields,
                         hub_splits=cls.hub_splits)  # fmt: skip
        where = f"task.data_files ({as_plain(data_files)}), split {split!r}" if data_files else f"{cls.dataset} {split!r}"
        if not rows:
            raise DataFileError(f"{cls.name}: {where} has no rows; give a file with the dataset's rows")
        check_fields(rows, cls.missing_fields, cls.needed_fields(), where)
        indices = subset_indices(len(rows), n_examples, seed)
        examples = [rows[i] for i in indices]
        few_shot: list[dict[str, Any]] = []
        if num_few_shot:
            if data_files is not None and not isinstance(data_files, Mapping):
                raise ConfigError(
                    f"{cls.name}: few-shot examples come from the {cls.few_shot_split!r} split, but "
                    f"task.data_files names one split only; give a mapping, e.g. "
                    f"task.data_files={{{split}: ..., {cls.few_shot_split}: ...}}"
                )
            pool = load_rows(cls.dataset, hub_config, cls.few_shot_split, data_files, revision=revision,
                             fields=cls.fields, hub_splits=cls.hub_splits)  # fmt: skip
            # A different stream from the subset's, so changing n_examples never changes the shots.
            few_shot = subset(pool, num_few_shot, seed + 1, keep_order=False)
        task = cls(examples, few_shot=few_shot, **options)
        task.indices = indices
        task.source = {
            "dataset": cls.dataset,
            "dataset_config": hub_config,
            "revision": revision,
            "split": split,
            "data_files": as_plain(data_files),
            "n_examples": n_examples,
            "seed": seed,
        }
        return task

    # ---------------------------------------------------------------- examples

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.examples[i]

    def select(self, positions: Sequence[int], note: str) -> Task:
        """A copy holding only the examples at `positions` (their rows in the split kept); `note`
        says what the selection is, in `source`."""
        import copy

        task = copy.copy(self)
        task.examples = [self.examples[i] for i in positions]
        task.indices = [self.indices[i] for i in positions]
        task.source = {**self.source, "selection": note, "n_examples": len(positions)}
        return task

    def example_id(self, example: dict[str, Any], index: int) -> str:
        """A stable id for results files: the dataset's own id field where it has one, else the
        example's row number in its split (`index` is its place among the loaded examples)."""
        for key in ("id", "task_id", "example_id"):
            if key in example:
                return str(example[key])
        return str(self.indices[index]) if index < len(self.indices) else str(index)

    @classmethod
    def missing_fields(cls, row: dict[str, Any]) -> list[str]:
        """The fields this task needs that `row` lacks (tasks with several schemas override it)."""
        needed = cls.fields if cls.required_fields is None else cls.required_fields
        return [f for f in needed if f not in row]

    @classmethod
    def needed_fields(cls) -> str:
        return ", ".join(cls.fields if cls.required_fields is None else cls.required_fields)

    # ---------------------------------------------------------------- prompts

    def prompt(self, example: dict[str, Any]) -> str:
        raise NotImplementedError

    def target(self, example: dict[str, Any]) -> str:
        """The reference completion (used for few-shot examples and by the toy trainer)."""
        raise NotImplementedError

    def full_prompt(self, example: dict[str, Any]) -> str:
        """`prompt(example)` preceded by the few-shot examples, each followed by its target."""
        shots = "".join(
            self.prompt(s) + self.target_delimiter + self.target(s).strip() + self.fewshot_delimiter
            for s in self.few_shot
        )
        return shots + self.prompt(example)

    def encode(self, tokenizer: Any, examples: Sequence[dict[str, Any]]) -> list[list[int]]:
        """Token ids of each example's prompt: chat template if asked, long prompts keep their end."""
        return self.encode_cut(tokenizer, examples)[0]

    def encode_cut(self, tokenizer: Any, examples: Sequence[dict[str, Any]]) -> tuple[list[list[int]], list[int]]:
        """`encode`'s ids and how many tokens each prompt lost to `max_prompt_tokens` (its start). A
        task that cuts prompts says so once (a warning with the count and the longest length)."""
        out, cut = [], []
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
            cut.append(max(0, len(ids) - self.max_prompt_tokens) if self.max_prompt_tokens is not None else 0)
            out.append(list(ids[cut[-1] :]))
        if any(cut) and not getattr(self, "_cut_said", False):
            self._cut_said = True
            longest = max(len(ids) + n for ids, n in zip(out, cut, strict=True))
            log.warning(
                f"{self.name}: {sum(1 for n in cut if n)} of {len(cut)} prompts are longer than task.max_prompt_tokens="
                f"{self.max_prompt_tokens} (the longest has {longest} tokens) and lose their start; the results' rows "
                "hold the text the model saw. Raise task.max_prompt_tokens (or null) to keep prompts whole"
            )
        return out, cut

    # ---------------------------------------------------------------- scoring

    def truncate(self, completion: str) -> str:
        """Cut a raw completion at the first stop sequence after its leading whitespace.

        A model that opens with the separator (e.g. "\n\nThe article says...") has not stopped:
        searching from the first non-space character keeps that answer.
        """
        cut = len(completion)
        start = len(completion) - len(completion.lstrip())
        for s in self.stop:
            i = completion.find(s, start)
            if i != -1:
                cut = min(cut, i)
        return completion[:cut]

    def stopper(self, tokenizer: Any) -> StopAtText | None:
        """The engine's `stop` callback for this task: rows end once their text holds a stop
        sequence, instead of running on to `max_new_tokens`. None without stop sequences, or with
        `stop_early=False`: rows then run to EOS or the token limit (the released evaluation's
        protocol) and the stop sequences only cut the text that is scored.

        Built once per tokenizer and kept (training asks for it every rollout). With the base
        `truncate` it carries `triggers`, the tokens that can complete a stop sequence, so the
        engine asks it only about rows that produced one; a task that cuts text its own way gets
        no triggers and is asked about every row.
        """
        if not self.stop or not self.stop_early:
            return None
        cached = getattr(self, "_stopper", None)
        if cached is None or cached.tokenizer is not tokenizer:
            plain = type(self).truncate is Task.truncate
            self._stopper = StopAtText(tokenizer, self.truncate, self.stop, triggers=plain)
        return self._stopper

    def score(self, example: dict[str, Any], completion: str) -> float:
        """Score of one completion (raw or already truncated: tasks cut at `stop` first), a fraction in
        [0, 1] (accuracy, pass@1, an F-measure): intervals, reports (×100) and readers assume it."""
        raise NotImplementedError

    def reference(self, example: dict[str, Any]) -> str:
        """The reference shown beside a completion (results rows, `diversed.show`)."""
        return self.target(example)

    def extract(self, example: dict[str, Any], completion: str) -> Any:
        """What `score` judges in a completion (the number, the program, the summary), as JSON."""
        return self.truncate(completion)

    def metrics(self, example: dict[str, Any], completion: str) -> dict[str, float]:
        """All metrics of one completion; `metrics()[self.metric] == score()`."""
        return {self.metric: self.score(example, completion)}

    def score_batch(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[float]:
        """Scores of many completions (MBPP overrides this to run programs in parallel)."""
        return [self.score(e, c) for e, c in zip(examples, completions, strict=True)]

    def checked_scores(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[float]:
        """`score_batch`, refused unless every score is a number in [0, 1] (`score`): a task's bug stops
        the sweep at its first batch, before records the readers would skip are written."""
        scores = self.score_batch(examples, completions)
        for i, s in enumerate(scores):
            if isinstance(s, bool) or not isinstance(s, numbers.Real) or not 0.0 <= s <= 1.0:  # NaN fails too
                raise ValueError(f"task {self.name!r} scored a completion {s!r} (metric {self.metric!r}, example "
                                 f"{examples[i]!r:.200}): a score must be a number in [0, 1], a fraction; fix its score()")
        return scores

    def reward(self, example: dict[str, Any], completion: str) -> float:
        """Training reward: the task's score of the sample."""
        return self.score(example, completion)

    def reward_batch(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[float]:
        return self.score_batch(examples, completions)

    def settings(self) -> dict[str, Any]:
        """What the scores depend on, to be recorded next to them in results."""
        return {
            "task": self.name,
            "metric": self.metric,
            "stop": list(self.stop),
            "stop_early": self.stop_early,
            "max_new_tokens": self.max_new_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "chat_template": self.chat_template,
            "num_few_shot": len(self.few_shot),
            **self.source,
        }
