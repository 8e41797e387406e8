"""The task interface shared by every dataset: examples, a prompt, a score and a reward.

A task holds a list of examples (dicts with the dataset's own fields) and knows how to turn
one into a prompt, how to cut a raw completion at its stop sequences, and how to score it.
It does not generate text: the runner and the trainer feed `encode()`'s token ids to the
engine (with `stopper()`, which ends a row at a stop sequence) and hand the decoded completions
back to `checked_metrics()` (each completion scored once, every metric) / `reward()`.

A task owns its options: the settings it takes beyond the shared ones (`Task.__init__`'s and
`Task.load`'s), each declared once in the class's `options` as an `Option` (default, type, help,
whether the scores depend on it). From that declaration alone the config's `task.<name>` keys are
known (`tasks.option_names`), their values are checked before anything loads (`tasks/settings.py`, and
again here for callers that build a task directly), the task gets the checked value as an
attribute, and `settings()` reports the recorded ones, which evaluate writes into the records
(`option_settings()`). A subclass inherits its parents' options and may add or redeclare some; a
constructor or `load` parameter that is neither shared nor declared is refused when the class is
defined.

`Task.load` reads the examples through `tasks/data.py` (local files or the Hugging Face Hub, a
seed-stable subset); stopping at a stop sequence is `diversed/decoding/stopping.py`'s. An example
whose prompt is empty (no text of its own: `empty_prompts`) is a dataset row, not a setting: the
first encoding warns once, naming each, and the run goes on (each is decoded from the template or
the start token alone); a prompt of no token at all cannot be decoded and is refused there.
"""

from __future__ import annotations

import functools
import inspect
import logging
import numbers
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from diversed.decoding.stopping import StopAtText
from diversed.errors import ConfigError
from diversed.tasks.data import (
    DataFileError,
    as_plain,
    check_fields,
    load_rows,
    skipped,
    subset,
    subset_indices,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Option:
    """One setting a task takes beyond the shared ones: `task.<name>` in its config, a keyword of
    `load_task`, an attribute of the built task.

    `type` is what the value must be, as pydantic reads an annotation (`bool`, `float`,
    `Literal["lines", "list"]`, `Annotated[int, annotated_types.Ge(0)] | None`): the schema checks
    a config's value against it before anything loads, and the task gets the checked value. `help`
    says what it does (shown with a bad value). `recorded`: the scores depend on it, so `settings()`
    reports it (results' fingerprints and records); False for how a task runs, not what it scores
    (e.g. MBPP's worker count)."""

    default: Any = None
    type: Any = Any
    help: str = ""
    recorded: bool = True

    def check(self, task: str, name: str, value: Any) -> Any:
        """`value` as `type` reads it (pydantic's lax mode: 10 is 10.0 for a float); ConfigError
        naming the option, the value and what it takes."""
        from pydantic import TypeAdapter, ValidationError

        try:
            return TypeAdapter(self.type).validate_python(value)
        except ValidationError as e:
            why = "; ".join(err["msg"] for err in e.errors())
            raise ConfigError(
                f"{task}: {name}={value!r}: {why}" + (f" ({self.help})" if self.help else "")
            ) from None


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
    # the Hub dataset's splits (another is refused offline); (): unknown
    hub_splits: ClassVar[tuple[str, ...]] = ()
    default_split: ClassVar[str] = "test"
    few_shot_split: ClassVar[str] = "train"
    # How few-shot examples are joined: prompt + target_delimiter + target + fewshot_delimiter.
    target_delimiter: ClassVar[str] = " "
    fewshot_delimiter: ClassVar[str] = "\n\n"

    # The task's own settings (`Option`); a subclass's `options` holds what it adds or redeclares,
    # and after the class is defined the attribute holds every option the task takes, its parents' too.
    options: ClassVar[Mapping[str, Option]] = {
        "stop_early": Option(
            True,
            bool,
            "false: rows run to EOS or max_new_tokens; the stop sequences only cut the scored text",
        ),
    }
    stop_early: bool  # (an option: set by the constructor)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Merge the parents' options under the class's own, and refuse a constructor or `load`
        keyword that is neither shared nor declared (it would be unchecked and unrecorded)."""
        super().__init_subclass__(**kwargs)
        merged: dict[str, Option] = {}
        for base in reversed(cls.__bases__):
            merged.update(getattr(base, "options", {}))
        merged.update(cls.__dict__.get("options", {}))
        clash = sorted(set(merged) & shared_parameters())
        if clash:
            raise TypeError(
                f"{cls.__name__}.options redeclares {clash}, which every task takes "
                "(Task.__init__, Task.load)"
            )
        cls.options = merged
        for method in ("__init__", "load"):
            function = cls.__dict__.get(method)
            function = getattr(function, "__func__", function)
            if function is None:
                continue
            undeclared = sorted(_keywords(function) - shared_parameters() - set(merged))
            if undeclared:
                raise TypeError(
                    f"{cls.__name__}.{method} takes {undeclared}, which {cls.__name__}.options does not "
                    "declare: add each as an Option(default, type, help) there, so that configs, the "
                    "schema and settings() know it"
                )

    def __init__(
        self,
        examples: Sequence[dict[str, Any]],
        *,
        chat_template: bool | str = "auto",
        max_prompt_tokens: int | None = None,
        max_new_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        few_shot: Sequence[dict[str, Any]] = (),
        **options: Any,
    ) -> None:
        """The shared settings by name; `options` are the task's own (`options`), each checked."""
        for name, value in self.check_options(options).items():
            setattr(self, name, value)
        self.examples = list(examples)
        if chat_template not in (True, False, "auto"):
            raise ConfigError(
                f"chat_template={chat_template!r}: give true, false or auto (the tokenizer's template "
                "where it has one)"
            )
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
        skip_examples: int = 0,
        num_few_shot: int = 0,
        hub_config: str | None = None,
        revision: str | None = None,
        **options: Any,
    ) -> Task:
        """Examples of `split` (local `data_files` or the Hub), a seed-stable subset of `n_examples`
        (after the draw's first `skip_examples`: rows none of `n_examples=skip_examples` holds), and
        `num_few_shot` examples drawn from the train split; other options go to the constructor.

        `data_files` is a path, a list of paths (one split), or a mapping split -> path(s).
        `hub_config` and `revision` override the class's Hub config name and git revision. The
        task's own options are checked before anything is read.
        """
        cls.check_options({k: v for k, v in options.items() if k not in shared_parameters()})
        split = split or cls.default_split
        hub_config = hub_config or cls.dataset_config
        revision = revision or cls.revision
        rows = load_rows(
            cls.dataset,
            hub_config,
            split,
            data_files,
            revision=revision,
            fields=cls.fields,
            hub_splits=cls.hub_splits,
        )
        where = (
            f"task.data_files ({as_plain(data_files)}), split {split!r}"
            if data_files
            else f"{cls.dataset} {split!r}"
        )
        if not rows:
            raise DataFileError(f"{cls.name}: {where} has no rows; give a file with the dataset's rows")
        check_fields(rows, cls.missing_fields, cls.needed_fields(), where)
        indices = subset_indices(len(rows), n_examples, seed, skip=skip_examples)
        examples = [rows[i] for i in indices]
        few_shot = cls._few_shot(num_few_shot, seed, split, data_files, hub_config, revision)
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
            **skipped(skip_examples),
        }
        return task

    @classmethod
    def _few_shot(
        cls, n: int, seed: int, split: str, data_files: Any, hub_config, revision
    ) -> list[dict[str, Any]]:
        """`n` examples of the few-shot split (none for `n` = 0), drawn with their own seed."""
        if not n:
            return []
        if data_files is not None and not isinstance(data_files, Mapping):
            raise ConfigError(
                f"{cls.name}: few-shot examples come from the {cls.few_shot_split!r} split, but "
                f"task.data_files names one split only; give a mapping, e.g. "
                f"task.data_files={{{split}: ..., {cls.few_shot_split}: ...}}"
            )
        pool = load_rows(
            cls.dataset,
            hub_config,
            cls.few_shot_split,
            data_files,
            revision=revision,
            fields=cls.fields,
            hub_splits=cls.hub_splits,
        )
        # A different stream from the subset's, so changing n_examples never changes the shots.
        return subset(pool, n, seed + 1, keep_order=False)

    @classmethod
    def check_options(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every option of the task (`options`): its value in `given`, checked (`Option.check`), else
        its default. ConfigError for a name the task does not take."""
        unknown = sorted(set(given) - set(cls.options))
        if unknown:
            raise ConfigError(
                f"{cls.name} takes no option {', '.join(unknown)}; its own options are "
                f"{', '.join(cls.options)}, besides those every task takes "
                f"({', '.join(sorted(shared_parameters()))})"
            )
        return {
            name: option.check(cls.name, name, given[name]) if name in given else option.default
            for name, option in cls.options.items()
        }

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

    # The example field a too-long prompt shortens (the document of a summary): it loses that field's
    # end, so the instruction, the document's start and the answer cue stay. None: no such field, and a
    # too-long prompt keeps its end (the instruction at its start is lost; said in a warning).
    cut_field: ClassVar[str | None] = None

    def resolve_chat_template(self, tokenizer: Any) -> bool:
        """Whether prompts go through the tokenizer's chat template, `chat_template="auto"` settled
        for `tokenizer` (yes where it has a template: an instruct model answers its own format, and
        fed a raw completion prompt often ends at once). Settled once, so `settings()` records the
        choice; evaluate and train settle it from the pair's tokenizer before fingerprinting."""
        if self.chat_template == "auto":
            self.chat_template = bool(getattr(tokenizer, "chat_template", None))
        return bool(self.chat_template)

    def encode(self, tokenizer: Any, examples: Sequence[dict[str, Any]]) -> list[list[int]]:
        """Token ids of each example's prompt, through the chat template if it is used, each at most
        `max_prompt_tokens` long (`encode_cut`)."""
        return self.encode_cut(tokenizer, examples)[0]

    def _prompt_ids(self, tokenizer: Any, example: dict[str, Any]) -> list[int]:
        text = self.full_prompt(example)
        if self.resolve_chat_template(tokenizer):
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return list(ids)
        return list(tokenizer(text)["input_ids"])

    def _fit(self, tokenizer: Any, example: dict[str, Any], ids: list[int]) -> tuple[list[int], int, bool]:
        """`ids` shortened to `max_prompt_tokens`: the end of `cut_field`'s text cut off (the prompt
        built again around the shorter text, until it fits), else the prompt's start. (ids, tokens
        lost, whether the instruction was kept)."""
        limit = self.max_prompt_tokens
        field = self.cut_field
        if field and isinstance(example.get(field), str):
            doc = tokenizer(example[field], add_special_tokens=False)["input_ids"]
            keep = len(doc) - (len(ids) - limit)
            for _ in range(16):  # a shorter text can tokenize differently at its edge: measure, cut again
                if keep <= 0:
                    break
                fitted = self._prompt_ids(tokenizer, {**example, field: tokenizer.decode(doc[:keep])})
                if len(fitted) <= limit:
                    return fitted, len(ids) - len(fitted), True
                keep -= len(fitted) - limit
        return ids[len(ids) - limit :], len(ids) - limit, False

    def empty_prompts(self, tokenizer: Any) -> list[int]:
        """The positions of the examples whose prompt has no text of its own: `prompt(example)` (the
        few-shot examples before it aside) is empty or blank, tokenizes to no token before a chat
        template or start token is added, or is the task's template alone (the same words as with
        the example's text fields emptied: a GSM8K row with a blank question)."""
        texts = [self.prompt(e) for e in self.examples]
        kept = [j for j, text in enumerate(texts) if text.strip()]
        ids = tokenizer([texts[j] for j in kept], add_special_tokens=False)["input_ids"] if kept else []
        tokens = dict(zip(kept, ids, strict=True))
        return [
            j
            for j, (example, text) in enumerate(zip(self.examples, texts, strict=True))
            if not tokens.get(j) or self._template_only(example, text)
        ]

    def _template_only(self, example: dict[str, Any], text: str) -> bool:
        blank = {k: "" if isinstance(v, str) else v for k, v in example.items()}
        try:
            template = self.prompt(blank)
        except Exception:  # a prompt that cannot be built from empty fields: the example's text is there
            return False
        return text.split() == template.split()

    def _say_empty(self, tokenizer: Any) -> None:
        """Warn once per task, naming them, of the examples whose prompt is empty (`empty_prompts`):
        each is decoded from the template or the start token alone."""
        if getattr(self, "_empty_said", False):
            return
        self._empty_said = True
        empty = self.empty_prompts(tokenizer)
        if empty:
            ids = [self.example_id(self.examples[j], j) for j in empty]
            more = f" and {len(ids) - 10} more" if len(ids) > 10 else ""
            log.warning(
                f"{self.name}: {len(empty)} of {len(self)} prompts are empty (examples "
                f"{', '.join(ids[:10])}{more}): none holds any text of its example, so each is decoded "
                "from the template or the start token alone and its score says nothing of the task. "
                "Fix or remove those rows of the data (task.data_files)"
            )

    def encode_cut(
        self, tokenizer: Any, examples: Sequence[dict[str, Any]]
    ) -> tuple[list[list[int]], list[int]]:
        """`encode`'s ids and how many tokens each prompt lost to `max_prompt_tokens`. A prompt too
        long loses the end of its document (`cut_field`), or, for a task without one (or a document
        that cannot shrink enough), its start. A task that cuts prompts says so once (a warning with
        the count, the longest length and what was lost). The first call warns of the task's empty
        prompts (`empty_prompts`, one warning naming them: each is decoded from the template or the
        start token alone), and a prompt of no token at all (no template, no start token) is a
        DataFileError naming its example: there is nothing to decode from."""
        out, cut, lost_start = [], [], 0
        for example in examples:
            ids = self._prompt_ids(tokenizer, example)
            n = 0
            if self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
                ids, n, kept = self._fit(tokenizer, example, ids)
                lost_start += not kept
            out.append(ids)
            cut.append(n)
        if none := [j for j, ids in enumerate(out) if not ids]:
            position = {id(e): i for i, e in enumerate(self.examples)}
            named = [self.example_id(examples[j], position.get(id(examples[j]), j)) for j in none]
            raise DataFileError(
                f"{self.name}: the prompts of examples {', '.join(named)} have no token at all (no text, "
                "no chat template, and a tokenizer that adds no start token): there is nothing to decode "
                "from. Fix or remove those rows of the data (task.data_files)"
            )
        self._say_empty(tokenizer)
        if any(cut) and not getattr(self, "_cut_said", False):
            self._cut_said = True
            longest = max(len(ids) + n for ids, n in zip(out, cut, strict=True))
            what = (
                f"lose the end of their {self.cut_field}"
                + (f" ({lost_start} lose their start: the rest alone is too long)" if lost_start else "")
                if self.cut_field
                else "lose their start (the instruction with it)"
            )
            log.warning(
                f"{self.name}: {sum(1 for n in cut if n)} of {len(cut)} prompts are longer than "
                f"task.max_prompt_tokens={self.max_prompt_tokens} (the longest has {longest} tokens) "
                f"and {what}; the results' rows hold the text the model saw. "
                "Raise task.max_prompt_tokens (or null) to keep prompts whole"
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
        """All metrics of one completion; `metrics()[self.metric] == score()`. A task with several
        (ROUGE-1/2/L) overrides this, computes them all at once, and derives `score` from it."""
        return {self.metric: self.score(example, completion)}

    def score_batch(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[float]:
        """Scores of many completions (MBPP overrides this to run programs in parallel)."""
        return [self.score(e, c) for e, c in zip(examples, completions, strict=True)]

    def metrics_batch(
        self, examples: Sequence[dict[str, Any]], completions: Sequence[str]
    ) -> list[dict[str, float]]:
        """Every metric of many completions, each completion scored once: `metrics()` per completion
        for a task with its own metrics, else `score_batch` (which a task may run in parallel)."""
        if type(self).metrics is Task.metrics:
            return [{self.metric: s} for s in self.score_batch(examples, completions)]
        return [self.metrics(e, c) for e, c in zip(examples, completions, strict=True)]

    def checked_metrics(
        self, examples: Sequence[dict[str, Any]], completions: Sequence[str]
    ) -> list[dict[str, float]]:
        """`metrics_batch`, refused unless each completion has its headline `metric` and it is a number
        in [0, 1] (`score`): a task's bug stops the sweep at its first batch, before records the
        readers would skip are written."""
        found = self.metrics_batch(examples, completions)
        for i, m in enumerate(found):
            s = m.get(self.metric) if isinstance(m, Mapping) else None
            if isinstance(s, bool) or not isinstance(s, numbers.Real) or not 0.0 <= s <= 1.0:  # NaN fails too
                raise ValueError(
                    f"task {self.name!r} scored a completion {s!r} (metric {self.metric!r}, example "
                    f"{examples[i]!r:.200}): a score must be a number in [0, 1], a fraction; fix its "
                    "score() (or metrics(), which must hold the metric)"
                )
        return found

    def reward(self, example: dict[str, Any], completion: str) -> float:
        """Training reward: the task's score of the sample."""
        return self.score(example, completion)

    def reward_batch(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[float]:
        return self.score_batch(examples, completions)

    def option_settings(self) -> dict[str, Any]:
        """The task's recorded options (`Option.recorded`) and their values: the part of `settings()`
        its options make, which evaluate also writes into each record."""
        return {name: getattr(self, name) for name, option in self.options.items() if option.recorded}

    def settings(self) -> dict[str, Any]:
        """What the scores depend on, to be recorded next to them in results: the shared settings, the
        recorded options (`option_settings`) and where the examples came from."""
        return {
            "task": self.name,
            "metric": self.metric,
            "stop": list(self.stop),
            "max_new_tokens": self.max_new_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "chat_template": self.chat_template,
            "num_few_shot": len(self.few_shot),
            **self.option_settings(),
            **self.source,
        }


def _keywords(function: Any) -> set[str]:
    """The named keyword parameters of `function` (not self, cls, examples or **rest)."""
    params = inspect.signature(function).parameters.values()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {
        "self",
        "cls",
        "examples",
    }


@functools.cache
def shared_parameters() -> frozenset[str]:
    """What every task takes by name, besides its own options: `Task.load`'s keywords and the shared
    ones of `Task.__init__` (`few_shot` is `load`'s to give, not a setting)."""
    return frozenset((_keywords(Task.load.__func__) | _keywords(Task.__init__)) - {"few_shot"})
