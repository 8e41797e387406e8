"""The paper's report from run directories: its Tables 1-3 and figures, and a summary per run.

    python -m diversed.report RUN_DIR... --out DIR [--paper]

Writes under DIR (Markdown + CSV tables, PNG + PDF figures):

    README.md                 the index: every table inline, every figure with its caption
    table_T<t>.md/.csv        Tables 1 and 2: rows pair x method x N, columns task, cells
                              "acceptance % / quality" (quality x100: accuracy %, ROUGE x100, pass@1 %)
    transfer_T<t>.md/.csv     Table 3: a head trained on task A evaluated on task B (the task a head was
                              trained on comes from its record, else from its head_config.json)
    figures/                  acceptance vs w with Proposition 1, quality vs time, time vs acceptance,
                              what the head learned (with sweep.token_w), and plot.py's Pareto figures
    runs/<name>.md            one page per run dir: settings fingerprints, pairs, tasks, counts, figures

Table rows: autoregressive; lossless SD; SD with a fine-tuned draft; each knob family (the static
ensemble, lossy SD, cascades, typical acceptance) at its best setting at the quality of
autoregressive decoding (`fronts.best_at_quality`, the setting shown in the cell; * where none
reached that quality and the best-scoring one is shown); DIVERSED with the head trained on the
column's task. `--paper` adds the published numbers (`published.py`) as rows of their own.

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
from diversed.figures import Shown, acceptance_vs_w, head_learned, quality_vs_time, time_vs_acceptance
from diversed.fronts import SETTING_FIELDS, best_at_quality, mean_over_seeds
from diversed.heads import head_metadata
from diversed.methods import METHOD_NAMES, METHODS, head_label
from diversed.plot import plot_pareto
from diversed.results import load_results, read_examples
from diversed.times import times_over_seeds

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


def _cell(acc: float | None, score: float | None, note: str = "") -> str:
    a = "–" if acc is None or pd.isna(acc) else f"{100 * acc:.2f}"
    s = "–" if score is None or pd.isna(score) else f"{100 * score:.2f}"
    return f"{a} / {s}{note}"


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
        return f"{m.name_only}{rule}{delta}, best at AR quality"
    return m.label if m is not None else str(method)


def _n_order(n: str) -> int:
    return int(n) if n.isdigit() else -1  # "–" (autoregressive) and "?" (published) first


def _pair_labels(d: pd.DataFrame) -> pd.Series:
    """The pair, with its settings digest where one pair and task have results under several settings."""
    groups = d["settings_group"].astype(object).fillna("").astype(str)
    several = d.assign(g=groups).groupby(["pair", "task"])["g"].transform("nunique") > 1
    return d["pair"].where(~several, d["pair"] + " [" + groups.str[:6] + "]")


# ----------------------------------------------------------------------------- Tables 1 and 2


def paper_table(d: pd.DataFrame, temperature: float, *, paper: bool = False) -> pd.DataFrame:
    """Table 1 / 2 at one temperature from seed-averaged records: index (pair, method, N), one
    column per task, string cells "acceptance % / quality"."""
    d = d[np.isclose(d["temperature"].astype(float), temperature)]
    d = best_at_quality(d).assign(pair_label=lambda x: _pair_labels(x))
    same_task = (d["method"] != "dynamic") | d["head_task"].isna() | (d["head_task"] == d["task"])
    d = d[same_task]
    several = set()
    for method, knob in (("dynamic", "head"), ("finetuned_draft", "draft_model")):
        rows = d[d["method"] == method]
        if len(rows) and rows.groupby(["pair_label", "task", "num_draft_tokens"])[knob].nunique().max() > 1:
            several.add(method)
    order = {m: i for i, m in enumerate(METHOD_NAMES)}
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    keys: list[tuple[int, tuple[str, str, str]]] = []
    for _, r in d.iterrows():
        n = "–" if pd.isna(r["num_draft_tokens"]) else str(int(r["num_draft_tokens"]))
        key = (r["pair_label"], _row_label(r, several), n)
        if key not in cells:
            cells[key] = {}
            keys.append((order.get(r["method"], 99), key))
        acc = r["acceptance_rate"] if METHODS.get(r["method"]) and METHODS[r["method"]].speculative else None
        cells[key][r["task"]] = _cell(acc, r["score"], _knob_note(r))
    tasks = list(dict.fromkeys(d["task"]))
    if paper:
        for (t, pair, method, task), (acc, q) in published.TABLES.items():
            if np.isclose(t, temperature):
                key = (f"{published.PAIRS[pair]} (paper)", published.METHODS[method], "?")
                if key not in cells:
                    cells[key] = {}
                    keys.append((1000 + order.get(method, 99), key))
                cells[key][task] = f"{acc:.2f} / {q:g}"
                tasks += [task] if task not in tasks else []
    keys.sort(key=lambda k: (k[1][0].endswith("(paper)"), k[1][0], k[0], _n_order(k[1][2]), k[1][1]))
    index = pd.MultiIndex.from_tuples([k for _, k in keys], names=["pair", "method", "N"])
    table = pd.DataFrame([[cells[k].get(t, "") for t in tasks] for _, k in keys], index=index, columns=tasks)
    table.attrs["temperature"] = float(temperature)
    return table


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
        cells.setdefault(key, {})[r["task"]] = _cell(r["acceptance_rate"], r["score"])
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
    head = [*table.index.names, *map(str, table.columns)]
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
                 formats: Sequence[str] = ("png", "pdf")) -> list[Path]:  # fmt: skip
    """Write the report (see the module docstring); returns every file written."""
    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    df = load_runs(run_dirs)
    d = mean_over_seeds(df)
    written, sections = [], [f"# Report: {', '.join(map(str, run_dirs))}", ""]
    for t in sorted(d["temperature"].unique(), reverse=True):
        caption = (f"**Table (T = {t:g})**: acceptance % / quality ×100 per task (mean over seeds). Knob families: "
                   "their best setting at autoregressive quality (* none reached it: the best-scoring one).")  # fmt: skip
        paths, md = _write_table(paper_table(d, t, paper=paper), out, f"table_T{t:g}", caption)
        written += paths
        sections += [md, ""]
        transfer = transfer_table(d, t, paper=paper)
        if transfer is not None:
            paths, md = _write_table(transfer, out, f"transfer_T{t:g}", f"**Cross-task transfer (T = {t:g})**: rows the task a head was trained on, columns the task it is evaluated on.")
            written += paths
            sections += [md, ""]
    figs = out / "figures"
    own = d[(d["method"] != "dynamic") | d["head_task"].isna() | (d["head_task"] == d["task"])]  # heads on their own task
    timed = _with_times(own, df)
    shown = acceptance_vs_w(_with_verified(own, df), figs, formats) + quality_vs_time(timed, figs, formats)
    shown += time_vs_acceptance(timed, figs, formats)
    for _, r in df[(df["method"] == "dynamic")].iterrows():
        shown += head_learned(r.to_dict(), read_examples(r["run_dir"], r["key"]), figs, n_examples=n_examples, formats=formats)
    pareto = plot_pareto(df, figs, formats=formats)
    shown.append(Shown(pareto, "Pareto figures (plot.py): quality against acceptance and against time, every setting, "
                       "one per pair, task and temperature.", tuple(df["task"].unique())))
    sections += ["## Figures", ""]
    for f in shown:
        sections.append(f"- {f.caption} " + ", ".join(f"[{p.name}]({_rel(p, out)})" for p in f.paths))
        written += f.paths
    sections += ["", "## Run directories", ""]
    for run in sorted(df["run_dir"].unique()):
        page = out / "runs" / f"{'_'.join(Path(run).parts[-3:])}.md"
        page.write_text(run_summary(Path(run), df, shown, page))
        written.append(page)
        sections.append(f"- [{run}]({_rel(page, out)})")
    (out / "README.md").write_text("\n".join(sections) + "\n")
    return [out / "README.md", *written]


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
    return d.drop(columns=[c for c in t if c in d and c not in by]).merge(t, on=by, how="left")


def main(argv: Sequence[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="python -m diversed.report", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories of python -m diversed.evaluate (searched recursively)")
    parser.add_argument("--out", required=True, help="where the report goes")
    parser.add_argument("--paper", action="store_true", help="add the paper's published numbers as rows")
    parser.add_argument("--examples", type=int, default=5, help="completions per head shown coloured by w")
    parser.add_argument("--formats", nargs="+", default=["png", "pdf"])
    args = parser.parse_args(argv)
    for run in args.runs:
        if not Path(run).is_dir():
            parser.error(f"{run} is not a directory (give run directories of python -m diversed.evaluate)")
    paths = write_report(args.runs, args.out, paper=args.paper, n_examples=args.examples, formats=args.formats)
    print(paths[0])
    return paths


if __name__ == "__main__":
    main()
