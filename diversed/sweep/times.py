"""Times and their uncertainty: what a grid point's timed passes say, alone and against autoregressive
decoding.

`sweep.point.time_point` measures: `wall_time_runs`, passes over all examples at the sweep's batch size
(throughput), and `latency_runs`, the mean time per sample of passes that decode each example alone
at batch 1 (the paper's time), with each timed example's own time, new tokens and score (`EXAMPLE_TIMES`,
`latency_example_scores`). Every time a record holds beyond those runs is computed here, once:

- `measured`: the median of the runs (`wall_time_s`, `latency_s`), the time per generated token,
  and each time's 95 % interval over the repeats (`intervals.median_interval`);
- `baseline_key`, `normalized`: the one normalisation. A point is divided by the autoregressive
  point of the same pair, task, temperature, examples, settings and SEED (paired: seeds change
  outputs, so lengths and times); the paper's time (`normalized_latency`) divides latencies over
  the same examples. A method decoded at batch 1 whatever the sweep's batch size (`batch_one`,
  e.g. hf_static) is divided by autoregressive decoding at batch 1 (its latency pass over the same
  examples), never at the sweep's batch size; `normalized_time_batch_size` says which was used;
  `Baselines` holds the autoregressive records a run has and normalises a record by its own
  (evaluate as points finish, `fill_times` over records read back);
- `fill_times`: the same for records written before these fields (`results.load_results`; only those
  records and the baselines become dicts, a chunk at a time);
- `shown_time`: which normalised time tables and figures show (per sample at batch 1 where there
  is one, the paper's time), and `PER_TOKEN` its per-token counterpart;
- `time_over_seeds`, `times_over_seeds`: a normalised time of one setting over seeds, for tables and
  figures, on the log scale (a ratio: its interval stays above 0): the geometric mean over examples ×
  seeds of per-example ratios with a cluster bootstrap over examples (`example_log_ratios`,
  `example_interval`) where the latency passes kept per-example times, else the geometric mean over
  seeds with a t-interval on the log ratios (`intervals.log_interval`);
- `is_time_field`: which record fields measure the clock, not the outputs (two runs of one grid point
  agree on all others: `results.load_results` checks that where a point is in several files);
- `estimate_seconds`: how long grid points not yet run will decode and time, from the finished
  records of the same run (a dry run's estimate; none without finished records).

It does not time anything, read files or know about models.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from diversed.sweep.intervals import (
    CONFIDENCE,
    bootstrap_interval,
    log_interval,
    median_interval,
    sample_mean,
)
from diversed.sweep.methods import METHODS, canonical_float

log = logging.getLogger(__name__)

BASELINE = "autoregressive"
# normalised time -> (the record's time, the autoregressive time it is divided by)
NORMALIZED = {
    "normalized_time": "wall_time_s",  # per sample, at the sweep's batch size (batch_one methods: batch 1)
    # the same per generated token (lossy settings change lengths)
    "normalized_time_per_token_s": "time_per_token_s",
    "normalized_latency": "latency_s",  # per sample, each example alone at batch 1 (the paper's time)
    "normalized_latency_per_token": "latency_per_token_s",
    # per generated token after the first, each example alone at batch 1: decode only, the prompt's
    # reading (time to the first token) taken out (`point.time_point`)
    "normalized_decode_per_token": "latency_decode_per_token_s",
}
# a normalised time per sample -> the same per generated token
PER_TOKEN = {
    "normalized_time": "normalized_time_per_token_s",
    "normalized_latency": "normalized_latency_per_token",
}
# What a record shares with its autoregressive baseline (together: the baseline's settings digest)
PAIRED_BY = ("pair", "task", "temperature", "n_examples", "settings_group", "seed")
RUNS = {"wall_time_s": "wall_time_runs", "latency_s": "latency_runs"}  # a time -> its timed passes


def ci_fields(field: str) -> tuple[str, str]:
    """The record fields of a time's interval: wall_time_s -> (wall_time_ci_low, wall_time_ci_high)."""
    stem = field.removesuffix("_s")
    return f"{stem}_ci_low", f"{stem}_ci_high"


# The record fields this module adds (in results.run_fields()), besides normalized_time and
# normalized_latency.
TIME_FIELDS = (
    "latency_per_token_s",  # latency_s · latency_examples / latency_new_tokens (tokens of one latency pass)
    # time_per_token_s / the autoregressive point's (per-token panel of the figures)
    "normalized_time_per_token_s",
    "normalized_latency_per_token",  # latency_per_token_s / the autoregressive point's
    "latency_first_token_s",  # mean over the timed examples of their time to the first new token
    "latency_decode_per_token_s",  # Σ (t_e − first_e) / Σ (n_e − 1): per token after the first
    "normalized_decode_per_token",  # latency_decode_per_token_s / the autoregressive point's
    "normalized_time_batch_size",  # the batch size of the autoregressive time normalized_time divides by
    *ci_fields("wall_time_s"),
    *ci_fields("latency_s"),  # 95 % intervals over the repeats (median_interval)
    *(f for n in NORMALIZED for f in ci_fields(n)),
)


# What a record measured of the clock rather than of the outputs: the same grid point decoded twice
# (same settings and seed: the same tokens and scores) gives other values here (`is_time_field`).
_CLOCK = frozenset(
    (
        *NORMALIZED,
        *NORMALIZED.values(),
        *RUNS,
        *RUNS.values(),
        *TIME_FIELDS,
        "tokens_per_s",
        "scored_wall_time_s",
        "prompt_pass_s",
        "timing",  # how it was timed (repeats, threads, the launcher beside it)
    )
)


def is_time_field(field: str) -> bool:
    """Whether a record field is a measurement of time (or says how time was measured): the fields
    above, the latency passes' own (`latency_*`), and any `*_s`, `*_time*` field a newer writer adds."""
    return field in _CLOCK or field.startswith("latency_") or field.endswith("_s") or "_time" in field


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _runs(value: Any) -> list[float]:
    return [float(v) for v in value] if isinstance(value, list | tuple | np.ndarray) else []


# ----------------------------------------------------------------------------- over the repeats


def measured(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A point's times from its measurements (`time_point`'s runs, `new_tokens`, `scored_wall_time_s`):
    wall_time_s (the median of wall_time_runs; without runs, the scored pass unless it reused prompt
    passes of earlier points, `prompt_cache`), tokens_per_s, time_per_token_s, latency_per_token_s,
    and the intervals of wall_time_s and latency_s."""
    wall, lat = fields.get("wall_time_s"), fields.get("latency_s")
    if _missing(wall) and not fields.get("prompt_cache"):
        wall = fields.get("scored_wall_time_s")  # timing.repeats = 0: the scored pass
    tokens, lat_tokens, k = (fields.get(f) for f in ("new_tokens", "latency_new_tokens", "latency_examples"))
    out: dict[str, Any] = {"wall_time_s": wall}
    if not _missing(tokens) and not _missing(wall):
        out["tokens_per_s"] = tokens / wall if wall else None
        out["time_per_token_s"] = wall / max(tokens, 1)
    if not any(_missing(v) for v in (lat, lat_tokens, k)):
        out["latency_per_token_s"] = lat * k / max(lat_tokens, 1)
    for field, runs in RUNS.items():
        out.update(zip(ci_fields(field), median_interval(_runs(fields.get(runs))), strict=True))
    return out


# ---------------------------------------------------------------------------- against autoregressive decoding


def baseline_key(record: Mapping[str, Any]) -> tuple:
    """What pairs a record with its autoregressive baseline (`PAIRED_BY`), in canonical form."""

    def canon(f: str, v: Any) -> Any:
        if _missing(v):
            return None
        if f == "temperature":
            return canonical_float(v)  # as the records' keys: T = 1e-8 is not paired with T = 0
        return int(v) if f in ("n_examples", "seed") else str(v)

    return tuple(canon(f, record.get(f)) for f in PAIRED_BY)


def _ratio(num: Mapping[str, Any], field: str, den: Mapping[str, Any], den_field: str, scale: float) -> tuple:
    """scale · num[field] / den[den_field] and its interval from the two records' runs."""
    a, b = num.get(field), den.get(den_field)
    if _missing(a) or _missing(b) or not b or _missing(scale):
        return None, math.nan, math.nan
    if field not in RUNS:  # a time without runs of its own (decode only): no interval over repeats
        return scale * a / b, math.nan, math.nan
    return (
        scale * a / b,
        *median_interval(_runs(num.get(RUNS[field])), _runs(den.get(RUNS[den_field])), scale=scale),
    )


def normalized(
    record: Mapping[str, Any], baseline: Mapping[str, Any] | None, *, warn: bool = True
) -> dict[str, Any]:
    """The normalised times of `record` and their intervals (`NORMALIZED`, `ci_fields`) against its
    autoregressive `baseline` (the record of the same `baseline_key`, None: none yet), and
    `normalized_time_batch_size`. Uses the baseline's measurements only (its runs, tokens, examples).

    Throughput at the sweep's batch size is divided by the baseline's; a `batch_one` method's by the
    baseline's latency at batch 1 when that covers the record's examples, else left None (with a
    warning unless `warn` is False). Latencies are divided only when both cover as many examples.
    The baseline against itself is exactly 1, interval [1, 1]."""
    out: dict[str, Any] = {f: None for n in NORMALIZED for f in (n, *ci_fields(n))}
    out["normalized_time_batch_size"] = None
    if baseline is None:
        return out
    get = lambda r, f: None if _missing(r.get(f)) else r.get(f)  # noqa: E731
    n, tokens, k = get(record, "n_examples"), get(record, "new_tokens"), get(record, "latency_examples")
    b_tokens, b_k, b_lat_tokens = (
        get(baseline, "new_tokens"),
        get(baseline, "latency_examples"),
        get(baseline, "latency_new_tokens"),
    )
    per = lambda a, b: None if a is None or b is None else a / max(b, 1)  # noqa: E731 (a scale from counts)
    found: dict[str, tuple] = {}
    if (
        METHODS.get(record.get("method")) and METHODS[record["method"]].batch_one
    ):  # e.g. hf_static: decoded at batch 1
        if n is not None and b_k == n and get(baseline, "latency_s") is not None:
            found["normalized_time"] = _ratio(record, "wall_time_s", baseline, "latency_s", 1 / n)
            found["normalized_time_per_token_s"] = _ratio(
                record, "wall_time_s", baseline, "latency_s", per(per(b_lat_tokens, tokens), n)
            )
            out["normalized_time_batch_size"] = 1
        elif warn:
            log.warning(
                f"{record.get('method')} decodes at batch 1 but its autoregressive baseline has no time at "
                f"batch 1 over its {n} examples: normalized_time left empty; set timing.latency=true and "
                "timing.latency_examples=null"
            )
    else:
        found["normalized_time"] = _ratio(record, "wall_time_s", baseline, "wall_time_s", 1.0)
        found["normalized_time_per_token_s"] = _ratio(
            record, "wall_time_s", baseline, "wall_time_s", per(b_tokens, tokens)
        )
        batch = baseline.get("timing")
        out["normalized_time_batch_size"] = batch.get("batch_size") if isinstance(batch, Mapping) else None
    if k is None or b_k is None or k == b_k:  # the same examples timed alone
        found["normalized_latency"] = _ratio(record, "latency_s", baseline, "latency_s", 1.0)
        found["normalized_latency_per_token"] = _ratio(
            record, "latency_s", baseline, "latency_s", per(b_lat_tokens, get(record, "latency_new_tokens"))
        )
        found["normalized_decode_per_token"] = _ratio(
            record, "latency_decode_per_token_s", baseline, "latency_decode_per_token_s", 1.0
        )
    same = record.get("method") == BASELINE
    for name, (value, low, high) in found.items():
        out[name] = value
        out.update(
            zip(ci_fields(name), (value, value) if same and value is not None else (low, high), strict=True)
        )
    return out


class Baselines:
    """The autoregressive records (`BASELINE`) among those given or added, by `baseline_key`: what
    `normalized` divides a record by. A later baseline of the same key replaces an earlier one."""

    def __init__(self, records: Iterable[Mapping[str, Any]] = ()) -> None:
        self.by_key: dict[tuple, Mapping[str, Any]] = {}
        for r in records:
            self.add(r)

    def add(self, record: Mapping[str, Any]) -> None:
        """Keep `record` if it is an autoregressive one (others are ignored)."""
        if record.get("method") == BASELINE:
            self.by_key[baseline_key(record)] = record

    def of(self, record: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """`record`'s baseline (None: none yet)."""
        return self.by_key.get(baseline_key(record))

    def normalized(self, record: Mapping[str, Any], *, warn: bool = True) -> dict[str, Any]:
        """`normalized(record, its baseline)`."""
        return normalized(record, self.of(record), warn=warn)


def shown_time(records: pd.DataFrame | Mapping[str, Any]) -> str:
    """The normalised time to show for `records` (a DataFrame, or one record): per sample at batch 1
    (`normalized_latency`, the paper's time) where they have one, else per pass at the sweep's batch
    size (`normalized_time`)."""
    latency = records.get("normalized_latency")
    has = bool(latency.notna().any()) if isinstance(latency, pd.Series) else not _missing(latency)
    return "normalized_latency" if has else "normalized_time"


def _records_at(df: pd.DataFrame, positions: list[int], size: int = 20_000) -> Iterator[tuple[int, dict]]:
    """(position, record as a dict) for the rows of `df` at `positions`, `size` dicts made at a time."""
    for start in range(0, len(positions), size):
        part = positions[start : start + size]
        yield from zip(part, df.iloc[part].to_dict("records"), strict=True)


def fill_times(df: pd.DataFrame) -> pd.DataFrame:
    """Records as `results.load_results` reads them, with every field `measured` and `normalized`
    give filled where it is missing (records written before them), by the same rules as evaluate;
    values already set are kept, except a `batch_one` method's normalized_time written before
    `normalized_time_batch_size` existed (it was against the sweep's batch size)."""
    # Only the baselines and the records that lack a field become dicts (a million records as dicts
    # would take gigabytes): written with these fields means a baseline batch size and an interval
    # for each time with runs (skipped: bootstraps cost).
    checked = ["normalized_time_batch_size", *RUNS.values(), *(ci_fields(f)[0] for f in RUNS)]
    view = df.reindex(columns=checked)
    n = len(RUNS)
    need = [
        _missing(row[0])
        or any(
            len(_runs(runs)) > 1 and _missing(low)
            for runs, low in zip(row[1 : 1 + n], row[1 + n :], strict=True)
        )
        for row in view.itertuples(index=False, name=None)
    ]
    del view
    base = Baselines(df[df["method"] == BASELINE].to_dict("records") if "method" in df else ())
    positions = [i for i, n in enumerate(need) if n]
    columns: dict[str, list] = {}  # the columns an update touches, as lists (None in one is a value)
    unpaired = 0
    for i, r in _records_at(df, positions):
        new = {k: v for k, v in measured(r).items() if _missing(r.get(k))}
        merged = {**r, **new}
        norm = base.normalized(merged, warn=False)
        redo = (
            METHODS.get(r.get("method")) is not None
            and METHODS[r["method"]].batch_one
            and _missing(r.get("normalized_time_batch_size"))
        )
        new.update({k: v for k, v in norm.items() if redo or _missing(r.get(k))})
        unpaired += bool(redo and norm["normalized_time"] is None)
        for k, v in new.items():
            if k not in columns:
                columns[k] = df[k].tolist() if k in df else [None] * len(df)
            columns[k][i] = v
    if unpaired:
        log.warning(
            f"{unpaired} records of methods decoded at batch 1 have no autoregressive time at batch 1 "
            "over their examples (timing.latency=true, timing.latency_examples=null): their normalized_time "
            "is empty"
        )
    df = df.copy()
    for col, values in columns.items():
        df[col] = values
    for col in (*NORMALIZED, *TIME_FIELDS, "tokens_per_s", "time_per_token_s", "wall_time_s"):
        if col in df:
            df[col] = pd.to_numeric(df[col]).astype("Int64" if col == "normalized_time_batch_size" else float)
    return df


# ----------------------------------------------------------------------------- over seeds


# The normalised times that per-example latencies measure too: -> whether per generated token
PER_EXAMPLE = {
    "normalized_latency": False,
    "normalized_latency_per_token": True,
    "normalized_decode_per_token": "decode",
}
# What `sweep.point.time_point` records per timed example (lists in the order of latency_example_ids)
EXAMPLE_TIMES = ("latency_example_ids", "latency_example_s", "latency_example_tokens")


def example_log_ratios(
    record: Mapping[str, Any], baseline: Mapping[str, Any] | None, per_token: bool | str = False
) -> pd.Series | None:
    """log(t_e / t_e^AR) for each example timed alone in both `record` and its autoregressive `baseline`
    (same seed: `baseline_key`), indexed by example id; per token, log((t_e / n_e) / (t_e^AR / n_e^AR))
    with n_e its timed completion's new tokens (at least 1); "decode", per token after the first,
    log(((t_e − f_e) / (n_e − 1)) / ((t_e^AR − f_e^AR) / (n_e^AR − 1))) with f_e the time to its first
    token (`latency_example_first_s`), over the examples with two tokens or more in both. None where
    either lacks per-example times."""
    fields = (*EXAMPLE_TIMES, "latency_example_first_s") if per_token == "decode" else EXAMPLE_TIMES

    def times(r: Mapping[str, Any] | None) -> pd.DataFrame | None:
        if r is None or any(not isinstance(r.get(f), list | tuple | np.ndarray) for f in fields):
            return None
        ids, t, n, *f = (list(r[x]) for x in fields)
        if not all(len(x) == len(ids) for x in (t, n, *f)):
            return None
        frame = {"t": t, "n": n, **({"f": f[0]} if f else {})}
        return pd.DataFrame(frame, index=pd.Index([str(i) for i in ids], name="example_id"))

    a, b = times(record), times(baseline)
    if a is None or b is None:
        return None
    both = a.join(b, how="inner", lsuffix="", rsuffix="_ar")
    if per_token == "decode":
        d, d_ar = both["t"] - both["f"], both["t_ar"] - both["f_ar"]  # after the first token
        ok = (both["n"] >= 2) & (both["n_ar"] >= 2) & (d > 0) & (d_ar > 0)
        ratio = (d[ok] / (both["n"][ok] - 1)) / (d_ar[ok] / (both["n_ar"][ok] - 1))
        return np.log(ratio.astype(float))
    both = both[(both["t"] > 0) & (both["t_ar"] > 0)]
    ratio = both["t"] / both["t_ar"]
    if per_token:
        ratio = ratio * both["n_ar"].clip(lower=1) / both["n"].clip(lower=1)
    return np.log(ratio.astype(float))


def example_interval(
    log_ratios: Sequence[pd.Series], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(geometric mean, low, high) of per-example time ratios over examples × seeds (`example_log_ratios`,
    one Series per seed): each example's mean log ratio over the seeds that timed it, the mean of those
    over examples, and its BCa bootstrap interval resampling examples (each with all its seeds: a
    cluster bootstrap; `intervals.bootstrap_interval`), all exponentiated. Fewer than
    two examples: NaN bounds."""
    per_example = pd.concat(list(log_ratios)).groupby(level=0).mean().to_numpy(dtype=float)
    if per_example.size == 0:
        return math.nan, math.nan, math.nan
    estimate, low, high = bootstrap_interval(sample_mean, [per_example], confidence=confidence)
    return math.exp(estimate), math.exp(low), math.exp(high)


def time_over_seeds(
    records: pd.DataFrame | Sequence[Mapping[str, Any]],
    field: str = "normalized_time",
    confidence: float = CONFIDENCE,
    *,
    baselines: Baselines | None = None,
) -> tuple[float, float, float, int]:
    """The geometric mean of a normalised time over the per-seed records of ONE setting, its interval
    on the log scale, and the number of seeds with a value: (mean, low, high, n_seeds). A ratio's
    summary: its interval never reaches 0 and is as wide either way on the log scale.

    Per-example latencies in every record and in its autoregressive baseline (`baselines`, same seed;
    `field` one of `PER_EXAMPLE`): the geometric mean of the per-example ratios over examples × seeds
    and its cluster-bootstrap interval over examples on log ratios (`example_interval`). Otherwise, two
    seeds or more: the geometric mean of the per-seed values (each a median over repeats divided by its
    own seed's autoregressive time) and the Student-t interval of their logs, exponentiated
    (`log_interval`): it counts how much seeds move outputs and so times. One seed: that record's value
    and its interval over its repeats (`ci_fields`). None: (nan, nan, nan, 0). Raises if two records
    share a seed (they are not one setting)."""
    d = pd.DataFrame(list(records) if not isinstance(records, pd.DataFrame) else records)
    if "seed" in d and d["seed"].dropna().duplicated().any():
        raise ValueError("time_over_seeds takes the records of one setting, one per seed")
    if field not in d:
        return math.nan, math.nan, math.nan, 0
    x = pd.to_numeric(d[field]).astype(float).dropna()
    if x.empty:
        return math.nan, math.nan, math.nan, 0
    if baselines is not None and field in PER_EXAMPLE:
        rows = [d.loc[i].to_dict() for i in x.index]
        ratios = [example_log_ratios(r, baselines.of(r), PER_EXAMPLE[field]) for r in rows]
        if all(r is not None for r in ratios):
            return (*example_interval(ratios, confidence), len(x))  # type: ignore[arg-type]
    if len(x) == 1:
        r = d.loc[x.index[0]]
        low, high = (float(r[f]) if f in r and not _missing(r[f]) else math.nan for f in ci_fields(field))
        return float(x.iloc[0]), low, high, 1
    mean, low, high = log_interval(x, confidence)
    return mean, low, high, len(x)


def times_over_seeds(df: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """One row per setting (the columns `by`, e.g. `compare.setting_fields()`, seeds apart): for each
    normalised time F the records have, `time_over_seeds`' geometric mean as F and its interval as F's
    `ci_fields` (per example where the records and their autoregressive baselines among `df` have
    per-example latencies), and `timed_score`, the mean score of the completions the latency passes
    timed (`latency_example_scores`, over examples × seeds; NaN where none were scored)."""
    fields = [f for f in NORMALIZED if f in df]
    base = Baselines(df.to_dict("records"))
    rows = []
    for key, g in df.groupby(list(by), dropna=False, sort=False):
        row = dict(zip(by, key, strict=True))
        for f in fields:
            mean, low, high, _ = time_over_seeds(g, f, baselines=base)
            row.update({f: mean, **dict(zip(ci_fields(f), (low, high), strict=True))})
        scored = [v for s in g.get("latency_example_scores", []) if isinstance(s, list | tuple) for v in s]
        row["timed_score"] = float(np.mean(scored)) if scored else math.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=[*by, *(c for f in fields for c in (f, *ci_fields(f))), "timed_score"])


# ----------------------------------------------------------------------------- before a sweep


def estimate_seconds(
    points: Sequence[Mapping[str, Any]],
    finished: Sequence[Mapping[str, Any]],
    *,
    n_examples: int,
    timing: Mapping[str, Any],
    batch_size: int,
) -> tuple[float | None, str]:
    """(seconds, what they rest on) for decoding and timing `points` on `n_examples` examples each, from
    the `finished` records of the same run: per point, the median seconds per example of finished
    records of its method, N and temperature (else its method, else any), per pass at the sweep's batch
    size (wall_time_s / n_examples) and alone at batch 1 (latency_s), times the passes `timing` asks
    for: 1 scored + `repeats` over all examples, `warmup` over the first batch (where `repeats` are
    asked for), and with `latency`, `latency_repeats` over `latency_examples` alone (plus `warmup` of
    one). Loading, scoring and start-up are not counted. Nothing finished: (None, a line saying so and
    how to get some)."""

    def per_example(r: Mapping[str, Any], field: str, per: int | None) -> float | None:
        v, n = r.get(field), r.get("n_examples")
        return (
            None
            if _missing(v) or (per is None and _missing(n)) or not (per or n)
            else float(v) / (per or int(n))
        )

    def medians(field: str, per_sample: bool) -> dict[tuple, float]:
        by: dict[tuple, list[float]] = {}
        for r in finished:
            if (v := per_example(r, field, 1 if per_sample else None)) is not None:
                for level in (
                    (r.get("method"), r.get("num_draft_tokens"), r.get("temperature")),
                    (r.get("method"),),
                    (),
                ):
                    by.setdefault(level, []).append(v)
        return {k: float(np.median(v)) for k, v in by.items()}

    decode, alone = medians("wall_time_s", False), medians("latency_s", True)
    if not decode:
        return None, (
            "no finished points to estimate from: run a small sweep into this directory first "
            "(e.g. task.n_examples=8), then dry-run again"
        )
    levels = {"the same method, N and T": 0, "the same method": 0, "every finished point": 0}
    total, k = 0.0, timing.get("latency_examples") or n_examples
    for p in points:
        keys = [(p.get("method"), p.get("num_draft_tokens"), p.get("temperature")), (p.get("method"),), ()]
        level = next(i for i, key in enumerate(keys) if key in decode)
        levels[list(levels)[level]] += 1
        total += decode[keys[level]] * (
            n_examples * (1 + timing.get("repeats", 0))
            + (timing.get("warmup", 0) * min(batch_size, n_examples) if timing.get("repeats", 0) else 0)
        )
        if timing.get("latency"):
            lat = next((alone[key] for key in keys if key in alone), decode[keys[level]])
            total += lat * (timing.get("latency_repeats", 1) * k + timing.get("warmup", 0))
    matched = ", ".join(f"{name} ({n} {'point' if n == 1 else 'points'})" for name, n in levels.items() if n)
    n_done = sum(1 for r in finished if per_example(r, "wall_time_s", None) is not None)
    latency = (
        ""
        if not timing.get("latency") or alone
        else "; no finished point timed latency: taken as the batched time"
    )
    return total, (
        f"from {n_done} finished points in this run: the median seconds per example of {matched}{latency}; "
        "decoding and timing passes only, not loading or scoring"
    )
