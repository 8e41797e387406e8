"""Where a task's examples come from: local files or the Hugging Face Hub, and a seed-stable subset.

`load_rows` reads a split either from local files (`data_files`: JSONL, JSON or parquet rows with
the dataset's fields, for air-gapped clusters) or from the Hub through `datasets`. It never waits on
an unreachable Hub: offline (`diversed.models.hub`'s rule and probe), it fails within seconds and names the
config key to set instead; a split the Hub dataset does not have (a task's `hub_splits`, e.g.
GSM8K's validation) is refused before the network is tried. `subset` keeps a seed-stable part of the
rows.

It knows nothing about prompts, scores or any particular dataset (the tasks do).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from diversed.errors import ConfigError, UserError
from diversed.models import hub


class DatasetUnavailable(UserError, RuntimeError):
    """The dataset is neither in local files nor reachable on the Hugging Face Hub."""


class DataFileError(UserError, ValueError):
    """A local data file is missing or unreadable; the message names the file (and line) and the fix."""


class MissingSplit(DataFileError, KeyError):
    """`task.data_files` is a mapping without the split asked for."""

    def __str__(self) -> str:  # not KeyError's quoted repr
        return str(self.args[0])


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of one local file: JSONL, JSON (a list of rows, or JSONL under a .json name) or parquet.
    A missing file, a line that is not JSON, or a row that is not an object is a DataFileError
    naming the file and the line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataFileError(
            f"task.data_files: {path} does not exist (or is not a file); point task.data_files at "
            "a JSONL, JSON or parquet file of the dataset's rows"
        )
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:
            raise DataFileError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(f"{path}: not UTF-8 text at byte {e.start}; save it as UTF-8 JSONL") from None
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{path}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
        lines = [None] * len(rows)
    else:
        rows, lines = [], []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DataFileError(
                    f"{path}:{number}: not a JSON row ({e.msg}, column {e.colno}); each line of a "
                    "JSONL file is one JSON object"
                ) from None
            lines.append(number)
    for row, number in zip(rows, lines, strict=True):
        if not isinstance(row, dict):
            where = f"{path}:{number}" if number else f"{path}"
            raise DataFileError(
                f"{where}: a row must be a JSON object with the dataset's fields, got {type(row).__name__}"
            )
    return rows


def check_fields(rows: Sequence[dict[str, Any]], missing: Any, needed: str, where: str) -> None:
    """DataFileError at the first row for which `missing(row)` names fields, with the fields it has."""
    for i, row in enumerate(rows):
        gone = missing(row)
        if gone:
            raise DataFileError(
                f"{where}: row {i + 1} lacks {sorted(gone)} (it has {sorted(row)}); "
                f"this task needs the fields {needed}"
            )


def load_rows(
    dataset: str,
    config: str | None,
    split: str,
    data_files: Any = None,
    *,
    revision: str | None = None,
    fields: Sequence[str] = (),
    hub_splits: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Rows of `split`: from `data_files` if given, else from the Hub (failing fast when offline). A
    split that is not one of the Hub dataset's `hub_splits` (when given) is refused before the network."""
    if data_files is None:
        if hub_splits and split not in hub_splits:
            other = "test" if "test" in hub_splits else hub_splits[0]
            raise ConfigError(
                f"{dataset!r}{f' (config {config!r})' if config else ''} has no {split!r} split on the "
                f"Hugging Face Hub, only {', '.join(hub_splits)}: evaluate on one of them "
                f"(task.split={other}), hold validation examples out of the train split in a training run "
                "(data.val_split=holdout), or give "
                f"local rows for {split!r} (task.data_files={{{split}: <JSONL or parquet file>, ...}})"
            )
        return _rows_from_hub(dataset, config, split, revision, fields)
    if isinstance(data_files, Mapping):
        if split not in data_files:
            raise MissingSplit(
                f"task.data_files has no {split!r} split (it has {sorted(data_files)}); add "
                f"{split}: <file> to the mapping"
            )
        data_files = data_files[split]
    files = [data_files] if isinstance(data_files, str | os.PathLike) else list(data_files)
    return [row for f in files for row in read_rows(f)]


def subset_indices(
    size: int, n: int | None, seed: int, *, keep_order: bool = True, skip: int = 0
) -> list[int]:
    """Which of `size` rows `subset` keeps: `n` drawn by `seed` (all if n is None or >= size);
    the same seed gives the same rows, and a larger `n` only adds rows. `skip` leaves out the first
    `skip` rows of that draw: skip = k with n = m gives the rows that n = k + m adds to n = k, none of
    n = k's (fresh rows for a replication); n None then keeps the rest (a bad skip is a ConfigError).
    Dataset order unless `keep_order` is False (then drawn order)."""
    if n is not None and (isinstance(n, bool) or int(n) != n or n < 1):
        raise ValueError(f"n_examples must be an integer >= 1 or None (all), got {n!r}")
    if isinstance(skip, bool) or int(skip) != skip or skip < 0:
        raise ConfigError(f"skip_examples must be an integer >= 0, got {skip!r}")
    if skip and skip >= size:
        raise ConfigError(
            f"skip_examples={skip} leaves none of the split's {size} rows: give a smaller skip_examples"
        )
    if not skip and (n is None or n >= size):
        return list(range(size))
    order = list(range(size))
    random.Random(seed).shuffle(order)
    # the draw's rows skip .. skip + n - 1: n = k + m keeps order[:k + m], the union of n = k's and these
    picked = order[int(skip) : None if n is None else int(skip) + int(n)]
    return sorted(picked) if keep_order else picked


def skipped(skip: int) -> dict[str, int]:
    """`skip_examples` as a task's `source` records it: named only when set, so the settings (and the
    grid points' keys) of runs without it stay what they were."""
    return {"skip_examples": int(skip)} if skip else {}


def subset(rows: Sequence[Any], n: int | None, seed: int, *, keep_order: bool = True) -> list[Any]:
    """`n` rows drawn by `seed` (see `subset_indices`)."""
    return [rows[i] for i in subset_indices(len(rows), n, seed, keep_order=keep_order)]


def _rows_from_hub(
    dataset: str, config: str | None, split: str, revision: str | None, fields: Sequence[str]
) -> list[dict[str, Any]]:
    what = f"{dataset!r}" + (f" (config {config!r})" if config else "") + f", split {split!r}"
    hint = (
        f"Point the task at local files instead: task.data_files=<JSONL or parquet file with the "
        f"fields {', '.join(fields) or 'of the dataset'}> (or a mapping such as "
        f"task.data_files={{{split}: ..., {'test' if split == 'train' else 'train'}: ...}})"
    )
    offline = hub.offline_reason()
    if offline:
        import datasets

        # The environment variable is read when `datasets` is imported; if it was set later the
        # library would still try the network (and retry for minutes), so only trust the cache
        # when `datasets` itself agrees it is offline.
        if not datasets.config.HF_HUB_OFFLINE:
            raise DatasetUnavailable(f"cannot load {what}: offline mode is set ({offline}). {hint}.")
        try:
            return datasets.load_dataset(dataset, config, split=split, revision=revision).to_list()
        except Exception as e:
            raise DatasetUnavailable(
                f"cannot load {what}: offline mode is set ({offline}) and it is not in the Hugging "
                f"Face cache. {hint}."
            ) from e
    unreachable = hub.probe()
    if unreachable:
        raise DatasetUnavailable(
            f"cannot load {what}: the Hugging Face Hub is not reachable from this machine ({unreachable}). "
            f"{hint}, or set HF_HUB_OFFLINE=1 to use a copy already in the Hugging Face cache."
        )
    import datasets

    download = datasets.DownloadConfig(max_retries=1)
    return datasets.load_dataset(
        dataset, config, split=split, revision=revision, download_config=download
    ).to_list()


def as_plain(value: Any) -> Any:
    """Paths and Hydra containers as plain JSON-able values, for `Task.source`."""
    if isinstance(value, Mapping):
        return {str(k): as_plain(v) for k, v in value.items()}
    if isinstance(value, str | os.PathLike):
        return str(value)
    if isinstance(value, Sequence):
        return [as_plain(v) for v in value]
    return value
