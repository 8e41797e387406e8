"""The paper's report from run directories: its Tables 1-3 and figures, and a summary per run.

    python -m diversed.report RUN_DIR... --out DIR [--paper]

Writes under DIR (Markdown + CSV tables, PNG + PDF figures):

    README.md                 the index: every table inline, every figure with its caption
    claims.md                 what a README may quote: the tables, the paired differences, Proposition 1's captions
    table_T<t>.md/.csv        Tables 1 and 2: rows pair x method x N, columns (task, quantity): accepted/proposed %,
                              α = accepted/verified %, quality x100, time / AR; each a mean over examples and
                              seeds with its 95 % interval (`compare.mean_over_seeds`, `times.times_over_seeds`)
    table_oracle_T<t>.*       the same with each knob family chosen on the reported scores (labelled oracle)
    paired_T<t>.md/.csv       DIVERSED minus each row, paired by example (`compare.paired`): "better" only where
                              the interval excludes 0
    choices.csv               each knob family's choice on the validation run, with its non-inferiority test
    transfer_T<t>.md/.csv     Table 3: a head trained on task A evaluated on task B (the task a head was
                              trained on comes from its record, else from its head_config.json)
    figures/                  acceptance vs w with Proposition 1, quality vs time, time vs acceptance,
                              what the head learned (with sweep.token_w), and plot.py's Pareto figures
    runs/<name>.md            one page per run dir: settings fingerprints, pairs, tasks, counts, figures

Table rows: autoregressive; lossless SD; SD with a fine-tuned draft; each knob family (the static
ensemble, lossy SD, cascades, typical acceptance) at the setting chosen on the `--select-split` run
(`fronts.choose_on`: the most acceptance among settings non-inferior to autoregressive decoding, margin
`--margin`; * where none was), or, without such a run, its oracle setting on the reported scores
(`fronts.best_at_quality`), labelled so; DIVERSED with the head trained on the column's task.
`--paper` adds the published numbers (`published.py`) as rows of their own, in the accepted/proposed
column with a note: the paper does not define its acceptance.

It reads results and heads only: nothing is decoded, rescored or retrained.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from diversed import published
from diversed.compare import INTERVALS, SETTING_FIELDS, mean_over_seeds, paired, per_example, verdict
from diversed.figures import Shown, acceptance_vs_w, head_learned, quality_vs_time, time_vs_acceptance
from diversed.fronts import best_at_quality, choose_on
from diversed.heads import head_metadata
from diversed.methods import METHOD_NAMES, METHODS, head_label
from diversed.plot import plot_pareto
from diversed.results import load_results, read_examples
from diversed.times import ci_fields, times_over_seeds

_KNOB_SHORT = {"weight": "w", "lenience": "l", "cascade_alpha": "α", "typical_epsilon": "ε"}


# ----------------------------------------------------------------------------- loading


def load_runs(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Every record of the run dirs, with `run_dir` (the directory holding its results.jsonl) and
    `head_task` filled from the head's head_config.json where the record lacks it."""
    frames = []
    for run in run_dirs:
        for f in sorted(Path(run).rglob("results.jsonl")):
            d = load_results(f)
            d["run_dir"] = str(f.parent)
            frames.append(d)
    if not frames:
        raise FileNotFoundError(f"no results.jsonl under {', '.join(map(str, run_dirs))}: give run directories of "
                                "python -m diversed.evaluate")  # fmt: skip
    df = pd.concat(frames, ignore_index=True)
    if "head_task" not in df:
        df["head_task"] = None
    missing = df["head"].notna() & df["head_task"].isna()
    df.loc[missing, "head_task"] = [head_metadata(h).get("task") for h in df.loc[missing, "head"]]
    return df


# ----------------------------------------------------------------------------- cells

# The quantities of a table cell, named as every header names them (compare's definitions).
QUANTITIES = (("acceptance_rate", "accepted/proposed %"), ("alpha", "α = accepted/verified %"), ("score", "quality ×100"),
              ("time", "time / AR"))  # fmt: skip


def _time_cell(r: pd.Series) -> str:
    """Time relative to autoregressive decoding with its interval over seeds (`times.times_over_seeds`):
    per sample at batch 1 where the latency mode ran (the paper's time, marked "b1"), else per pass at
    the sweep's batch size."""
    field = "normalized_latency" if pd.notna(r.get("normalized_latency")) else "normalized_time"
    value = r.get(field)
    if value is None or pd.isna(value):
        return "–"
    low, high = (r.get(c) for c in ci_fields(field))
    interval = "" if low is None or high is None or pd.isna(low) or pd.isna(high) else f" [{_num(low)}, {_num(high)}]"
    return f"{_num(value)}{interval}{' b1' if field == 'normalized_latency' else ''}"


def _num(x: float, digits: int = 2) -> str:
    """x rounded, without a sign on a zero ("-0.00" reads as a loss that is not there)."""
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _interval(value: float | None, low: float | None = None, high: float | None = None, note: str = "") -> str:
    """"73.65 [71.20, 76.01]" (×100); "–" for no value; the interval left out where unknown."""
    if value is None or pd.isna(value):
        return "–"
    body = _num(100 * value)
    if low is not None and high is not None and not pd.isna(low) and not pd.isna(high):
        body += f" [{_num(100 * low)}, {_num(100 * high)}]"
    return body + note


def _knob_note(r: pd.Series) -> str:
    m = METHODS.get(r["method"])
    if m is None or m.family is None:
        return ""
    star = "" if r.get("at_quality") in (True, None) or pd.isna(r.get("at_quality")) else "*"
    return f" ({_KNOB_SHORT.get(m.family, m.family)}={r[m.family]:g}){star}"


def _row_label(r: pd.Series, several: set[str]) -> str:
    """The row of a record; `several`: the methods with more than one head or draft in a cell."""
    method = r["method"]
    if method == "dynamic":
        return "DIVERSED" + (f" ({head_label(r['head'])})" if "dynamic" in several else "")
    if method == "finetuned_draft":
        return "SD, fine-tuned draft" + (f" ({head_label(r['draft_model'])})" if "finetuned_draft" in several else "")
    if method == "lossless":
        return "SD (lossless)"
    m = METHODS.get(method)
    if m is not None and m.family is not None:
        rule = f" {r['cascade_rule']}" if method == "cascade" else ""
        delta = f" δ={r['typical_delta']:g}" if method == "typical" else ""
        chosen = "chosen on validation" if r.get("chosen_on") == "validation" else "oracle (chosen on test)"
        return f"{m.name_only}{rule}{delta}, {chosen}"
    return m.label if m is not None else str(method)


def _n_order(n: str) -> int:
    return int(n) if n.isdigit() else -1  # "–" (autoregressive) and "?" (published) first


def _pair_labels(d: pd.DataFrame) -> pd.Series:
    """The pair, with its settings digest where one pair and task have results under several settings."""
    groups = d["settings_group"].astype(object).fillna("").astype(str)
    several = d.assign(g=groups).groupby(["pair", "task"])["g"].transform("nunique") > 1
    return d["pair"].where(~several, d["pair"] + " [" + groups.str[:6] + "]")


# ----------------------------------------------------------------------------- which rows


def _choice_key(r: pd.Series | dict, others: Sequence[str]) -> tuple:
    cg = r.get("comparison_group")
    cg = "" if cg is None or pd.isna(cg) else cg
    n = r.get("num_draft_tokens")
    return (r["pair"], r["task"], round(float(r["temperature"]), 6), cg, None if pd.isna(n) else int(n), r["method"],
            *(None if pd.isna(r.get(k)) else r.get(k) for k in others))  # fmt: skip


def table_rows(d: pd.DataFrame, temperature: float, choices: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows of a table at one temperature from seed-averaged records `d` of the reported split:
    every row of methods without a knob family (heads on their own task), and per knob family the
    setting `choices` (`fronts.choose_on` on the validation run) names, `chosen_on` "validation"; a family
    without a choice (or `choices` None: the oracle view) takes `fronts.best_at_quality` on `d` itself,
    `chosen_on` "test"."""
    d = d[np.isclose(d["temperature"].astype(float), temperature)]
    d = d[(d["method"] != "dynamic") | d["head_task"].isna() | (d["head_task"] == d["task"])]
    oracle = best_at_quality(d).assign(chosen_on="test")
    if choices is None or not len(choices):
        return oracle
    picked, chosen_keys = [], set()
    for _, c in choices.iterrows():
        m = METHODS[c["method"]]
        others = [k for k in m.knobs if k != m.family]
        key = _choice_key(c, others)
        rows = d[(d["method"] == c["method"]) & np.isclose(pd.to_numeric(d[m.family], errors="coerce"), float(c["value"]))]
        rows = rows[[_choice_key(r, others) == key for _, r in rows.iterrows()]]
        if len(rows):
            chosen_keys.add(key)
            picked.append(rows.assign(chosen_on="validation", at_quality=bool(c["non_inferior"]), margin=c["margin"]))
    family = oracle["method"].map(lambda m: METHODS[m].family is not None if m in METHODS else False)
    keep = [not f or _choice_key(r, [k for k in METHODS[r["method"]].knobs if k != METHODS[r["method"]].family]) not in chosen_keys
            for f, (_, r) in zip(family, oracle.iterrows(), strict=True)]  # fmt: skip
    return pd.concat([oracle[keep], *picked], ignore_index=True)


# ----------------------------------------------------------------------------- Tables 1 and 2


def paper_table(d: pd.DataFrame, temperature: float, *, paper: bool = False,
                choices: pd.DataFrame | None = None) -> pd.DataFrame:  # fmt: skip
    """Table 1 / 2 at one temperature from seed-averaged records (`compare.mean_over_seeds`): index
    (pair, method, N), columns (task, quantity) for each of `QUANTITIES`, cells "value [95 % interval]"
    ×100. Knob families as `table_rows` chooses them."""
    d = table_rows(d, temperature, choices).assign(pair_label=lambda x: _pair_labels(x))
    several = set()
    for method, knob in (("dynamic", "head"), ("finetuned_draft", "draft_model")):
        rows = d[d["method"] == method]
        if len(rows) and rows.groupby(["pair_label", "task", "num_draft_tokens"])[knob].nunique().max() > 1:
            several.add(method)
    order = {m: i for i, m in enumerate(METHOD_NAMES)}
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    keys: list[tuple[int, tuple[str, str, str]]] = []
    for _, r in d.iterrows():
        n = "–" if pd.isna(r["num_draft_tokens"]) else str(int(r["num_draft_tokens"]))
        key = (r["pair_label"], _row_label(r, several), n)
        if key not in cells:
            cells[key] = {}
            keys.append((order.get(r["method"], 99), key))
        spec = METHODS.get(r["method"]) is not None and METHODS[r["method"]].speculative
        for field, name in QUANTITIES:
            if field == "time":
                cells[key][(r["task"], name)] = _time_cell(r)
                continue
            if field != "score" and not spec:
                cells[key][(r["task"], name)] = "–"
                continue
            low, high = INTERVALS[field]
            note = _knob_note(r) if field == "score" else ""
            cells[key][(r["task"], name)] = _interval(r.get(field), r.get(low), r.get(high), note)
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
    keys.sort(key=lambda k: (k[1][0].endswith("(paper)"), k[1][0], k[0], _n_order(k[1][2]), k[1][1]))
    index = pd.MultiIndex.from_tuples([k for _, k in keys], names=["pair", "method", "N"])
    columns = pd.MultiIndex.from_tuples([(t, name) for t in tasks for _, name in QUANTITIES], names=["task", "quantity"])
    table = pd.DataFrame([[cells[k].get(c, "") for c in columns] for _, k in keys], index=index, columns=columns)
    table.attrs["temperature"] = float(temperature)
    return table


def paired_table(records: pd.DataFrame, d: pd.DataFrame, temperature: float,
                 choices: pd.DataFrame | None = None) -> pd.DataFrame | None:  # fmt: skip
    """DIVERSED against each other row of the table (`table_rows`) at one temperature, paired by example
    over the reported split's records (`compare.paired`): index (pair, N, baseline), columns (task,
    "Δ quality ×100" / "Δ accepted/proposed %"), cells "Δ [95 % interval] verdict" (`compare.verdict`:
    "better" only where the interval excludes 0). None without a DIVERSED row."""
    rows = table_rows(d, temperature, choices).assign(pair_label=lambda x: _pair_labels(x))
    if "run_dir" not in records or not (rows["method"] == "dynamic").any():
        return None
    several = {"dynamic"} if rows[rows["method"] == "dynamic"].groupby(["pair_label", "task", "num_draft_tokens"])[
        "head"].nunique().max() > 1 else set()  # fmt: skip
    cells: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    for _, dyn in rows[rows["method"] == "dynamic"].iterrows():
        mine = per_example(_records_of(records, dyn))
        if mine is None:
            continue
        same = rows[(rows["pair_label"] == dyn["pair_label"]) & (rows["task"] == dyn["task"]) & (rows["method"] != "dynamic")
                    & (rows["num_draft_tokens"].isna() | (rows["num_draft_tokens"] == dyn["num_draft_tokens"]))]  # fmt: skip
        for _, base in same.iterrows():
            theirs = per_example(_records_of(records, base))
            if theirs is None:
                continue
            # one row per baseline across tasks: the setting each task's table chose is in that table
            key = (dyn["pair_label"], f"{int(dyn['num_draft_tokens'])}", f"{_row_label(dyn, several)} − {_row_label(base, set())}")
            for what, name in (("score", "Δ quality ×100"), ("acceptance_rate", "Δ accepted/proposed %")):
                if what != "score" and not METHODS[base["method"]].speculative:
                    cells.setdefault(key, {})[(dyn["task"], name)] = "–"
                    continue
                r = paired(mine, theirs, what)
                cells.setdefault(key, {})[(dyn["task"], name)] = (
                    f"{_interval(r['diff'], r['low'], r['high'])} {verdict(r['low'], r['high'])}")
    if not cells:
        return None
    tasks = list(dict.fromkeys(rows["task"]))
    columns = pd.MultiIndex.from_tuples([(t, n) for t in tasks for n in ("Δ quality ×100", "Δ accepted/proposed %")],
                                        names=["task", "difference"])  # fmt: skip
    keys = sorted(cells, key=lambda k: (k[0], _n_order(k[1]), k[2]))
    index = pd.MultiIndex.from_tuples(keys, names=["pair", "N", "DIVERSED − baseline"])
    return pd.DataFrame([[cells[k].get(c, "") for c in columns] for k in keys], index=index, columns=columns)


def _records_of(records: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """The raw records (every seed) of one seed-averaged row: equal on every setting field."""
    mask = pd.Series(True, index=records.index)
    for f in SETTING_FIELDS:
        if f not in records or f not in row:
            continue
        v = row[f]
        col = records[f]
        mask &= col.isna() if v is None or (not isinstance(v, str) and pd.isna(v)) else (col == v)
    return records[mask]


# ----------------------------------------------------------------------------- Table 3


def transfer_table(d: pd.DataFrame, temperature: float, *, paper: bool = False) -> pd.DataFrame | None:
    """Table 3 at one temperature: index (pair, row, N), rows "SD (lossless)" and "head trained on
    <task>", columns the task evaluated on; None without a head evaluated on another task than
    its own."""
    d = d[np.isclose(d["temperature"].astype(float), temperature)].assign(pair_label=lambda x: _pair_labels(x))
    dyn = d[(d["method"] == "dynamic") & d["head_task"].notna()]
    if not (dyn["head_task"] != dyn["task"]).any():
        return None
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    for _, r in pd.concat([d[d["method"] == "lossless"], dyn]).iterrows():
        row = "SD (lossless)" if r["method"] == "lossless" else f"head trained on {r['head_task']}"
        key = (r["pair_label"], row, str(int(r["num_draft_tokens"])))
        cells.setdefault(key, {})[r["task"]] = (f"{_interval(r['acceptance_rate'], r.get('acceptance_ci_low'), r.get('acceptance_ci_high'))}"
                                                f" / {_interval(r['score'], r.get('score_ci_low'), r.get('score_ci_high'))}")  # fmt: skip
    tasks = list(dict.fromkeys(d["task"]))
    if paper and np.isclose(temperature, 1.0):  # the paper's Table 3 (its temperature is not stated)
        for (pair, task, trained), (acc, q) in published.TRANSFER.items():
            row = "SD (lossless)" if trained is None else f"head trained on {trained}"
            cells.setdefault((f"{published.PAIRS[pair]} (paper)", row, "?"), {})[task] = f"{acc:.2f} / {q:g}"
            tasks += [task] if task not in tasks else []
    keys = sorted(cells, key=lambda k: (k[0].endswith("(paper)"), k[0], k[1] != "SD (lossless)", k[1], _n_order(k[2])))
    index = pd.MultiIndex.from_tuples(keys, names=["pair", "row", "N"])
    return pd.DataFrame([[cells[k].get(t, "") for t in tasks] for k in keys], index=index, columns=tasks)


def _markdown(table: pd.DataFrame) -> str:
    head = [*table.index.names, *(": ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in table.columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    lines += ["| " + " | ".join([*map(str, idx), *(v or "" for v in row)]) + " |"
              for idx, row in zip(table.index, table.to_numpy(), strict=True)]  # fmt: skip
    return "\n".join(lines) + "\n"


def _write_table(table: pd.DataFrame, out: Path, name: str, caption: str) -> tuple[list[Path], str]:
    md = f"{caption}\n\n{_markdown(table)}"
    (out / f"{name}.md").write_text(md)
    table.to_csv(out / f"{name}.csv")
    return [out / f"{name}.md", out / f"{name}.csv"], md


# ----------------------------------------------------------------------------- per run dir


def run_summary(run_dir: Path, df: pd.DataFrame, figures: Sequence[Shown], page: Path) -> str:
    """One page: the run's pairs, tasks and counts, its settings fingerprints (settings/<digest>.json,
    which every record names), its records per method, and the figures drawn from its tasks."""
    r = df[df["run_dir"] == str(run_dir)]
    link = lambda p: os.path.relpath(Path(p).resolve(), page.parent.resolve())  # noqa: E731
    join = lambda values: ", ".join(str(v) for v in values) or "–"  # noqa: E731
    lines = [f"# {run_dir}", "",
             f"{len(r)} records · pairs {join(sorted(r['pair'].unique()))} · tasks {join(sorted(r['task'].unique()))} · "
             f"temperatures {join(f'{t:g}' for t in sorted(r['temperature'].unique()))} · N "
             f"{join(int(n) for n in sorted(r['num_draft_tokens'].dropna().unique()))} · examples per point "
             f"{join(int(n) for n in sorted(r['n_examples'].dropna().unique()))}", "", "## Settings fingerprints", ""]  # fmt: skip
    for s in sorted((run_dir / "settings").glob("*.json")):
        body = json.loads(s.read_text())
        task, pair = body.get("task", {}), body.get("pair", {})
        which = "".join(f", {k} {str(body[k])[:8]}" for k in ("head", "draft") if body.get(k))
        lines.append(f"- [`{s.stem}`]({link(s)}){which}: pair {pair.get('name', '?')}, task {task.get('task', '?')} "
                     f"({task.get('n_loaded', '?')} examples, max {task.get('max_new_tokens', '?')} new tokens, stop early "
                     f"{task.get('stop_early', True)}), batch {body.get('batch_size')}, seed {body.get('seed')}, "
                     f"engine {json.dumps(body.get('engine'))}")  # fmt: skip
    lines += ["", "## Records per method", "", "| method | records | settings groups |", "|---|---:|---:|"]
    lines += [f"| {m} | {len(g)} | {g['settings_group'].nunique()} |" for m, g in r.groupby("method", sort=False)]
    lines += ["", "## Figures of its tasks", ""]
    lines += [f"- {f.caption} " + ", ".join(f"[{Path(p).name}]({link(p)})" for p in f.paths)
              for f in figures if set(f.tasks) & set(r["task"])]  # fmt: skip
    return "\n".join(lines) + "\n"


def _rel(path: Path, out: Path) -> str:
    return os.path.relpath(Path(path).resolve(), out.resolve())


# ----------------------------------------------------------------------------- the report


def write_report(run_dirs: Sequence[str | Path], out: str | Path, *, paper: bool = False, n_examples: int = 5,
                 formats: Sequence[str] = ("png", "pdf"), select_split: str = "validation",
                 margin: float = 0.05) -> list[Path]:  # fmt: skip
    """Write the report (see the module docstring); returns every file written. Records of
    `select_split` choose the knob families' settings (`fronts.choose_on`, non-inferiority margin
    `margin` × AR's quality); every other record is reported."""
    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    df = load_runs(run_dirs)
    selecting = df["split"].astype(object).eq(select_split).fillna(False).astype(bool)
    val, test = df[selecting], df[~selecting]
    if not len(test):  # only a validation run: report it (knobs chosen on what is shown)
        val, test = df.iloc[0:0], df
    d = _with_times(mean_over_seeds(test), test)  # cells over examples x seeds, times over seeds
    choices = choose_on(val, margin) if len(val) else None
    written, sections = [], [f"# Report: {', '.join(map(str, run_dirs))}", ""]
    claims = []
    if choices is not None and len(choices):
        choices.to_csv(out / "choices.csv", index=False)
        written.append(out / "choices.csv")
    seeds = sorted(int(s) for s in test["seed"].dropna().unique())
    how = (f"mean over {len(seeds)} seed{'s' * (len(seeds) != 1)} ({', '.join(map(str, seeds))}) and the examples, "
           "[95 % interval: bootstrap over examples, each with all its seeds]")  # fmt: skip
    chosen = (f"Knob families: chosen on the {select_split} split, the most acceptance among settings non-inferior "
              f"to autoregressive decoding there (quality ≥ AR − δ, δ = {margin:g} × AR's {select_split} quality, "
              "paired one-sided 95 % bootstrap; * none was: the best-scoring one), then shown on the reported split"
              if choices is not None and len(choices) else
              f"Knob families: no {select_split} run, so each family's ORACLE setting (chosen on the reported scores "
              "themselves: the most acceptance within AR's 95 % half-width; * none was)")  # fmt: skip
    for t in sorted(d["temperature"].unique(), reverse=True):
        caption = (f"**Table (T = {t:g})**: acceptance = accepted/proposed drafts %, α = accepted/verified drafts % "
                   f"(drafts up to a round's first rejection), quality ×100 per task; {how}; time / AR: time relative to "
                   "autoregressive decoding of the same seed, mean over seeds [95 % interval], per sample at batch 1 "
                   f"where marked b1 (the paper's time), else per pass at the sweep's batch size. {chosen}.")  # fmt: skip
        if paper:
            caption += (" Published rows: the paper does not define its acceptance; its values look like accepted/"
                        "proposed, so they sit in that column, unconfirmed.")  # fmt: skip
        paths, md = _write_table(paper_table(d, t, paper=paper, choices=choices), out, f"table_T{t:g}", caption)
        written += paths
        sections += [md, ""]
        claims += [md, ""]
        if choices is not None and len(choices):
            paths, md = _write_table(paper_table(d, t), out, f"table_oracle_T{t:g}",
                                     f"**Oracle view (T = {t:g})**: the same, each knob family at its setting chosen on "
                                     "the reported (test) scores themselves: an upper bound, not a claim.")  # fmt: skip
            written += paths
            sections += [md, ""]
        diffs = paired_table(test, d, t, choices)
        if diffs is not None:
            paths, md = _write_table(diffs, out, f"paired_T{t:g}",
                                     f"**DIVERSED against each row (T = {t:g})**: paired by example over {len(seeds)} "
                                     "seed(s), 95 % bootstrap interval of the difference; \"better\" / \"worse\" only "
                                     "where the interval excludes 0.")  # fmt: skip
            written += paths
            sections += [md, ""]
            claims += [md, ""]
        transfer = transfer_table(d, t, paper=paper)
        if transfer is not None:
            paths, md = _write_table(transfer, out, f"transfer_T{t:g}", f"**Cross-task transfer (T = {t:g})**: rows the task "
                                     "a head was trained on, columns the task it is evaluated on; accepted/proposed % / "
                                     f"quality ×100, {how}.")  # fmt: skip
            written += paths
            sections += [md, ""]
            claims += [md, ""]
    figs = out / "figures"
    own = d[(d["method"] != "dynamic") | d["head_task"].isna() | (d["head_task"] == d["task"])]  # heads on their own task
    shown = acceptance_vs_w(_with_verified(own, test), figs, formats) + quality_vs_time(own, figs, formats)
    shown += time_vs_acceptance(own, figs, formats)
    for _, r in test[(test["method"] == "dynamic")].iterrows():
        shown += head_learned(r.to_dict(), read_examples(r["run_dir"], r["key"]), figs, n_examples=n_examples, formats=formats)
    pareto = plot_pareto(test, figs, formats=formats)
    shown.append(Shown(pareto, "Pareto figures (plot.py): quality against acceptance and against time, every setting, "
                       "one per pair, task and temperature.", tuple(test["task"].unique())))
    sections += ["## Figures", ""]
    claims += ["Proposition 1 in the figures:", ""]
    for f in shown:
        sections.append(f"- {f.caption} " + ", ".join(f"[{p.name}]({_rel(p, out)})" for p in f.paths))
        if all(p.name.startswith("acceptance_vs_w") for p in f.paths):  # Proposition 1: a claim with numbers
            claims.append(f"- {f.caption} ({', '.join(p.name for p in f.paths if p.suffix == '.png')})")
        written += f.paths
    sections += ["", "## Run directories", ""]
    for run in sorted(df["run_dir"].unique()):
        page = out / "runs" / f"{'_'.join(Path(run).parts[-3:])}.md"
        page.write_text(run_summary(Path(run), df, shown, page))
        written.append(page)
        sections.append(f"- [{run}]({_rel(page, out)})")
    (out / "README.md").write_text("\n".join(sections) + "\n")
    (out / "claims.md").write_text("\n".join(claims) + "\n")  # what a README may quote: tables and captions
    return [out / "README.md", out / "claims.md", *written]


def _with_verified(d: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Seed-averaged records with `verified_drafts` summed over seeds (Proposition 1's error bars)."""
    if "verified_drafts" not in df:
        return d.assign(verified_drafts=np.nan)
    cols = ["pair", "task", "method", "weight", "num_draft_tokens", "temperature", "settings_group"]
    v = df.assign(verified_drafts=pd.to_numeric(df["verified_drafts"]))
    sums = v.groupby(cols, dropna=False)["verified_drafts"].sum(min_count=1).reset_index()
    return d.merge(sums, on=cols, how="left")


def _with_times(d: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Seed-averaged records with each normalised time's mean over seeds and its interval
    (`times.times_over_seeds`, from the per-seed records `df`) for the time figures."""
    by = [c for c in SETTING_FIELDS if c in df and c in d]
    t = times_over_seeds(df, by)
    left = d.drop(columns=[c for c in t if c in d and c not in by])
    for x in (left, t):  # one dtype per key on both sides (a column of None reads as float on one, object on the other)
        x[by] = x[by].astype(object).where(x[by].notna(), None)
    return left.merge(t, on=by, how="left").astype(d[by].dtypes.to_dict())  # the keys' own dtypes back


def main(argv: Sequence[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="python -m diversed.report", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories of python -m diversed.evaluate (searched recursively)")
    parser.add_argument("--out", required=True, help="where the report goes")
    parser.add_argument("--paper", action="store_true", help="add the paper's published numbers as rows")
    parser.add_argument("--examples", type=int, default=5, help="completions per head shown coloured by w")
    parser.add_argument("--formats", nargs="+", default=["png", "pdf"])
    parser.add_argument("--select-split", default="validation",
                        help="records of this split choose each knob family's setting; the others are reported")
    parser.add_argument("--margin", type=float, default=0.05,
                        help="non-inferiority margin δ as a fraction of autoregressive quality (0.05: within 5 %%)")
    args = parser.parse_args(argv)
    if not 0 <= args.margin < 1:
        parser.error(f"--margin {args.margin} is a fraction of autoregressive quality: give one in [0, 1), e.g. 0.05")
    for run in args.runs:
        if not Path(run).is_dir():
            parser.error(f"{run} is not a directory (give run directories of python -m diversed.evaluate)")
    paths = write_report(args.runs, args.out, paper=args.paper, n_examples=args.examples, formats=args.formats,
                         select_split=args.select_split, margin=args.margin)
    print(paths[0])
    return paths


if __name__ == "__main__":
    main()
