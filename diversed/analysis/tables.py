"""The report's tables from seed-averaged records: which rows, their cells, and the paired differences.

`table_rows` picks a table's rows (each knob family at its setting chosen on validation by
`fronts.choose_on`, else its oracle on the reported scores); `paper_table` lays out Tables 1 and 2
(columns per task: accepted/proposed %, α = accepted/verified %, quality ×100, time / AR, each with
its interval); `times_table` gives the same rows' times at batch 1 (seconds and tokens per sample,
relative to autoregressive decoding per sample and per token); `paired_table` puts DIVERSED against
every other row (`compare.paired`, verdicts by Holm over the table's randomisation tests);
`heads_table` puts every head (one per λ: DIVERSED's front), chosen or not, against the static
ensemble at its own mean w, and `pooled_table` the same comparisons pooled over every task,
temperature and N; `transfer_table` is Table 3; `with_times` adds the time intervals over
seeds (`times.times_over_seeds`).
Pure DataFrame functions apart from reading per-example rows: `report` writes the files.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from diversed.analysis import published
from diversed.analysis.compare import (
    INTERVALS,
    differences_by_example,
    holm,
    holm_verdict,
    paired,
    per_example,
    pooled_difference,
    setting_fields,
    verdict,
)
from diversed.analysis.fronts import best_at_quality, choice_field, choice_key, front_gap
from diversed.sweep.methods import METHODS, exact_law, head_labels
from diversed.sweep.times import ci_fields, shown_time, times_over_seeds

# ----------------------------------------------------------------------------- cells

# The quantities of a table cell, named as every header names them (compare's definitions).
QUANTITIES = (
    ("acceptance_rate", "accepted/proposed %"),
    ("alpha", "α = accepted/verified %"),
    ("score", "quality ×100"),
    ("time", "time / AR"),
)


def _time_cell(r: pd.Series) -> str:
    """Time relative to autoregressive decoding, the geometric mean with its interval on log ratios
    (`times.times_over_seeds`: over examples × seeds where the latency passes kept per-example times, else
    over seeds): per sample at batch 1 where the latency mode ran (the paper's time, marked "b1"), else
    per pass at the sweep's batch size."""
    field = shown_time(r)
    cell = _ratio_cell(r, field)
    return f"{cell}{' b1' if field == 'normalized_latency' and cell != '–' else ''}"


def _ratio_cell(r: pd.Series, field: str) -> str:
    """A normalised time `field` of `r` with its interval ("1.60 [1.41, 1.82]", a geometric mean and an
    interval on log ratios, exponentiated: both positive); "–" where it has none."""
    value = r.get(field)
    if value is None or pd.isna(value):
        return "–"
    low, high = (r.get(c) for c in ci_fields(field))
    interval = (
        ""
        if low is None or high is None or pd.isna(low) or pd.isna(high)
        else f" [{_num(low)}, {_num(high)}]"
    )
    return f"{_num(value)}{interval}"


def _num(x: float, digits: int = 2) -> str:
    """x rounded, without a sign on a zero ("-0.00" reads as a loss that is not there)."""
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _seconds(x: float) -> str:
    """Seconds to 3 significant digits (a toy pair's 0.00873 s and a real model's 16.7 s alike), whole
    seconds from 100 on."""
    return f"{x:#.3g}" if abs(x) < 100 else f"{x:.0f}"


def _interval(
    value: float | None, low: float | None = None, high: float | None = None, note: str = ""
) -> str:
    """ "73.65 [71.20, 76.01]" (×100); "–" for no value; the interval left out where unknown."""
    if value is None or pd.isna(value):
        return "–"
    body = _num(100 * value)
    if low is not None and high is not None and not pd.isna(low) and not pd.isna(high):
        body += f" [{_num(100 * low)}, {_num(100 * high)}]"
    return body + note


def _knob_note(r: pd.Series) -> str:
    """ " (w=0.5)": the family knob's symbol and the value a table shows (* where none was at quality)."""
    m = METHODS.get(r["method"])
    star = "" if r.get("at_quality") in (True, None) or pd.isna(r.get("at_quality")) else "*"
    if m is None or m.family is None:
        return star if r.get("chosen_on") not in (None, "test", "only") else ""  # e.g. DIVERSED's head
    knob = m.knob(m.family)
    return f" ({knob.symbol}={knob.show(r[m.family])}){star}"


def _row_label(r: pd.Series, several: dict[str, dict[str, str]]) -> str:
    """The row of a record: its method's `row_name` ("SD (lossless)", "Static"); a knob family's with its
    other knobs (a str knob by its value, "Cascade chow"; a number by its symbol, "Typical δ=0.3") and
    where its setting was chosen; a method without a family with its knobs' values where a cell has
    several (`several`, `_several`'s: "DIVERSED (pair/head)", a path by its label there)."""
    m = METHODS.get(r["method"])
    if m is None:
        return str(r["method"])
    on = r.get("chosen_on")
    if m.family is None:
        labels = several.get(m.name, {})  # a path knob's values by their labels in the table
        shown = [labels.get(str(r[k.field])) if k.path else None for k in m.knobs]
        named = " ".join(s or k.show(r[k.field]) for s, k in zip(shown, m.knobs, strict=True))
        named = named if m.name in several else ""
        chosen = f", chosen on {on}" if isinstance(on, str) and on not in ("test", "only") else ""
        return m.row_name + (f" ({named})" if named else "") + chosen
    others = "".join(
        f" {k.show(r[k.field])}" if k.type is str else f" {k.symbol}={k.show(r[k.field])}"
        for k in m.knobs
        if k.field != m.family
    )
    chosen = (  # a fallback (none non-inferior: the best-scoring) is starred in its cell, per task
        "the only setting run"
        if on == "only"
        else f"chosen on {on}"
        if isinstance(on, str) and on != "test"
        else "oracle (chosen on test)"
    )
    return f"{m.row_name}{others}, {chosen}"


def _several(d: pd.DataFrame, over: pd.DataFrame | None = None) -> dict[str, dict[str, str]]:
    """The methods without a knob family (DIVERSED, the fine-tuned draft) with more than one setting of their
    knobs (heads, drafts) in a cell of `d`: their rows then name them, each path by a label that no other
    path of that knob has in `over` (default `d`; every temperature's rows, so that a head has one name in
    every table of a report; `methods.head_labels`), so two heads never share a row."""
    over = d if over is None else over
    several: dict[str, dict[str, str]] = {}
    for name, rows in d.groupby("method", sort=False):
        m = METHODS.get(name)
        if m is None or m.family is not None or not m.knobs:
            continue
        if (
            rows.groupby(["pair_label", "task", "num_draft_tokens"], dropna=False)[list(m.fields)]
            .nunique()
            .max()
            .max()
            > 1
        ):
            several[name] = {}
            for k in m.knobs:
                if k.path:
                    paths = over.loc[over["method"] == name, k.field] if k.field in over else rows[k.field]
                    several[name].update(head_labels(paths.dropna()))
    return several


def _row_key(r: pd.Series, several: dict[str, dict[str, str]]) -> tuple[str, str, str]:
    """A table row's index: (pair label, row label, N or "–")."""
    n = "–" if pd.isna(r["num_draft_tokens"]) else str(int(r["num_draft_tokens"]))
    return r["pair_label"], _row_label(r, several), n


def _row_cells(
    d: pd.DataFrame, cells: dict[tuple[str, str, str], dict], keys: list[tuple[int, tuple[str, str, str]]]
) -> Iterator[tuple[dict, pd.Series]]:
    """Each record of `d` (pair labels set) with its row's cells in `cells`: a row is made the first time
    its key (`_row_key`) is seen, and the key appended to `keys` with its method's place in `METHODS`
    (sorted by `_row_order`)."""
    several, order = _several(d), {m: i for i, m in enumerate(METHODS)}
    for _, r in d.iterrows():
        key = _row_key(r, several)
        if key not in cells:
            cells[key] = {}
            keys.append((order.get(r["method"], 99), key))
        yield cells[key], r


def _row_order(k: tuple[int, tuple[str, str, str]]) -> tuple:
    """Rows in a table: published pairs last, then by pair, method (`METHODS`' order), N and label."""
    order, (pair, label, n) = k
    return pair.endswith("(paper)"), pair, order, _n_order(n), label


def _n_order(n: str) -> int:
    return int(n) if n.isdigit() else -1  # "–" (autoregressive) and "?" (published) first


def _pair_labels(d: pd.DataFrame) -> pd.Series:
    """The pair, with its settings digest where one pair and task have results under several settings."""
    groups = d["settings_group"].astype(object).fillna("").astype(str)
    several = d.assign(g=groups).groupby(["pair", "task"])["g"].transform("nunique") > 1
    return d["pair"].where(~several, d["pair"] + " [" + groups.str[:6] + "]")


# ----------------------------------------------------------------------------- which rows


def own_task(d: pd.DataFrame) -> pd.Series:
    """Which rows of `d` are not a head decoded on a task other than the one it was trained on (those
    are Table 3's): every other method's, and heads on their own task or of no known task."""
    return (d["method"] != "dynamic") | d["head_task"].isna() | (d["head_task"] == d["task"])


def table_rows(d: pd.DataFrame, temperature: float, choices: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows of a table at one temperature from seed-averaged records `d` of the reported split:
    every row of methods without a knob family (heads on their own task), and per knob family the
    setting `choices` (`fronts.choose_on` on the validation run) names, `chosen_on` the split it was
    chosen on (`choices["split"]`, default "validation"); a family
    without a choice (or `choices` None: the oracle view) takes `fronts.best_at_quality` on `d` itself,
    `chosen_on` "test", or "only" where the family ran one setting there (nothing was chosen on test:
    a setting fixed before, e.g. chosen on another task)."""
    d = d[np.isclose(d["temperature"].astype(float), temperature)]
    d = d[own_task(d)]
    oracle = best_at_quality(d)
    only = oracle.get("n_settings", pd.Series(np.nan, index=oracle.index)).eq(1)
    oracle = oracle.assign(chosen_on=np.where(only, "only", "test"))
    if choices is None or not len(choices):
        return oracle
    picked, chosen_keys = [], set()
    for _, c in choices.iterrows():
        key, field = choice_key(c), choice_field(c["method"])
        if field is None or field not in d:
            continue
        same = (
            d[field] == c["value"]  # a head or a draft: by name
            if isinstance(c["value"], str)
            else np.isclose(pd.to_numeric(d[field], errors="coerce"), float(c["value"]))
        )
        rows = d[(d["method"] == c["method"]) & same]
        rows = rows[[choice_key(r) == key for _, r in rows.iterrows()]]
        if len(rows):
            chosen_keys.add(key)
            picked.append(
                rows.assign(
                    chosen_on=c.get("split", "validation"),
                    at_quality=bool(c["non_inferior"]),
                    margin=c["margin"],
                )
            )
    family = oracle["method"].map(lambda m: choice_field(m) is not None)
    keep = [
        not f or choice_key(r) not in chosen_keys for f, (_, r) in zip(family, oracle.iterrows(), strict=True)
    ]
    return pd.concat([oracle[keep], *picked], ignore_index=True)


# ----------------------------------------------------------------------------- Tables 1 and 2


def paper_table(
    d: pd.DataFrame, temperature: float, *, paper: bool = False, choices: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Table 1 / 2 at one temperature from seed-averaged records (`compare.mean_over_seeds`): index
    (pair, method, N), columns (task, quantity) for each of `QUANTITIES`, cells "value [95 % interval]"
    ×100. Knob families as `table_rows` chooses them."""
    d = table_rows(d, temperature, choices).assign(pair_label=lambda x: _pair_labels(x))
    order = {m: i for i, m in enumerate(METHODS)}
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    keys: list[tuple[int, tuple[str, str, str]]] = []
    for row, r in _row_cells(d, cells, keys):
        spec = METHODS.get(r["method"]) is not None and METHODS[r["method"]].speculative
        for field, name in QUANTITIES:
            if field == "time":
                row[(r["task"], name)] = _time_cell(r)
                continue
            if field != "score" and not spec:
                row[(r["task"], name)] = "–"
                continue
            low, high = INTERVALS[field]
            note = _knob_note(r) if field == "score" else ""
            row[(r["task"], name)] = _interval(r.get(field), r.get(low), r.get(high), note)
    tasks = list(dict.fromkeys(d["task"]))
    if paper:
        for (t, pair, method, task), (acc, q) in published.TABLES.items():
            if np.isclose(t, temperature):
                key = (f"{published.PAIRS[pair]} (paper)", published.METHODS[method], "?")
                if key not in cells:
                    cells[key] = {}
                    keys.append((1000 + order.get(method, 99), key))
                # the paper does not define its acceptance; its values look like accepted/proposed (PAPER.md)
                cells[key][(task, QUANTITIES[0][1])] = f"{acc:.2f} (undefined in the paper)"
                cells[key][(task, QUANTITIES[2][1])] = f"{q:g}"
                tasks += [task] if task not in tasks else []
    keys.sort(key=_row_order)
    index = pd.MultiIndex.from_tuples([k for _, k in keys], names=["pair", "method", "N"])
    columns = pd.MultiIndex.from_tuples(
        [(t, name) for t in tasks for _, name in QUANTITIES], names=["task", "quantity"]
    )
    table = pd.DataFrame(
        [[cells[k].get(c, "") for c in columns] for _, k in keys], index=index, columns=columns
    )
    table.attrs["temperature"] = float(temperature)
    return table


# A times table's columns per task: the examples timed, seconds and new tokens per sample, and the
# time relative to autoregressive decoding per sample (the table's b1 time) and per generated token;
# where the latency passes scored their completions, also the timed samples' quality (`TIMED_QUALITY`).
TIMES = ("timed", "s / sample b1", "tokens / sample", "× AR / sample", "× AR / token")
TIMED_QUALITY = "quality ×100 of the timed samples"
# Where the latency passes also timed each call to its first token: the time to it, and the time per
# token after it relative to autoregressive decoding's (decode only: the prompt's reading taken out).
DECODE = ("s to first token", "× AR / token, decode only")


def times_table(
    d: pd.DataFrame, temperature: float, choices: pd.DataFrame | None = None
) -> pd.DataFrame | None:
    """The rows of `paper_table` at one temperature with their times at batch 1 (the latency passes,
    `timing.latency`): per task the columns `TIMES`, seconds and tokens means over seeds, the ratios
    geometric means with their intervals on log ratios (`with_times`: over examples × seeds where the
    records kept per-example times), and `TIMED_QUALITY` where they scored the timed completions
    (`timed_score`: at a batch size above 1 the timed samples are not the scored ones). Per sample and
    per token differ where the methods' outputs differ in length (sampling, lossy verification): per
    sample then compares lengths as much as speed. None where no row has a latency pass."""
    d = table_rows(d, temperature, choices).assign(pair_label=lambda x: _pair_labels(x))
    if not pd.to_numeric(d.get("latency_s", pd.Series(dtype=float)), errors="coerce").notna().any():
        return None
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    keys: list[tuple[int, tuple[str, str, str]]] = []
    for row, r in _row_cells(d, cells, keys):
        timed, tokens = r.get("latency_examples"), r.get("latency_new_tokens")
        per_sample = tokens / timed if not (pd.isna(timed) or pd.isna(tokens)) and timed else None
        seconds = r.get("latency_s")
        values = (
            "–" if pd.isna(timed) else f"{int(timed)}",
            "–" if seconds is None or pd.isna(seconds) else _seconds(float(seconds)),
            "–" if per_sample is None else f"{per_sample:.1f}",
            _ratio_cell(r, "normalized_latency"),
            _ratio_cell(r, "normalized_latency_per_token"),
        )
        row.update({(r["task"], name): v for name, v in zip(TIMES, values, strict=True)})
        first = pd.to_numeric(r.get("latency_first_token_s"), errors="coerce")
        row[(r["task"], DECODE[0])] = "–" if pd.isna(first) else _seconds(float(first))
        row[(r["task"], DECODE[1])] = _ratio_cell(r, "normalized_decode_per_token")
        timed_score = pd.to_numeric(r.get("timed_score"), errors="coerce")
        row[(r["task"], TIMED_QUALITY)] = "–" if pd.isna(timed_score) else _num(100 * timed_score)
    has = lambda f: pd.to_numeric(d.get(f, pd.Series(dtype=float)), errors="coerce").notna().any()  # noqa: E731
    columns = (*TIMES, *(DECODE if has("latency_first_token_s") else ()))
    return _per_task_frame(
        cells,
        keys,
        list(dict.fromkeys(d["task"])),
        (*columns, TIMED_QUALITY) if has("timed_score") else columns,
    )


def _per_task_frame(
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]],
    keys: list[tuple[int, tuple[str, str, str]]],
    tasks: list[str],
    quantities: tuple[str, ...],
) -> pd.DataFrame:
    """A table of `_row_cells`' rows (in `_row_order`) with, per task, the columns `quantities`."""
    keys.sort(key=_row_order)
    columns = pd.MultiIndex.from_tuples(
        [(t, n) for t in tasks for n in quantities], names=["task", "quantity"]
    )
    index = pd.MultiIndex.from_tuples([k for _, k in keys], names=["pair", "method", "N"])
    return pd.DataFrame(
        [[cells[k].get(c, "") for c in columns] for _, k in keys], index=index, columns=columns
    )


# An output table's columns per task: how often a completion had nothing to score (cut at the stop
# sequences, empty: a model that ends at once, or answers in a format the task does not read), how
# often one ran to the task's max_new_tokens (cut there: an answer that may never have been written) and
# how long completions are.
OUTPUTS = ("empty %", "at cap %", "tokens / example")


def outputs_table(
    d: pd.DataFrame, temperature: float, choices: pd.DataFrame | None = None
) -> pd.DataFrame | None:
    """The rows of `paper_table` at one temperature with, per task, the columns `OUTPUTS`: the share of
    empty completions ×100, the share that ran to the task's max_new_tokens ×100 (– in records from
    before `capped_rate`) and the new tokens per example, means over seeds. None where no record counts
    empty completions (records from before `empty_rate`)."""
    d = table_rows(d, temperature, choices).assign(pair_label=lambda x: _pair_labels(x))
    if not pd.to_numeric(d.get("empty_rate", pd.Series(dtype=float)), errors="coerce").notna().any():
        return None
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    keys: list[tuple[int, tuple[str, str, str]]] = []
    for row, r in _row_cells(d, cells, keys):
        fields = ("empty_rate", "capped_rate", "new_tokens", "n_examples")
        empty, capped, tokens, n = (pd.to_numeric(r.get(f), errors="coerce") for f in fields)
        values = (
            "–" if pd.isna(empty) else f"{100 * empty:.1f}",
            "–" if pd.isna(capped) else f"{100 * capped:.1f}",
            "–" if pd.isna(tokens) or pd.isna(n) or not n else f"{tokens / n:.1f}",
        )
        row.update({(r["task"], name): v for name, v in zip(OUTPUTS, values, strict=True)})
    return _per_task_frame(cells, keys, list(dict.fromkeys(d["task"])), OUTPUTS)


def _static_at_mean_w(
    d: pd.DataFrame, dyn: pd.Series, temperature: float, selection: pd.DataFrame | None
) -> tuple[pd.Series, str] | None:
    """The static-ensemble point of `d` (same pair, task, N, T, comparison group) at the DIVERSED row's
    mean w, with the label saying where that mean was measured: on the selection split's run of the same
    head and settings (`selection`, seed-averaged: no reported row chose it), else on the reported rows
    themselves. Within 0.05 of it, one on the head's own rows (its settings group) where there is one,
    the nearest; None where no static point is that close."""
    mean_w, where = None, "reported"
    if selection is not None and len(selection) and "comparison_group" in selection:
        twin = selection[
            (selection["method"] == "dynamic")
            & (selection["comparison_group"] == dyn.get("comparison_group"))
            & (selection["head"] == dyn.get("head"))
            & np.isclose(selection["temperature"].astype(float), temperature)
            & (selection["num_draft_tokens"] == dyn["num_draft_tokens"])
        ]
        if len(twin) and pd.notna(twin["mean_w"].iloc[0]):
            mean_w, where = float(twin["mean_w"].iloc[0]), str(twin["split"].iloc[0])
    if mean_w is None and pd.notna(dyn.get("mean_w")):
        mean_w = float(dyn["mean_w"])
    if mean_w is None:
        return None
    static = d[
        (d["method"] == "static")
        & (d["pair"] == dyn["pair"])
        & (d["task"] == dyn["task"])
        & np.isclose(d["temperature"].astype(float), temperature)
        & (d["num_draft_tokens"] == dyn["num_draft_tokens"])
        & (d["comparison_group"] == dyn.get("comparison_group"))
    ]
    if not len(static):
        return None
    gap = (pd.to_numeric(static["weight"]) - mean_w).abs()
    static = static[gap <= 0.05]
    if not len(static):
        return None
    # the head's own rows first: one protocol on other rows (task.skip_examples, another seed's draw) is
    # in its comparison group too, and shares no example to pair
    if "settings_group" in static and (static["settings_group"] == dyn.get("settings_group")).any():
        static = static[static["settings_group"] == dyn.get("settings_group")]
    base = static.loc[gap[static.index].idxmin()]
    return base, f"Static w={float(base['weight']):g} (DIVERSED's mean w on {where} rows: {mean_w:.3f})"


def paired_table(
    records: pd.DataFrame,
    d: pd.DataFrame,
    temperature: float,
    choices: pd.DataFrame | None = None,
    selection: pd.DataFrame | None = None,
) -> pd.DataFrame | None:
    """DIVERSED against each other row of the table (`table_rows`) at one temperature, and against the
    static ensemble at DIVERSED's own mean w (`_static_at_mean_w`: the comparison that says whether the
    weight's dependence on context is worth anything beyond its level), paired by example over the
    reported split's records (`compare.paired`): index (pair, N, baseline), columns (task,
    "Δ quality ×100" / "Δ accepted/proposed %"), cells "Δ [95 % interval] verdict (Holm p)": the interval
    is the unadjusted bootstrap one; the verdict comes from the paired randomisation test's p-value
    adjusted by Holm over every test in the table (one temperature), "better" / "worse" only where that
    is below 0.05 (`compare.holm_verdict`: family-wise 5 %). `attrs["verdicts"]` says so with the number
    of tests. A baseline whose outputs follow the target's law exactly (`methods.exact_law`:
    autoregressive, lossless SD, static w = 1, ...) is labelled "(target's law)": such rows differ from
    each other by sampling alone. None without a DIVERSED row. `selection`: the seed-averaged records of
    the split the knobs were chosen on, where DIVERSED's mean w is read."""
    rows = table_rows(d, temperature, choices).assign(pair_label=lambda x: _pair_labels(x))
    if "run_dir" not in records or not (rows["method"] == "dynamic").any():
        return None
    several = _several(rows, over=d)
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    tests: list[tuple[tuple[str, str, str], tuple[str, str], dict]] = []  # Holm adjusts them together
    for _, dyn in rows[rows["method"] == "dynamic"].iterrows():
        mine = per_example(_records_of(records, dyn))
        if mine is None:
            continue
        for base, label in _baselines(rows, d, dyn, temperature, selection, several):
            theirs = per_example(_records_of(records, base))
            if theirs is None:
                continue
            # one row per baseline across tasks: the setting each task's table chose is in that table
            key = (
                dyn["pair_label"],
                f"{int(dyn['num_draft_tokens'])}",
                f"{_row_label(dyn, several)} − {label}",
            )
            for what, name in (("score", "Δ quality ×100"), ("acceptance_rate", "Δ accepted/proposed %")):
                if what != "score" and not METHODS[base["method"]].speculative:
                    cells.setdefault(key, {})[(dyn["task"], name)] = "–"
                    continue
                tests.append((key, (dyn["task"], name), paired(mine, theirs, what, p_value=True)))
    if not cells and not tests:
        return None
    verdicts = _holm_cells(cells, tests)
    tasks = list(dict.fromkeys(rows["task"]))
    columns = pd.MultiIndex.from_tuples(
        [(t, n) for t in tasks for n in ("Δ quality ×100", "Δ accepted/proposed %")],
        names=["task", "difference"],
    )
    keys = sorted(cells, key=lambda k: (k[0], _n_order(k[1]), k[2]))
    index = pd.MultiIndex.from_tuples(keys, names=["pair", "N", "DIVERSED − baseline"])
    table = pd.DataFrame([[cells[k].get(c, "") for c in columns] for k in keys], index=index, columns=columns)
    table.attrs["verdicts"] = verdicts
    return table


def _holm_cells(
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]],
    tests: list[tuple[tuple[str, str, str], tuple[str, str], dict]],
) -> str:
    """Each paired test's cell (`tests`: row key, column, `compare.paired` result with p) written into
    `cells` as "Δ [95 % interval] verdict (Holm p)", p adjusted by Holm over all of `tests`; returns the
    table's verdicts note (how many tests)."""
    adjusted = holm([r["p"] for _, _, r in tests])
    for (key, column, r), p in zip(tests, adjusted, strict=True):
        shown = "" if np.isnan(p) else f" (Holm p {p:.2g})"
        cells.setdefault(key, {})[column] = (
            f"{_interval(r['diff'], r['low'], r['high'])} {holm_verdict(r['diff'], p)}{shown}"
        )
    m = int(np.sum(~np.isnan(adjusted)))
    return f"verdicts: Holm over {m} test{'s' * (m != 1)}, family-wise 5 %"


def _baselines(
    rows: pd.DataFrame, d: pd.DataFrame, dyn: pd.Series, temperature: float, selection, several: dict
):
    """(row, label) of each baseline DIVERSED row `dyn` is paired against: the table's other rows of its
    pair, task and N (labelled "(target's law)" where `methods.exact_law`), then the static ensemble at
    its own mean w (`_static_at_mean_w`) where there is one."""
    same = rows[
        (rows["pair_label"] == dyn["pair_label"])
        & (rows["task"] == dyn["task"])
        & (rows["method"] != "dynamic")
        & (rows["num_draft_tokens"].isna() | (rows["num_draft_tokens"] == dyn["num_draft_tokens"]))
    ]
    baselines = [(base, _row_label(base, several)) for _, base in same.iterrows()]
    baselines = [(b, f"{label} (target's law)" if exact_law(b) else label) for b, label in baselines]
    at_mean = _static_at_mean_w(d, dyn, temperature, selection)
    if at_mean is not None:
        baselines.append(at_mean)
    return baselines


def _same(d: pd.DataFrame, field: str, value) -> pd.Series:
    """Rows of `d` whose `field` equals `value`, a missing value matching a missing one."""
    if field not in d:
        return pd.Series(True, index=d.index)
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return d[field].isna()
    return d[field] == value


def _records_of(records: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """The raw records (every seed) of one seed-averaged row: equal on every setting field."""
    mask = pd.Series(True, index=records.index)
    for f in setting_fields():
        if f in row:
            mask &= _same(records, f, row[f])
    return records[mask]


# ----------------------------------------------------------------------------- Table 3


def transfer_table(d: pd.DataFrame, temperature: float, *, paper: bool = False) -> pd.DataFrame | None:
    """Table 3 at one temperature: index (pair, row, N), rows "SD (lossless)" and "head trained on
    <task>", columns the task evaluated on; None without a head evaluated on another task than
    its own."""
    d = d[np.isclose(d["temperature"].astype(float), temperature)].assign(
        pair_label=lambda x: _pair_labels(x)
    )
    dyn = d[(d["method"] == "dynamic") & d["head_task"].notna()]
    if not (dyn["head_task"] != dyn["task"]).any():
        return None
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    for _, r in pd.concat([d[d["method"] == "lossless"], dyn]).iterrows():
        row = "SD (lossless)" if r["method"] == "lossless" else f"head trained on {r['head_task']}"
        key = (r["pair_label"], row, str(int(r["num_draft_tokens"])))
        cells.setdefault(key, {})[r["task"]] = (
            f"{_interval(r['acceptance_rate'], r.get('acceptance_ci_low'), r.get('acceptance_ci_high'))}"
            f" / {_interval(r['score'], r.get('score_ci_low'), r.get('score_ci_high'))}"
        )
    tasks = list(dict.fromkeys(d["task"]))
    if paper and np.isclose(temperature, 1.0):  # the paper's Table 3 (its temperature is not stated)
        for (pair, task, trained), (acc, q) in published.TRANSFER.items():
            row = "SD (lossless)" if trained is None else f"head trained on {trained}"
            cells.setdefault((f"{published.PAIRS[pair]} (paper)", row, "?"), {})[task] = f"{acc:.2f} / {q:g}"
            tasks += [task] if task not in tasks else []
    keys = sorted(
        cells, key=lambda k: (k[0].endswith("(paper)"), k[0], k[1] != "SD (lossless)", k[1], _n_order(k[2]))
    )
    index = pd.MultiIndex.from_tuples(keys, names=["pair", "row", "N"])
    return pd.DataFrame([[cells[k].get(t, "") for t in tasks] for k in keys], index=index, columns=tasks)


def with_times(d: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Seed-averaged records with each normalised time's mean over seeds and its interval
    (`times.times_over_seeds`, from the per-seed records `df`) for the time figures."""
    by = [c for c in setting_fields() if c in df and c in d]
    t = times_over_seeds(df, by)
    left = d.drop(columns=[c for c in t if c in d and c not in by])
    for x in (
        left,
        t,
    ):  # one dtype per key on both sides (a column of None reads as float on one, object on the other)
        x[by] = x[by].astype(object).where(x[by].notna(), None)
    return left.merge(t, on=by, how="left").astype(d[by].dtypes.to_dict())  # the keys' own dtypes back


# ----------------------------------------------------------------------------- against the static front

# A front table's columns per task: the point's acceptance minus the static front's at the point's
# quality, and its quality minus the front's at its acceptance (`fronts.front_gap`).
FRONT_GAPS = ("Δ accepted/proposed % at equal quality", "Δ quality ×100 at equal acceptance")


def _gap_cell(value: float, low: float, high: float, undefined: float) -> str:
    """ "6.10 [2.00, 9.50] above" (×100), with the share of resamples beyond the front's range where some
    were; "beyond the front's range" where the row itself is (better quality, or more acceptance, than any
    setting of the front)."""
    share = f"{100 * undefined:.0f} % of resamples beyond the front's range"
    if pd.isna(value):
        return f"beyond the front's range ({share})" if not pd.isna(undefined) else "–"
    where = verdict(low, high).replace("better", "above").replace("worse", "below")
    where = where.replace("no difference shown", "on the front (no difference shown)")
    return f"{_interval(value, low, high)} {where}" + (f" ({share})" if undefined > 0.005 else "")


# What a row shares with the static front it is put against (besides the temperature).
_FRONT_OF = ("pair", "task", "num_draft_tokens", "comparison_group", "settings_group")


def heads_table(
    records: pd.DataFrame, d: pd.DataFrame, temperature: float, selection: pd.DataFrame | None = None
) -> pd.DataFrame | None:
    """Every head of a cell (pair, task, N) on its own task, chosen on validation or not, against the
    static ensemble at its own mean w (`_static_at_mean_w`), paired by example over the reported split's
    records: index (pair, N, head), columns per task: its quality ×100 and accepted/proposed % with
    their intervals, its mean w (on the selection split where it ran there), the static point, and the
    two differences "Δ [95 % interval] verdict (Holm p)" with Holm over every test in the table. The
    heads of a λ sweep trace DIVERSED's front; the main tables show only the head chosen on validation.
    None where no cell has more than one head."""
    labels = head_labels(d.loc[d["method"] == "dynamic", "head"].dropna())  # one name at every temperature
    at = d[np.isclose(d["temperature"].astype(float), temperature)]
    at = at[own_task(at)]
    at = at.assign(pair_label=_pair_labels(at))
    dyn = at[at["method"] == "dynamic"]
    if "run_dir" not in records or not len(dyn):
        return None
    if dyn.groupby(["pair_label", "task", "num_draft_tokens"], dropna=False)["head"].nunique().max() < 2:
        return None
    name = METHODS["dynamic"].row_name
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    tests: list[tuple[tuple[str, str, str], tuple[str, str], dict]] = []
    for _, r in dyn.iterrows():
        key = (
            r["pair_label"],
            str(int(r["num_draft_tokens"])),
            f"{name} ({labels.get(str(r['head']), r['head'])})",
        )
        row = cells.setdefault(key, {})
        task = r["task"]
        for field, column in (("score", "quality ×100"), ("acceptance_rate", "accepted/proposed %")):
            low, high = INTERVALS[field]
            row[(task, column)] = _interval(r[field], r.get(low), r.get(high))
        found = _static_at_mean_w(at, r, temperature, selection)
        row[(task, "static at its mean w")] = "– (no static point within 0.05)" if found is None else found[1]
        mine = per_example(_records_of(records, r))
        if found is None or mine is None:
            continue
        theirs = per_example(_records_of(records, found[0]))
        if theirs is None:
            continue
        for what, column in (("score", "Δ quality ×100"), ("acceptance_rate", "Δ accepted/proposed %")):
            tests.append((key, (task, column), paired(mine, theirs, what, p_value=True)))
    verdicts = _holm_cells(cells, tests)
    names = (
        "quality ×100",
        "accepted/proposed %",
        "static at its mean w",
        "Δ quality ×100",
        "Δ accepted/proposed %",
    )
    tasks = list(dict.fromkeys(dyn["task"]))
    columns = pd.MultiIndex.from_tuples([(t, n) for t in tasks for n in names], names=["task", "column"])
    keys = sorted(cells, key=lambda k: (k[0], _n_order(k[1]), k[2]))
    index = pd.MultiIndex.from_tuples(keys, names=["pair", "N", "head"])
    table = pd.DataFrame([[cells[k].get(c, "") for c in columns] for k in keys], index=index, columns=columns)
    table.attrs["verdicts"] = verdicts
    return table


# The rows of the pooled table: which heads of each cell are pooled.
POOLED_ROWS = ("the head chosen on validation (or a cell's only head)", "every head (one per λ)")


def pooled_table(
    records: pd.DataFrame,
    d: pd.DataFrame,
    choices: pd.DataFrame | None = None,
    selection: pd.DataFrame | None = None,
) -> pd.DataFrame | None:
    """The paper's claim over every cell at once: per pair (a task whose heads and static points ran
    under several settings groups gets a row per group, `_pair_labels`, its other tasks staying under the
    pair), each head's quality minus the static ensemble's at the head's own mean w
    (`_static_at_mean_w`, as the heads and paired tables pair them), pooled over every task, temperature and N
    (`compare.pooled_difference`: each example's differences averaged over the comparisons it is in,
    the mean over examples, a bootstrap over examples): one row for the head the tables show where it
    was chosen on validation or was its cell's only head (a cell whose heads were not chosen among is
    left out of it; the cells column names those in), one for every head of every cell (a cell of four
    heads weighs four comparisons). A difference too small for one cell's examples may show over all.
    Index (pair, row), columns: the comparisons pooled, the examples (clusters), the range of the
    comparisons' own Δ, the pooled Δ quality ×100 [95 % interval] with its verdict (Holm over the
    table's tests), and the cells. None where no head has a static point to pair."""
    if "run_dir" not in records or not (d["method"] == "dynamic").any():
        return None
    # a pair whose heads and static points on a task ran under several settings groups: a row per group
    # (that task's; the pair's other tasks stay under its name), labelled from those rows alone
    pairable = own_task(d) & d["method"].isin(["dynamic", "static"])
    d = d.assign(pair_label=_pair_labels(d[pairable]).reindex(d.index))
    pooled: dict[tuple[str, str], list[pd.Series]] = {}
    named: dict[tuple[str, str], list[str]] = {}
    several: set[str] = set()  # pairs with a cell of two heads or more
    for t in sorted(d["temperature"].astype(float).unique(), reverse=True):
        at = d[np.isclose(d["temperature"].astype(float), t)]
        at = at[own_task(at)]
        heads = at[at["method"] == "dynamic"]
        in_cell: dict[tuple, set] = {}  # each cell's heads (`_head_cell` without the head)
        for _, r in heads.iterrows():
            *cell, head = _head_cell(r)
            in_cell.setdefault(tuple(cell), set()).add(head)
        shown = table_rows(d, t, choices)
        chosen = {
            _head_cell(r)
            for _, r in shown[shown["method"] == "dynamic"].iterrows()
            if r.get("chosen_on") != "test" or len(in_cell.get(_head_cell(r)[:-1], ())) == 1
        }
        for _, r in heads.iterrows():
            found = _static_at_mean_w(at, r, t, selection)
            if found is None or pd.isna(r["num_draft_tokens"]):
                continue
            mine, theirs = (per_example(_records_of(records, x)) for x in (r, found[0]))
            if mine is None or theirs is None or not len(diff := differences_by_example(mine, theirs)):
                continue
            diff.index = pd.MultiIndex.from_arrays([[r["task"]] * len(diff), diff.index])
            label = r["pair_label"]
            if len(in_cell[_head_cell(r)[:-1]]) > 1:
                several.add(label)
            for row in [*(POOLED_ROWS[:1] if _head_cell(r) in chosen else []), POOLED_ROWS[1]]:
                pooled.setdefault((label, row), []).append(diff)
                named.setdefault((label, row), []).append(
                    f"{r['task']} T={t:g} N={int(r['num_draft_tokens'])}"
                )
    # every head is the chosen one where no cell of the pair has two: the second row would repeat it
    pooled = {k: v for k, v in pooled.items() if k[1] == POOLED_ROWS[0] or k[0] in several}
    if not pooled:
        return None
    keys = sorted(pooled, key=lambda k: (k[0], POOLED_ROWS.index(k[1])))
    tests = [pooled_difference(pooled[k], p_value=True) for k in keys]
    adjusted = holm([r["p"] for r in tests])
    rows = []
    for key, r, p in zip(keys, tests, adjusted, strict=True):
        own = [float(x.mean()) for x in pooled[key]]
        shown_p = "" if np.isnan(p) else f" (Holm p {p:.2g})"
        rows.append(
            {
                "comparisons": str(len(pooled[key])),
                "examples": str(int(r["n"])),
                "their own Δ ×100": f"{_num(100 * min(own))} to {_num(100 * max(own))}",
                "Δ quality ×100": f"{_interval(r['diff'], r['low'], r['high'])} {holm_verdict(r['diff'], p)}"
                + shown_p,
                "cells pooled": "; ".join(dict.fromkeys(named[key])),
            }
        )
    index = pd.MultiIndex.from_tuples(keys, names=["pair", "DIVERSED − static at its mean w"])
    table = pd.DataFrame(rows, index=index)
    m = int(np.sum(~np.isnan(adjusted)))
    table.attrs["verdicts"] = f"verdicts: Holm over {m} test{'s' * (m != 1)}, family-wise 5 %"
    return table


_HEAD_CELL = ("pair", "task", "num_draft_tokens", "comparison_group", "head")  # one head's row of a cell


def _head_cell(r: pd.Series) -> tuple:
    """A head's row of a cell as a key, a missing value as None (NaN never equals NaN)."""
    return tuple(None if not isinstance(v := r.get(f), str) and pd.isna(v) else v for f in _HEAD_CELL)


def front_table(
    records: pd.DataFrame, d: pd.DataFrame, temperature: float, choices: pd.DataFrame | None = None
) -> pd.DataFrame | None:
    """Each speculative row of the table (`table_rows`: DIVERSED, each family at its chosen setting, the
    fine-tuned draft), and every other head of a cell on its own task (one per λ: DIVERSED's front, the
    tables showing the head chosen on validation), against the static ensemble's FRONT over every w run
    with the same pair, task, N and comparison group (the paper's claim: DIVERSED lies above it),
    paired by example over the reported split's records (`fronts.front_gap`): index (pair, N, row),
    columns (task, `FRONT_GAPS`), cells "Δ [95 % interval] above / below / on the front". None where no
    static front of two or more settings has a row to compare."""
    if "run_dir" not in records:
        return None
    rows, every = table_rows(d, temperature, choices), d
    d = d[np.isclose(d["temperature"].astype(float), temperature)]
    heads = d[(d["method"] == "dynamic") & own_task(d)]
    shown = {_head_cell(r) for _, r in rows[rows["method"] == "dynamic"].iterrows()}
    others = [_head_cell(r) not in shown for _, r in heads.iterrows()]
    rows = pd.concat([rows, heads[others]], ignore_index=True).assign(pair_label=lambda x: _pair_labels(x))
    several = _several(rows, over=every)
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    fronts: dict[tuple, list[pd.DataFrame] | None] = {}
    for _, r in rows.iterrows():
        m = METHODS.get(r["method"])
        if m is None or not m.speculative or r["method"] == "static" or pd.isna(r["num_draft_tokens"]):
            continue
        key = tuple(r.get(f) for f in _FRONT_OF)
        if key not in fronts:
            same = np.logical_and.reduce([_same(d, f, r.get(f)) for f in _FRONT_OF])
            ex = [
                per_example(_records_of(records, s))
                for _, s in d[(d["method"] == "static") & same].iterrows()
            ]
            fronts[key] = ex if len(ex) >= 2 and all(e is not None for e in ex) else None
        front = fronts[key]
        mine = per_example(_records_of(records, r)) if front else None
        if mine is None:
            continue
        g = front_gap(front, mine)
        row = cells.setdefault(
            (
                r["pair_label"],
                f"{int(r['num_draft_tokens'])}",
                f"{_row_label(r, several)} − static front ({len(front)} w)",
            ),
            {},
        )
        row[(r["task"], FRONT_GAPS[0])] = _gap_cell(
            g["d_acceptance"], g["d_acceptance_low"], g["d_acceptance_high"], g["undefined_acceptance"]
        )
        row[(r["task"], FRONT_GAPS[1])] = _gap_cell(
            g["d_quality"], g["d_quality_low"], g["d_quality_high"], g["undefined_quality"]
        )
    if not cells:
        return None
    tasks = list(dict.fromkeys(rows["task"]))
    columns = pd.MultiIndex.from_tuples([(t, n) for t in tasks for n in FRONT_GAPS], names=["task", "gap"])
    order = {m.row_name: i for i, m in enumerate(METHODS.values())}
    keys = sorted(
        cells,
        key=lambda k: (
            k[0],
            _n_order(k[1]),
            not k[2].startswith("DIVERSED"),
            order.get(k[2].split(",")[0], 99),
            k[2],
        ),
    )
    index = pd.MultiIndex.from_tuples(keys, names=["pair", "N", "row − static front"])
    return pd.DataFrame([[cells[k].get(c, "") for c in columns] for k in keys], index=index, columns=columns)
