"""The paper's report from run directories: its Tables 1-3 and figures, and a summary per run.

    python -m diversed.report RUN_DIR... --out DIR [--paper] [plugins=my_pkg.my_method]

Writes under DIR (Markdown + CSV tables, PNG + PDF figures):

    README.md                 the index: every table inline, every figure with its caption
    claims.md                 what a README may quote: the tables, the times at batch 1, the paired
                              differences, Proposition 1's captions
    table_T<t>.md/.csv        Tables 1 and 2: rows pair x method x N, columns (task, quantity):
                              accepted/proposed %, α = accepted/verified %, quality x100, time / AR; each a
                              mean over examples and seeds with its 95 % interval (`compare.mean_over_seeds`,
                              `times.times_over_seeds`)
    times_T<t>.md/.csv        the same rows' times at batch 1 where a latency pass ran: examples timed,
                              seconds and new tokens per sample, × AR per sample (the tables' b1) and per
                              token
    table_oracle_T<t>.*       the same with each knob family chosen on the reported scores (labelled oracle)
    fronts_T<t>.md/.csv       each speculative row against the static ensemble's front over w: Δ acceptance
                              at equal quality, Δ quality at equal acceptance (`fronts.front_gap`)
    paired_T<t>.md/.csv       DIVERSED minus each row, paired by example (`compare.paired`): "better" /
                              "worse" only where the paired randomisation test's p, Holm-adjusted over
                              the table's tests, is below 0.05 (the caption gives their number)
    heads_T<t>.md/.csv        every head of a cell (one per λ: DIVERSED's front), chosen on validation or
                              not, against the static ensemble at its own mean w, paired likewise
    pooled.md/.csv            the same comparisons pooled over every task, temperature and N, an example's
                              differences averaged over its cells (`compare.pooled_difference`): the
                              head chosen on validation, and every head
    choices.csv               each knob family's choice on the validation run, with its non-inferiority test
    transfer_T<t>.md/.csv     Table 3: a head trained on task A evaluated on task B (the task a head was
                              trained on comes from its record, else from its head_config.json)
    figures/                  acceptance vs w with Proposition 1, quality vs time, time vs acceptance,
                              what the head learned (with sweep.token_w), and plot.py's Pareto figures
    runs/<name>.md            one page per run dir: settings fingerprints, pairs, tasks, counts, figures

Table rows: autoregressive; lossless SD; SD with a fine-tuned draft; each knob family (the static
ensemble, lossy SD, cascades, typical acceptance; a method of one's own, loaded with `plugins=...`: its
`Method.family`) at the setting chosen on the `--select-split` run, its quality cell naming it by the
knob's symbol, "(w=0.5)" (`fronts.choose_on`: the most acceptance among settings non-inferior to
autoregressive decoding, margin `--margin`; * where none was), or, without such a run, its oracle
setting on the reported scores (`fronts.best_at_quality`), labelled so; DIVERSED with the head trained
on the column's task.
`--paper` adds the published numbers (`published.py`) as rows of their own, in the accepted/proposed
column with a note: the paper does not define its acceptance.

Run directories without one readable record (every line skipped, each named in a warning) are a user
error, one line and exit status 2, not a report of nothing.

The tables at each temperature are `TABLES`, one `TableSpec` each (builder, file name, caption, whether
it goes in claims.md), in the order the index shows them; the pooled table follows them, once.

It reads results and heads only: nothing is decoded, rescored or retrained.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from diversed.analysis.compare import mean_over_seeds, setting_fields
from diversed.analysis.drawing import has_interval, plot_pareto
from diversed.analysis.figures import (
    Shown,
    acceptance_vs_w,
    head_learned,
    quality_vs_time,
    time_vs_acceptance,
)
from diversed.analysis.fronts import choose_on
from diversed.analysis.tables import (
    front_table,
    heads_table,
    outputs_table,
    own_task,
    paired_table,
    paper_table,
    pooled_table,
    times_table,
    transfer_table,
    with_times,
)
from diversed.errors import MissingFile, cli
from diversed.files.atomic import write_file
from diversed.files.rundir import read_json
from diversed.models.heads import head_metadata
from diversed.sweep.plugins import add_plugin_option, parse_args
from diversed.sweep.results import load_runs as results_of_runs
from diversed.sweep.results import read_examples, with_head_task

# ----------------------------------------------------------------------------- loading


def load_runs(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Every record of the run dirs with `run_dir` (`results.load_runs`), and `head_task` filled from the
    head's head_config.json where the record lacks it. MissingFile where no line of their results files
    is a record (the warnings name each line skipped)."""
    df = results_of_runs(*run_dirs)
    if not len(df):
        raise MissingFile(
            f"{', '.join(map(str, run_dirs))}: no readable run records (the results.jsonl there are empty "
            "or every line was skipped: the warnings above name each); give run directories of "
            "python -m diversed.evaluate with finished grid points"
        )
    return with_head_task(df)


def _markdown(table: pd.DataFrame) -> str:
    head = [
        *table.index.names,
        *(": ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in table.columns),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    lines += [
        "| " + " | ".join([*map(str, idx), *(v or "" for v in row)]) + " |"
        for idx, row in zip(table.index, table.to_numpy(), strict=True)
    ]
    return "\n".join(lines) + "\n"


def _write_table(table: pd.DataFrame, out: Path, name: str, caption: str) -> tuple[list[Path], str]:
    md = f"{caption}\n\n{_markdown(table)}"
    write_file(out / f"{name}.md", md)
    write_file(out / f"{name}.csv", table.to_csv())
    return [out / f"{name}.md", out / f"{name}.csv"], md


# ----------------------------------------------------------------------------- per run dir


def run_summary(run_dir: Path, df: pd.DataFrame, figures: Sequence[Shown], page: Path) -> str:
    """One page: the run's pairs, tasks and counts, its settings fingerprints (settings/<digest>.json,
    which every record names), its records per method, and the figures drawn from its tasks."""
    r = df[df["run_dir"] == str(run_dir)]
    link = lambda p: os.path.relpath(Path(p).resolve(), page.parent.resolve())  # noqa: E731
    join = lambda values: ", ".join(str(v) for v in values) or "–"  # noqa: E731
    lines = [
        f"# {run_dir}",
        "",
        f"{len(r)} records · pairs {join(sorted(r['pair'].unique()))} · "
        f"tasks {join(sorted(r['task'].unique()))} · "
        f"temperatures {join(f'{t:g}' for t in sorted(r['temperature'].unique()))} · N "
        f"{join(int(n) for n in sorted(r['num_draft_tokens'].dropna().unique()))} · examples per point "
        f"{join(int(n) for n in sorted(r['n_examples'].dropna().unique()))}",
        "",
        "## Settings fingerprints",
        "",
    ]
    for s in sorted((run_dir / "settings").glob("*.json")):
        if (body := read_json(s)) is None:  # (a torn file of an older version: named in a warning)
            lines.append(f"- [`{s.stem}`]({link(s)}): cannot be read")
            continue
        task, pair = body.get("task", {}), body.get("pair", {})
        which = "".join(f", {k} {str(body[k])[:8]}" for k in ("head", "draft") if body.get(k))
        lines.append(
            f"- [`{s.stem}`]({link(s)}){which}: pair {pair.get('name', '?')}, task {task.get('task', '?')} "
            f"({task.get('n_loaded', '?')} examples, max {task.get('max_new_tokens', '?')} new tokens, "
            f"stop early {task.get('stop_early', True)}), "
            f"batch {body.get('batch_size')}, seed {body.get('seed')}, "
            f"engine {json.dumps(body.get('engine'))}"
        )
    drawn = (
        r["sampler"].astype(object).where(r["sampler"].notna(), "not recorded") if "sampler" in r else None
    )
    if drawn is not None and (drawn != "not recorded").any():  # one seed's tokens differ between schemes
        lines += [
            "",
            "Tokens drawn by (the same law; which tokens a seed gives differs between schemes; records "
            "written before 83f2159, 2026-11-29 02:12 UTC, say none): "
            + ", ".join(f"{k} {v} record{'s' * (v != 1)}" for k, v in drawn.value_counts().items()),
        ]
    lines += ["", "## Records per method", "", "| method | records | settings groups |", "|---|---:|---:|"]
    lines += [
        f"| {m} | {len(g)} | {g['settings_group'].nunique()} |" for m, g in r.groupby("method", sort=False)
    ]
    lines += ["", "## Figures of its tasks", ""]
    lines += [
        f"- {f.caption} " + ", ".join(f"[{Path(p).name}]({link(p)})" for p in f.paths)
        for f in figures
        if set(f.tasks) & set(r["task"])
    ]
    return "\n".join(lines) + "\n"


def _rel(path: Path, out: Path) -> str:
    return os.path.relpath(Path(path).resolve(), out.resolve())


# ----------------------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Reading:
    """What every table of one temperature is built from: the reported records (`test`) and their
    seed means (`d`), the knob families' choices (None: no validation run), and the captions' shared
    phrases (`how` the cells are averaged, how the knob families were `chosen`)."""

    t: float
    test: pd.DataFrame
    d: pd.DataFrame
    choices: pd.DataFrame | None
    selection: pd.DataFrame | None  # the validation records' seed means (paired: DIVERSED's own mean w)
    paper: bool
    select_split: str
    paired_over: str  # the seeds a paired difference is over: "3 seed(s)", or each row's own
    how: str
    chosen: str

    @property
    def chose(self) -> bool:
        return self.choices is not None and len(self.choices) > 0


@dataclass(frozen=True)
class TableSpec:
    """One table of the report: `build` gives it (None: nothing to show at this temperature), written
    as `<name>_T<t>.md/.csv` under `caption(reading, table)`, in the index and, with `claim`, in claims.md."""

    name: str
    build: Callable[[Reading], pd.DataFrame | None]
    caption: Callable[[Reading, pd.DataFrame], str]
    claim: bool = True


def _table_caption(r: Reading, _: pd.DataFrame) -> str:
    caption = (
        f"**Table (T = {r.t:g})**: acceptance = accepted/proposed drafts %, α = accepted/verified drafts % "
        f"(drafts up to a round's first rejection), quality ×100 per task; {r.how}; "
        "time / AR: time relative to autoregressive decoding of the same seed, the geometric mean "
        "(over examples × seeds where the timed passes kept per-example times, else over seeds) "
        "[95 % interval on log ratios, exponentiated], per sample at batch 1 where marked b1 "
        "(the paper's time), "
        f"else per pass at the sweep's batch size. {r.chosen}."
    )
    if r.paper:
        caption += (
            " Published rows: the paper does not define its acceptance; its values look like accepted/"
            "proposed, so they sit in that column, unconfirmed."
        )
    return caption


def _times_caption(r: Reading, _: pd.DataFrame) -> str:
    return (
        f"**Times at batch 1 (T = {r.t:g})**: the same rows, each of the first `timed` examples "
        "decoded alone at batch 1 (`timing.latency`); seconds and new tokens per sample, mean "
        "over seeds; × AR: relative to autoregressive decoding of the same seed and examples, "
        "per sample (the table's b1 time) and per generated token, geometric mean [95 % "
        "interval on log ratios, as in the table]; quality of the timed samples, where shown: "
        "the timed completions scored (the scored ones at batch size 1, others above). "
        "Where the methods' outputs differ in length (sampling, "
        "lossy verification), per sample compares lengths as much as speed; per token compares "
        "speed. End to end includes reading the prompt in both models; where shown, s to first "
        "token is the same calls stopped after one new token, and decode only the time per token "
        "after the first, Σ (t − t_first) / Σ (n − 1), relative to autoregressive decoding's."
    )


def _outputs_caption(r: Reading, _: pd.DataFrame) -> str:
    return (
        f"**Outputs (T = {r.t:g})**: the same rows; empty %: completions with nothing to score once "
        "cut at the task's stop sequences (×100), at cap %: completions that ran to the task's "
        "max_new_tokens, cut there rather than ended by the model (×100), tokens / example: new tokens per "
        "example; "
        "means over seeds."
    )


def _oracle_caption(r: Reading, _: pd.DataFrame) -> str:
    return (
        f"**Oracle view (T = {r.t:g})**: the same, each knob family at its setting chosen on "
        "the reported (test) scores themselves: an upper bound, not a claim."
    )


def _heads_caption(r: Reading, diffs: pd.DataFrame) -> str:
    return (
        f"**Every head against the static ensemble at its own mean w (T = {r.t:g})**: each head of a cell "
        "on its own task (one per λ where several were trained: DIVERSED's front), whether or not the "
        "tables above show it (they show the head chosen on validation); its quality ×100 and "
        "accepted/proposed % as in the main table; the static point nearest its mean w (read on the "
        f"{r.select_split} rows where they have the head, else on the reported ones; none if none within "
        f"0.05), and the differences from it paired by example over {r.paired_over}, 95 % bootstrap "
        f"interval (unadjusted); {diffs.attrs['verdicts']}: p from a paired randomisation test, "
        '"better" / "worse" only where its Holm-adjusted p < 0.05.'
    )


def _paired_caption(r: Reading, diffs: pd.DataFrame) -> str:
    return (
        f"**DIVERSED against each row (T = {r.t:g})**, and against the static ensemble at DIVERSED's "
        f"own mean w (read on the {r.select_split} rows where they have the head, else on the reported "
        "ones: the row that says whether a context-dependent w beats its constant level): paired by "
        f"example over {r.paired_over}, 95 % bootstrap interval of the difference (unadjusted); "
        f"{diffs.attrs['verdicts']}: p from a paired randomisation test (A and B swapped within "
        'examples, 9999 draws), "better" / "worse" only where its Holm-adjusted p < 0.05. Rows '
        "marked (target's law) decode exactly as the target does: their differences from each "
        "other are sampling alone."
    )


def _fronts_caption(r: Reading, _: pd.DataFrame) -> str:
    return (
        f"**Against the static front (T = {r.t:g})**: each speculative row against the static "
        "ensemble's front over every w run (same pair, task, N), paired by example: Δ acceptance = "
        "its accepted/proposed % minus the front's at its quality, Δ quality = its quality ×100 "
        "minus the front's at its acceptance, the front interpolated linearly between its "
        "settings; 95 % percentile bootstrap over examples, the front redrawn in every resample "
        "(its noisy maxima lean against "
        'the row). "above" / "below" only where the interval excludes 0; where the row lies beyond '
        "the front's range (better quality or more acceptance than any w) there is no gap to give."
    )


def _pooled_caption(pooled: pd.DataFrame, test: pd.DataFrame) -> str:
    seeds = sorted(int(s) for s in test["seed"].dropna().unique())
    return (
        "**DIVERSED against the static ensemble at its own mean w, pooled over every cell** (task, "
        "temperature, N): each head against the static point nearest its mean w, as the heads and paired "
        "tables pair them (by example, over its seeds); one row for the head each table shows where it was "
        "chosen on validation or was its cell's only head (cells whose heads were not chosen among are "
        "left out of it: see its cells), and, where a cell has several heads, one for every head; each "
        "example's differences averaged over the comparisons it is in, then the mean over "
        "examples (an example counts once however many cells decoded it; where every comparison of a "
        "task holds all its examples, each task's mean over its comparisons, weighted by its examples); "
        "95 % BCa bootstrap over examples "
        f"(unadjusted); {pooled.attrs['verdicts']}: p from a paired sign-flip test on each example's "
        f'mean difference, "better" / "worse" only where its Holm-adjusted p < 0.05. Seeds in the records: '
        f"{_seeds_said(seeds)}."
    )


def _transfer_caption(r: Reading, _: pd.DataFrame) -> str:
    return (
        f"**Cross-task transfer (T = {r.t:g})**: rows the task "
        "a head was trained on, columns the task it is evaluated on; accepted/proposed % / "
        f"quality ×100, {r.how}."
    )


# The report's tables at each temperature, in the order the index shows them.
TABLES = (
    TableSpec("table", lambda r: paper_table(r.d, r.t, paper=r.paper, choices=r.choices), _table_caption),
    TableSpec("times", lambda r: times_table(r.d, r.t, r.choices), _times_caption),
    TableSpec("outputs", lambda r: outputs_table(r.d, r.t, r.choices), _outputs_caption),
    TableSpec(
        "table_oracle", lambda r: paper_table(r.d, r.t) if r.chose else None, _oracle_caption, claim=False
    ),
    TableSpec(
        "paired", lambda r: paired_table(r.test, r.d, r.t, r.choices, selection=r.selection), _paired_caption
    ),
    TableSpec("heads", lambda r: heads_table(r.test, r.d, r.t, selection=r.selection), _heads_caption),
    TableSpec("fronts", lambda r: front_table(r.test, r.d, r.t, r.choices), _fronts_caption),
    TableSpec("transfer", lambda r: transfer_table(r.d, r.t, paper=r.paper), _transfer_caption),
)


def _point_seeds(test: pd.DataFrame) -> Counter[tuple[int, ...]]:
    """How many points (a setting across its seeds: `compare.setting_fields`) ran each set of seeds."""
    fields = [f for f in setting_fields() if f in test]
    if not len(test) or not fields:
        return Counter()
    sets = test.groupby(fields, dropna=False, sort=False)["seed"].agg(
        lambda s: tuple(sorted({int(x) for x in s.dropna()}))
    )
    return Counter(sets.tolist())


def _seeds_said(seeds: Sequence[int]) -> str:
    return f"{len(seeds)} seed{'s' * (len(seeds) != 1)} ({', '.join(map(str, seeds))})"


def _how(seeds: Sequence[int], per_point: Counter[tuple[int, ...]] | None = None) -> str:
    """How every cell is averaged, for the captions: over the seeds every point ran, or, where points
    ran different seeds (a run resumed with more seeds for some of them), over each point's own."""
    if per_point and len(per_point) > 1:
        parts = ", ".join(
            f"{_seeds_said(s)} for {n} point{'s' * (n != 1)}"
            for s, n in sorted(per_point.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        )
        over = (
            f"each point's own seeds ({parts} of the {sum(per_point.values())}: not every row ran every seed)"
        )
    else:
        over = _seeds_said(seeds)
    return (
        f"mean over {over} "
        "and the examples, [95 % interval: bootstrap over examples, each with all its seeds; 0/1 scores: "
        "Wilson's at the effective sample size n·m/deff, deff the seeds' design effect]"
    )


def _chosen(choices: pd.DataFrame | None, val: pd.DataFrame, select_split: str, margin: float) -> str:
    """How the knob families' settings were chosen, for the main table's caption."""
    return (
        f"Knob families: chosen on the {select_split} split, the most acceptance among settings non-inferior "
        f"to autoregressive decoding there (quality ≥ AR − δ, δ = {margin:g} × AR's {select_split} quality, "
        "paired one-sided 95 % bootstrap; * a fallback: none was, the best-scoring one), then shown on the "
        "reported split"
        if choices is not None and len(choices)
        else (
            f"Knob families: none swept on the {select_split} split"
            if len(val)
            else f"Knob families: no {select_split} run"
        )
        + ", so each family's ORACLE setting (chosen on the "
        "reported scores themselves: the most acceptance within AR's 95 % half-width; * none was)"
    )


# ----------------------------------------------------------------------------- the figures


def _figures(
    test: pd.DataFrame, d: pd.DataFrame, choices, figs: Path, n_examples: int, formats
) -> list[Shown]:
    """Every figure with its caption: Proposition 1, quality and time, what each head learned, Pareto."""
    own = d[own_task(d)]  # heads on their own task
    shown = acceptance_vs_w(_with_verified(own, test), figs, formats) + quality_vs_time(own, figs, formats)
    shown += time_vs_acceptance(own, figs, formats)
    # one figure per head, point and settings (its name has no seed), its tokens pooled over the seeds;
    # a point decoded under several settings names each figure by its settings group
    point = ["pair", "task", "temperature", "num_draft_tokens", "head"]
    dyn = test[test["method"] == "dynamic"].sort_values("seed", kind="stable")
    for _, at_point in dyn.groupby(point, sort=False, dropna=False):
        settings = at_point.groupby("settings_group", sort=False, dropna=False)
        for group, g in settings:
            r = g.iloc[0]
            bounds = head_metadata(r["head"]).get("w_bounds") if isinstance(r.get("head"), str) else None
            shown += head_learned(
                {**r.to_dict(), "w_bounds": bounds},
                [
                    {**row, "seed": s["seed"]}
                    for _, s in g.iterrows()
                    for row in read_examples(s["run_dir"], s["key"])
                ],
                figs,
                n_examples=n_examples,
                formats=formats,
                seeds=g["seed"].nunique(),
                tag=str(group)[:6] if settings.ngroups > 1 else "",
            )
    pareto = plot_pareto(test, figs, formats=formats, choices=choices)
    quality_bars = has_interval(d, "score_ci_low", "score_ci_high").any()
    shown.append(
        Shown(
            pareto,
            "Pareto figures (plot.py): quality against acceptance and against time, every setting, "
            "one per pair, task and temperature, a row per draft length N; each knob family drawn as its "
            "front, the setting the tables show ringed where it was chosen on the validation split; "
            "DIVERSED's heads named by the task each was trained on; "
            + (
                "faint horizontal bars: the quality's 95 % interval where the records hold one (none on "
                "acceptance or time)."
                if quality_bars
                else "no error bars: the records hold no interval of the quality."
            ),
            tuple(test["task"].unique()),
        )
    )
    return shown


# ----------------------------------------------------------------------------- the report


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    paper: bool = False,
    n_examples: int = 5,
    formats: Sequence[str] = ("png", "pdf"),
    select_split: str = "validation",
    margin: float = 0.05,
) -> list[Path]:
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
    d = with_times(mean_over_seeds(test), test)  # cells over examples x seeds, times over seeds
    choices = choose_on(val, margin).assign(split=select_split) if len(val) else None  # tables name it
    written, sections, claims = [], [f"# Report: {', '.join(map(str, run_dirs))}", ""], []
    if choices is not None and len(choices):
        write_file(out / "choices.csv", choices.to_csv(index=False))
        written.append(out / "choices.csv")
    selection = mean_over_seeds(val, examples=False) if len(val) else None
    chosen = _chosen(choices, val, select_split, margin)
    for t in sorted(d["temperature"].unique(), reverse=True):
        at = test[np.isclose(test["temperature"].astype(float), float(t))]  # a table's own points
        seeds, per_point = sorted(int(s) for s in at["seed"].dropna().unique()), _point_seeds(at)
        paired_over = (
            "each row's own seeds (an example's mean over them; not every row ran every seed)"
            if len(per_point) > 1
            else f"{len(seeds)} seed(s)"
        )
        how = _how(seeds, per_point)
        reading = Reading(t, test, d, choices, selection, paper, select_split, paired_over, how, chosen)
        for spec in TABLES:
            if (table := spec.build(reading)) is None:
                continue
            paths, md = _write_table(table, out, f"{spec.name}_T{t:g}", spec.caption(reading, table))
            written.extend(paths)
            sections.extend([md, ""])
            if spec.claim:
                claims.extend([md, ""])
    if (pooled := pooled_table(test, d, choices, selection)) is not None:  # every temperature at once
        paths, md = _write_table(pooled, out, "pooled", _pooled_caption(pooled, test))
        written.extend(paths)
        sections.extend([md, ""])
        claims.extend([md, ""])
    shown = _figures(test, d, choices, out / "figures", n_examples, formats)
    sections += ["## Figures", ""]
    claims += ["Proposition 1 and what the heads learned, in the figures:", ""]
    for f in shown:
        sections.append(f"- {f.caption} " + ", ".join(f"[{p.name}]({_rel(p, out)})" for p in f.paths))
        # captions with numbers a README may quote: Proposition 1's gaps, the heads' w distributions
        if all(p.name.startswith(("acceptance_vs_w", "head_learned", "w_by_token_class")) for p in f.paths):
            claims.append(f"- {f.caption} ({', '.join(p.name for p in f.paths if p.suffix == '.png')})")
        written += f.paths
    sections += ["", "## Run directories", ""]
    for run in sorted(df["run_dir"].unique()):
        page = out / "runs" / f"{'_'.join(Path(run).parts[-3:])}.md"
        write_file(page, run_summary(Path(run), df, shown, page))
        written.append(page)
        sections.append(f"- [{run}]({_rel(page, out)})")
    write_file(out / "README.md", "\n".join(sections) + "\n")
    write_file(out / "claims.md", "\n".join(claims) + "\n")  # what a README may quote: tables and captions
    return [out / "README.md", out / "claims.md", *written]


def _with_verified(d: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Seed-averaged records with `verified_drafts` summed over seeds (Proposition 1's error bars)."""
    if "verified_drafts" not in df:
        return d.assign(verified_drafts=np.nan)
    cols = ["pair", "task", "method", "weight", "num_draft_tokens", "temperature", "settings_group"]
    v = df.assign(verified_drafts=pd.to_numeric(df["verified_drafts"]))
    sums = v.groupby(cols, dropna=False)["verified_drafts"].sum(min_count=1).reset_index()
    return d.merge(sums, on=cols, how="left")


def run(argv: Sequence[str] | None = None) -> list[Path]:
    """`python -m diversed.report`: the files written (the report's README printed)."""
    parser = argparse.ArgumentParser(prog="python -m diversed.report", description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs", nargs="+", help="run directories of python -m diversed.evaluate (searched recursively)"
    )
    parser.add_argument("--out", required=True, help="where the report goes")
    parser.add_argument("--paper", action="store_true", help="add the paper's published numbers as rows")
    parser.add_argument("--examples", type=int, default=5, help="completions per head shown coloured by w")
    parser.add_argument("--formats", nargs="+", default=["png", "pdf"])
    parser.add_argument(
        "--select-split",
        default="validation",
        help="records of this split choose each knob family's setting; the others are reported",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="non-inferiority margin δ as a fraction of autoregressive quality (0.05: within 5 %%)",
    )
    add_plugin_option(parser)
    args = parse_args(parser, argv)  # plugins=... loaded first
    if not 0 <= args.margin < 1:
        parser.error(
            f"--margin {args.margin} is a fraction of autoregressive quality: give one in [0, 1), e.g. 0.05"
        )
    for run in args.runs:
        if not Path(run).is_dir():
            parser.error(f"{run} is not a directory (give run directories of python -m diversed.evaluate)")
    paths = write_report(
        args.runs,
        args.out,
        paper=args.paper,
        n_examples=args.examples,
        formats=args.formats,
        select_split=args.select_split,
        margin=args.margin,
    )
    print(paths[0])
    return paths


def main(argv: list[str] | None = None) -> int:
    """The console script: exit status 0, or 2 with a user error's message (`errors.cli`)."""
    return cli(run, argv)


if __name__ == "__main__":
    sys.exit(main())
