"""The task interface shared by every dataset: examples, a prompt, a score and a reward.

A task holds a list of examples (dicts with the dataset's own fields) and knows how to turn
one into a prompt, how to cut a raw completion at its stop sequences, and how to score it.
It does not generate text: the runner and the trainer feed `encode()`'s token ids to the
engine (with `stopper()`, which ends a row at a stop sequence) and hand the decoded completions
back to `score()` / `reward()`.

`Task.load` reads the examples either from local files (`data_files`: JSONL, JSON or parquet rows
with the dataset's fields, for air-gapped clusters) or from the Hugging Face Hub, and keeps a
seed-stable subset. It never waits on an unreachable Hub: offline, it fails within seconds
and names the config key to set instead.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

import torch

log = logging.getLogger(__name__)

HUB_PROBE_TIMEOUT_S = 3.0  # how long to wait for huggingface.co before calling it unreachable


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
        few_shot: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.examples = list(examples)
        self.chat_template = chat_template
        self.max_prompt_tokens = max_prompt_tokens
        if max_new_tokens is not None:
            self.max_new_tokens = int(max_new_tokens)
        if stop is not None:
            if isinstance(stop, str) or not all(isinstance(x, str) and x for x in stop):
                raise ValueError(
                    f"stop must be a list of non-empty strings, got {stop!r} (quote numbers in overrides: "
                    "task.stop=['\\n\\n','1'])"
                )
            self.stop = tuple(stop)
        self.few_shot = list(few_shot)
        self.source: dict[str, Any] = {}  # where the examples came from; `load` fills it in

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
        rows = load_rows(cls.dataset, hub_config, split, data_files, revision=revision, fields=cls.fields)
        examples = subset(rows, n_examples, seed)
        few_shot: list[dict[str, Any]] = []
        if num_few_shot:
            if data_files is not None and not isinstance(data_files, Mapping):
                raise ValueError(
                    f"{cls.name}: few-shot examples come from the {cls.few_shot_split!r} split, but "
                    f"task.data_files names one split only; give a mapping, e.g. "
                    f"task.data_files={{{split}: ..., {cls.few_shot_split}: ...}}"
                )
            pool = load_rows(
                cls.dataset, hub_config, cls.few_shot_split, data_files, revision=revision, fields=cls.fields
            )
            # A different stream from the subset's, so changing n_examples never changes the shots.
            few_shot = subset(pool, num_few_shot, seed + 1, keep_order=False)
        task = cls(examples, few_shot=few_shot, **options)
        task.source = {
            "dataset": cls.dataset,
            "dataset_config": hub_config,
            "revision": revision,
            "split": split,
            "data_files": _plain(data_files),
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
        shots = "".join(
            self.prompt(s) + self.target_delimiter + self.target(s).strip() + self.fewshot_delimiter
            for s in self.few_shot
        )
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
        """The engine's `stop` callback for this task (None without stop sequences): rows end
        once their text holds a stop sequence, instead of running on to `max_new_tokens`.

        Built once per tokenizer and kept (training asks for it every rollout). With the base
        `truncate` it carries `triggers`, the tokens that can complete a stop sequence, so the
        engine asks it only about rows that produced one; a task that cuts text its own way gets
        no triggers and is asked about every row.
        """
        if not self.stop:
            return None
        cached = getattr(self, "_stopper", None)
        if cached is None or cached.tokenizer is not tokenizer:
            plain = type(self).truncate is Task.truncate
            self._stopper = StopAtText(tokenizer, self.truncate, self.stop, triggers=plain)
        return self._stopper

    def score(self, example: dict[str, Any], completion: str) -> float:
        """Score of one completion (raw or already truncated: tasks cut at `stop` first)."""
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

    def settings(self) -> dict[str, Any]:
        """What the scores depend on, to be recorded next to them in results."""
        return {
            "task": self.name,
            "metric": self.metric,
            "stop": list(self.stop),
            "max_new_tokens": self.max_new_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "chat_template": self.chat_template,
            "num_few_shot": len(self.few_shot),
            **self.source,
        }


# ---------------------------------------------------------------- loading rows


class DatasetUnavailable(RuntimeError):
    """The dataset is neither in local files nor reachable on the Hugging Face Hub."""


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of one local file: JSONL, JSON (a list of rows, or JSONL under a .json name) or parquet."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_rows(
    dataset: str,
    config: str | None,
    split: str,
    data_files: Any = None,
    *,
    revision: str | None = None,
    fields: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Rows of `split`: from `data_files` if given, else from the Hub (failing fast when offline)."""
    if data_files is None:
        return _rows_from_hub(dataset, config, split, revision, fields)
    if isinstance(data_files, Mapping):
        if split not in data_files:
            raise KeyError(f"task.data_files has no {split!r} split (it has {sorted(data_files)})")
        data_files = data_files[split]
    files = [data_files] if isinstance(data_files, str | os.PathLike) else list(data_files)
    return [row for f in files for row in read_rows(f)]


def subset(rows: Sequence[Any], n: int | None, seed: int, *, keep_order: bool = True) -> list[Any]:
    """`n` rows drawn by `seed`: the same seed gives the same rows, and a larger `n` only adds rows.

    Rows keep their dataset order unless `keep_order` is False (then they come in drawn order).
    """
    if n is None or n >= len(rows):
        return list(rows)
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    picked = order[: int(n)]
    return [rows[i] for i in (sorted(picked) if keep_order else picked)]


def hub_offline() -> bool:
    """Whether the environment asks the Hugging Face libraries to stay offline."""
    return any(
        os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
        for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """One TCP connection to the Hub's host (HF_ENDPOINT), so offline machines fail in seconds."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout):
            return True
    except OSError:
        return False


def _rows_from_hub(
    dataset: str, config: str | None, split: str, revision: str | None, fields: Sequence[str]
) -> list[dict[str, Any]]:
    what = f"{dataset!r}" + (f" (config {config!r})" if config else "") + f", split {split!r}"
    hint = (
        f"Point the task at local files instead: task.data_files=<JSONL or parquet file with the "
        f"fields {', '.join(fields) or 'of the dataset'}> (or a mapping such as "
        f"task.data_files={{{split}: ..., train: ...}})"
    )
    if hub_offline():
        import datasets

        # The environment variable is read when `datasets` is imported; if it was set later the
        # library would still try the network (and retry for minutes), so only trust the cache
        # when `datasets` itself agrees it is offline.
        if not datasets.config.HF_HUB_OFFLINE:
            raise DatasetUnavailable(f"cannot load {what}: offline mode is set (HF_HUB_OFFLINE). {hint}.")
        try:
            return datasets.load_dataset(dataset, config, split=split, revision=revision).to_list()
        except Exception as e:
            raise DatasetUnavailable(
                f"cannot load {what}: offline mode is set (HF_HUB_OFFLINE) and it is not in the Hugging "
                f"Face cache. {hint}."
            ) from e
    if not hub_reachable():
        raise DatasetUnavailable(
            f"cannot load {what}: the Hugging Face Hub is not reachable from this machine. {hint}, "
            f"or set HF_HUB_OFFLINE=1 to use a copy already in the Hugging Face cache."
        )
    import datasets

    download = datasets.DownloadConfig(max_retries=1)
    return datasets.load_dataset(
        dataset, config, split=split, revision=revision, download_config=download
    ).to_list()


def _plain(value: Any) -> Any:
    """Paths and Hydra containers as plain JSON-able values, for `Task.source`."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, str | os.PathLike):
        return str(value)
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    return value


def decode_completions(tokenizer: Any, sequences: Any, prompt_len: int, new_tokens: Any) -> list[str]:
    """The text the task scores: each row's first `new_tokens[i]` tokens after the prompt
    (`sequences` [B, prompt + new] and `new_tokens` [B] are tensors), special tokens skipped."""
    rows = [row[prompt_len : prompt_len + n] for row, n in zip(sequences.tolist(), new_tokens.tolist(), strict=True)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


class StopAtText:
    """Stops a generation where `truncate` would cut its text: called with a row's new tokens so
    far (and how many of them are new since the last call), returns None while
    `truncate(text) == text`, else the fewest tokens whose text already holds the stop sequence
    (found by bisection: about log2(length) decodes, once per row).

    Each call first decodes only the new tokens and a margin before them (4 tokens per character
    of the longest stop sequence, enough for byte-level tokens): a stop sequence completed by them
    lies in that tail, so the whole text is decoded only when the tail holds one.

    With `triggers=True` (valid when `truncate` cuts at the first of `stop`, as `Task.truncate`
    does) it also holds `triggers`, a bool mask over the tokenizer's ids from `stop_triggers`:
    a text can only come to hold a stop sequence with one of those tokens, so callers skip the
    call for rows whose new tokens hold none (the engine checks the round's tokens on the host
    with array ops, `evaluate`'s `generate` baseline the newest token on the device).

    The completion the task scores is the same as without stopping (it is cut at the same place),
    as long as decoding a prefix gives a prefix of the text; the tokens after the stop are never
    generated. Text is decoded as `decode_completions` does (special tokens skipped).
    """

    def __init__(
        self, tokenizer: Any, truncate: Callable[[str], str], stop: Sequence[str], *, triggers: bool = False
    ) -> None:
        self.tokenizer, self.truncate, self.stop = tokenizer, truncate, tuple(stop)
        self.margin = 4 * max(len(s) for s in self.stop) + 4
        self.triggers = None
        if triggers:
            try:
                self.triggers = stop_triggers(tokenizer, self.stop)
            except Exception as e:  # a tokenizer that cannot decode every id alone: ask every row
                log.warning("stop triggers unavailable (%s: %s); every row is checked each round",
                            type(e).__name__, e)  # fmt: skip

    def _stopped(self, tokens: Sequence[int]) -> bool:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return len(self.truncate(text)) < len(text)

    def __call__(self, tokens: Sequence[int], new: int | None = None) -> int | None:
        if new is not None:
            tail = self.tokenizer.decode(tokens[-(new + self.margin) :], skip_special_tokens=True)
            if not any(s in tail for s in self.stop):
                return None
        if not self._stopped(tokens):
            return None
        lo, hi = 0, len(tokens)  # tokens[:lo] has not stopped, tokens[:hi] has
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self._stopped(tokens[:mid]) else (mid, hi)
        return hi


def stop_triggers(tokenizer: Any, stop: Sequence[str]) -> torch.Tensor:
    """Bool mask over `tokenizer`'s ids: True where appending the token can make a text hold one
    of `stop` that it did not hold before. (Every id decoded twice: 0.4–0.6 s for 32k ids, fast tokenizer.)

    A new occurrence ends in the appended token's text, so that text either contains the whole
    stop sequence or starts with a suffix of it (`s[-j:]`, j >= 1). The token's text is read as
    it decodes after an ordinary token ("a" + token, minus "a", which keeps the leading space
    SentencePiece drops at the start of a text) and alone; a token whose text is not a clean
    append (incomplete UTF-8 bytes decode to U+FFFD, a decode that rewrites the "a") counts as a
    trigger, and so does a suffix after leading spaces (decoders that clean up spaces before
    punctuation). Tokens that decode to nothing (special tokens, skipped as in `_stopped`) leave
    the text as it was and are not triggers. Anything unsure is True: a False must be certain.
    """
    n = len(tokenizer)
    anchor = list(tokenizer.encode("a", add_special_tokens=False))[-1:]
    base = tokenizer.decode(anchor, skip_special_tokens=True)
    after = tokenizer.batch_decode([anchor + [t] for t in range(n)], skip_special_tokens=True)
    alone = tokenizer.batch_decode([[t] for t in range(n)], skip_special_tokens=True)
    suffixes = tuple({s[-j:] for s in stop for j in range(1, len(s) + 1)})

    def can_complete(text: str) -> bool:
        if "\ufffd" in text or any(s in text for s in stop):
            return True
        return text.startswith(suffixes) or text.lstrip(" ").startswith(suffixes)

    mask = [
        not a.startswith(base) or can_complete(a[len(base) :]) or can_complete(b)
        for a, b in zip(after, alone, strict=True)
    ]
    return torch.tensor(mask, dtype=torch.bool)
