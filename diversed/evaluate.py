"""The evaluation grid: methods × knob (w, head, ...) × draft length N × temperature, for one pair and task.

`python -m diversed.evaluate +experiment=toy plugins=[my_pkg.mod]` imports the plugins (modules that
register methods or tasks of one's own) before Hydra composes (`sweep/plugins.py`), checks every
setting, then plans (`_plan`): loads the task's examples and describes the pair from its files
(prompts fit the context, no N is more than the task's new tokens let a round draft, each path knob's
values checked through its knob: heads finite and fitting the pair, drafts with its vocabulary,
`sweep/resources.py`) before any weights are read; then loads (`_load`), runs and records (`_run`,
`_decode`). Each grid point is keyed by a fingerprint of everything
that determines its output (task settings and prompt texts, the pair's identity, engine options,
batch size, seed, a head's or draft's files): re-running the same command skips finished points without even
loading the pair, and a changed setting gives new points. Records from before fingerprints are
read (plots) but never resumed into. Each fingerprint's settings and resolved config are kept in
`settings/` and `configs/` beside the results; nothing is overwritten (but a torn file).
`sweep.dry_run=true` stops there: it prints every point, done or to run, and how long those to run
will take by the run's finished records (`times.estimate_seconds`; no estimate without them).

One evaluate at a time writes a run directory: it holds the directory's lock (`rundir.hold`) from
start to end, and a second one is refused at once, told who holds it (a dry run takes no lock).
When every point is done it writes nothing but that lock, and on a read-only directory not even
that: a finished sweep re-runs there (Hydra's own files too: `hydra/evaluate.yaml`,
`hydra/job_logging/diversed.yaml`).

A point is decoded once and scored once per example, then timed apart from scoring
(`sweep/point.py`: `timing.warmup`, `timing.repeats` passes at `sweep.batch_size`, with
`timing.latency` passes at batch 1); the grid and the settings that key its points are
`sweep/grid.py`. Times are normalised by the autoregressive point of the same temperature, settings
and seed (`times.normalized`: the one rule, which `results.load_results` applies to older records).

Records go to `<run dir>/results.jsonl` through `results.ResultStore` (a killed run leaves nothing
partial), their per-example rows (dataset id, prompt as the model saw it, tokens cut from its start
by task.max_prompt_tokens, reference, completion, what the task extracted, score) beside them, and
to the configured loggers. Hydra multirun fans out over any axis, the grid's too: `-m
sweep.weights=0.3,0.7 sweep.draft_lengths=3,5` gives each job one value of each (`sweep/settings.py` takes a
value for a list of it), and a point a sibling job has decoded (the autoregressive baseline, lossless SD
at one N) is copied from it, not decoded again (`siblings.py`; `sweep.reuse_siblings=false`: every job
decodes all of its points).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from diversed import CONFIG_DIR
from diversed.config.jobs import parallel_launcher, sweep_job
from diversed.config.runtime import (
    finish,
    instantiate,
    keep_freed_memory,
    make_loggers,
    quiet,
    set_threads,
    show_config,
)
from diversed.config.schema import check_settings
from diversed.decoding.prompt_cache import PromptCache
from diversed.errors import ConfigError, hydra_task, on_interrupt
from diversed.files.provenance import digest
from diversed.files.rundir import hold, keep_settings
from diversed.models.pair import describe_pair
from diversed.sweep.grid import comparison_group, grid, make_verifier, settings_fingerprint
from diversed.sweep.methods import METHODS
from diversed.sweep.plugins import start
from diversed.sweep.point import run_point, time_point
from diversed.sweep.pointlog import PointLog
from diversed.sweep.preflight import check_draft_lengths
from diversed.sweep.resources import Resources, check_resources, load_resources
from diversed.sweep.results import ResultStore, grid_key, read_records, run_fields
from diversed.sweep.settings import EvaluateSettings, evaluate_schema
from diversed.sweep.siblings import REUSED_FROM, Siblings
from diversed.sweep.times import Baselines, estimate_seconds, measured
from diversed.tasks.context import check_context
from diversed.training.settings import DistillSettings, TrainSettings

log = logging.getLogger(__name__)


def check_evaluate(cfg: Any) -> EvaluateSettings:
    """Validate `python -m diversed.evaluate`'s config (`sweep/settings.evaluate_schema`: its `plugins`
    imported first, so their knobs are settings too; train's and distill's sections, which a preset holds
    too, checked for unknown keys); ConfigError listing every problem."""
    schema = evaluate_schema(cfg)
    others = (TrainSettings, DistillSettings)
    return check_settings(schema, cfg, "diversed.evaluate", others)  # type: ignore[return-value]


# ----------------------------------------------------------------------------- the runner


def evaluate(cfg: DictConfig) -> Path:
    """Run every grid point not yet in the run directory, holding its lock (`rundir.hold`: one writer at a
    time; a dry run only reads); returns the directory. A Ctrl-C ends as one line: how many grid points
    the run directory holds, which the same command skips (`errors.on_interrupt`)."""
    check_evaluate(cfg)  # every setting, before anything is read
    set_threads(cfg.get("runtime", {}).get("threads"))
    keep_freed_memory(cfg.get("runtime", {}).get("malloc", "keep"))
    quiet(bool(cfg.get("runtime", {}).get("verbose", False)))
    run_dir = Path(cfg.paths.output_dir)
    if cfg.sweep.get("dry_run", False):
        with on_interrupt(lambda: "a dry run writes nothing"):
            return _sweep(cfg, run_dir, writable=False)

    def saved() -> str:  # read when Ctrl-C is pressed: each record is a finished grid point, written whole
        n = len(read_records(run_dir))
        points = f"{n} grid point{'s are' if n != 1 else ' is'}"
        return f"{points} saved in {run_dir}; the same command resumes (it skips the saved points)"

    with on_interrupt(saved), hold(run_dir) as writable:  # False: a read-only directory (a finished sweep)
        return _sweep(cfg, run_dir, writable=writable)


def _sweep(cfg: DictConfig, run_dir: Path, *, writable: bool) -> Path:
    """Plan the grid (every check, nothing loaded), then load the pair and what the methods load, run
    each point still to run, and record it."""
    store = ResultStore(run_dir) if writable else None  # (opening it repairs what a killed run left)
    plan = _plan(cfg, run_dir, store)
    if cfg.sweep.get("dry_run", False):  # the plan, then out: no weights are read
        print(_dry_run(plan))
        return run_dir
    copied, todo = _copy_from_siblings(plan, store)
    if not todo:
        log.info(f"Every grid point is done ({run_dir}): nothing to run")
        return run_dir
    if store is None:
        raise ConfigError(
            f"{run_dir} cannot be written (read-only) and {len(todo)} of its {len(plan.points)} grid points "
            "are still to run: make it writable, or give another directory (paths.output_dir=... or "
            "hydra.run.dir=...)"
        )
    loaded = _load(cfg, plan, copied)
    _run(cfg, plan, loaded, todo, store)
    return run_dir


# ----------------------------------------------------------------------------- plan: nothing loaded


@dataclass
class Plan:
    """What a sweep runs, checked before any weights load: the task, the path knobs'
    values (`resources.Resources`), the fields and settings every record shares, and the points."""

    task: Any
    resources: Resources
    common: dict[str, Any]  # settings_fingerprint: every point's settings but its seed and its files
    groups: dict[str, str]  # settings_group, comparison_group: in every record
    meta: dict[str, Any]  # pair, task, n_examples, metric, split: in every record and key
    options: dict[str, Any]  # the task's recorded options, in every record
    finished: list[dict[str, Any]]
    siblings: Siblings
    timing: dict[str, Any]
    engine: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)
    todo: list[dict[str, Any]] = field(default_factory=list)

    def settings(self, point: dict[str, Any]) -> dict[str, Any]:
        """The point's settings: the common ones, its seed, its path values' files (a head's, a draft's)."""
        return {**self.common, "seed": point["seed"], **self.resources.settings(point)}

    def key(self, point: dict[str, Any]) -> str:
        return grid_key(**self.meta, **point)


def _plan(cfg: DictConfig, run_dir: Path, store: ResultStore | None) -> Plan:
    """The task loaded and the pair described from its files (no weights), every check that needs them
    (context, draft lengths, each path knob's values), the grid and which of its points are done; each
    fingerprint's settings and config kept beside the records."""
    sweep = cfg.sweep
    engine = OmegaConf.to_container(cfg.engine, resolve=True)
    finished = store.found if store is not None else read_records(run_dir)  # (the file read once)
    log.info(f"Loading task <{cfg.task.name}>")
    task = instantiate(cfg.task)
    card = describe_pair(cfg.pair)  # the pair's files, no weights
    check_context(card, task, task.max_new_tokens)
    if any(METHODS[m].speculative for m in sweep.methods):  # N is recorded as given: it must run as given
        check_draft_lengths(
            list(sweep.draft_lengths), task.max_new_tokens, engine.get("first_token", "ensemble")
        )
    resources = check_resources(card, sweep)  # heads, drafts, a plugin's files: through their knobs
    meta = {
        "pair": card.name if card is not None else str(cfg.pair.get("name")),
        "task": task.name,
        "n_examples": len(task),
        "metric": task.metric,
        "split": task.source.get("split"),
    }
    options = task.option_settings()  # the task's recorded options (part of its settings()), in every record
    if clash := sorted(set(options) & {*run_fields(), *meta}):
        raise ConfigError(
            f"task {task.name}'s options {clash} have the names of record fields (results.run_fields()), "
            "which they would overwrite: rename them in its options"
        )
    common, timing = settings_fingerprint(cfg, task, card), OmegaConf.to_container(cfg.timing, resolve=True)
    plan = Plan(
        task=task,
        resources=resources,
        common=common,
        # one group for every seed of these settings: plots average over seeds within a group only; the
        # comparison group also leaves out which examples (split, subset): a validation run and a test run
        # of one protocol share it, so a knob chosen on one is looked up in the other (fronts.choose_on)
        groups={
            "settings_group": digest({k: v for k, v in common.items() if k != "seed"}),
            "comparison_group": comparison_group(common),
        },
        meta=meta,
        options=options,
        finished=finished,
        siblings=Siblings(
            run_dir,
            (sweep_job() or (0, None))[1] if sweep.get("reuse_siblings", True) else None,
            timing,
            token_w=bool(sweep.get("token_w", False)),
        ),
        timing=timing,
        engine=engine,
    )
    seeds = [int(cfg.seed) + i for i in range(int(sweep.get("num_seeds", 1)))]  # each point once per seed
    points = [{**p, "seed": seed} for seed in seeds for p in grid(sweep, resources.paths())]
    plan.points = [{**p, "settings": digest(plan.settings(p))} for p in points]
    done = {r["key"] for r in finished}
    plan.todo = [p for p in plan.points if plan.key(p) not in done]
    if legacy := sum(1 for r in finished if not r.get("settings")):
        log.warning(
            f"{run_dir}: {legacy} records from before settings fingerprints are kept (and plotted) but not "
            "resumed: their points run again"
        )
    log.info(f"{len(plan.points)} grid points, {len(plan.points) - len(plan.todo)} already done")
    if store is not None:  # each fingerprint's settings and config, written again where torn
        for p in {p["settings"]: p for p in plan.points}.values():
            keep_settings(
                run_dir, p["settings"], plan.settings(p), lambda: OmegaConf.to_yaml(cfg, resolve=True)
            )
    return plan


def _dry_run(plan: Plan) -> str:
    """The dry run's text (`plan`): what is to copy from sibling jobs found first."""
    threads = torch.get_num_threads()
    return plan_text(
        plan.points,
        plan.todo,
        plan.finished,
        n_examples=len(plan.task),
        timing=plan.timing,
        batch_size=int(plan.common["batch_size"]),
        shared=[p for p in plan.todo if plan.siblings.find(plan.key(p), threads)],
    )


def _copy_from_siblings(
    plan: Plan, store: ResultStore | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(records copied, points still to run): what a sibling job of this multirun has decoded already is
    copied, not decoded."""
    copied, still = [], []
    for p in plan.todo:
        record = _reuse(plan.siblings, store, plan.key(p)) if store is not None else None
        if record is None:
            still.append(p)
        else:
            copied.append(record)
    return copied, still


# ----------------------------------------------------------------------------- load: the weights


@dataclass
class Loaded:
    """What running the points needs, loaded once: the pair, the path knobs' values (all by path; those
    that replace the draft apart), the loggers, the time baselines and the prompt cache."""

    pair: Any
    loaded: dict[str, Any]
    drafts: dict[str, Any]
    loggers: list[Any]
    beside: str | None  # Hydra's parallel launcher, if jobs run side by side
    base: Baselines
    prompt_cache: PromptCache | None


def _load(cfg: DictConfig, plan: Plan, copied: list[dict[str, Any]]) -> Loaded:
    """The config shown, the pair and the path knobs' values loaded, the loggers made; warnings for
    times that would not be fair."""
    show_config(cfg)  # once everything is checked: an error is not buried under the config
    log.info(f"Loading pair <{cfg.pair._target_}>")
    pair = instantiate(cfg.pair)
    loaded, drafts = load_resources(plan.resources, pair)
    loggers = make_loggers(cfg, job_type="evaluate")
    for lg in loggers:
        lg.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    timing, beside = plan.timing, parallel_launcher()
    if beside and (timing["repeats"] or timing.get("latency")):
        log.warning(
            f"Hydra's launcher runs jobs side by side ({beside}): times measured at once are not comparable "
            "(each job slows the others). Time with hydra/launcher=basic, or score with timing.repeats=0 "
            "and time later; the records say parallel_launcher"
        )
    # the time baselines: autoregressive points, as they finish too
    base = Baselines([*plan.finished, *copied])
    gb = float(cfg.sweep.get("prompt_cache_gb", 0) or 0)
    # each batch's prompt pass, computed once per model and read by the later points
    prompt_cache = PromptCache(gb * 2**30) if gb > 0 else None
    if prompt_cache is not None and not timing["repeats"] and not timing.get("latency"):
        log.warning(
            "sweep.prompt_cache_gb > 0 with timing.repeats=0 and timing.latency=false: the points get no "
            "times (a scored pass that reused prompt passes is not a fair time); set timing.repeats or "
            "timing.latency=true to time them"
        )
    return Loaded(pair, loaded, drafts, loggers, beside, base, prompt_cache)


# ----------------------------------------------------------------------------- run and record


def _run(cfg: DictConfig, plan: Plan, loaded: Loaded, todo: list[dict[str, Any]], store: ResultStore) -> None:
    """Each point still to run: decoded, timed and written (`_decode`), or copied from the sibling job
    that decoded it meanwhile; logged as it finishes."""
    # the points' bar, and each point's examples
    progress = bool(cfg.get("runtime", {}).get("progress", True))
    bar = tqdm(todo, desc=f"{plan.meta['pair']} · {plan.task.name}", unit="point", disable=not progress)
    points_log = PointLog(loaded.loggers)
    with logging_redirect_tqdm():
        for index, point in enumerate(bar):
            bar.set_postfix_str(f"{len(plan.task)} examples, {point['method']}")
            with plan.siblings.claim(key := plan.key(point)):  # a job beside this one may decode it
                record = _reuse(plan.siblings, store, key)
                if record is None:
                    record = _decode(cfg, plan, loaded, point, store, progress=progress)
                else:
                    loaded.base.add(record)
            points_log.add(record, index)
            log.info(_line(record))
    if loaded.prompt_cache is not None:
        log.info(f"prompt cache: {loaded.prompt_cache.summary()}")
    finish(loaded.loggers)


def _decode(
    cfg: DictConfig, plan: Plan, loaded: Loaded, point: dict[str, Any], store: ResultStore, *, progress: bool
) -> dict[str, Any]:
    """One grid point decoded and scored (`run_point`), timed (`time_point`) and written as a record."""
    sweep, timing, pair = cfg.sweep, plan.timing, loaded.pair
    verifier = make_verifier(point, loaded.loaded)
    batch = 1 if METHODS[point["method"]].batch_one else int(sweep.batch_size)
    args = {
        "batch_size": batch,
        "by_length": bool(sweep.get("batch_by_length", False)),
        "seed": point["seed"],
        "engine": plan.engine,
        "drafts": loaded.drafts,
        "progress": progress,
        "prompt_cache": loaded.prompt_cache,
    }
    token_w = bool(sweep.get("token_w", False))
    fields, rows = run_point(pair, plan.task, point, verifier, **args, token_w=token_w)
    fields |= time_point(pair, plan.task, point, verifier, timing=timing, **args)
    fields |= measured(fields)
    fields["timing"] = {
        **timing,
        "batch_size": batch,
        "threads": torch.get_num_threads(),
        "device": str(pair.device),
    } | ({"parallel_launcher": loaded.beside} if loaded.beside else {})
    fields |= plan.resources.record(point)  # a head's: the task it learned on (Table 3)
    record = {
        **plan.meta,
        **point,
        **fields,
        **plan.options,
        **plan.groups,
    }
    loaded.base.add(record)
    record |= loaded.base.normalized(record)
    return store.write(record, rows)


def _reuse(siblings: Siblings, store: ResultStore, key: str) -> dict[str, Any] | None:
    """The point `key` copied from the sibling job that decoded it (`siblings.py`), or None."""
    found = siblings.find(key, torch.get_num_threads())
    if found is None:
        return None
    record = store.write(found.record, found.rows)
    log.info(f"{_line(record)} (decoded by the job {found.record[REUSED_FROM]} of this multirun: copied)")
    return record


def plan_text(
    points: list[dict[str, Any]],
    todo: list[dict[str, Any]],
    finished: list[dict[str, Any]],
    *,
    n_examples: int,
    timing: dict[str, Any],
    batch_size: int,
    shared: Sequence[dict[str, Any]] = (),
) -> str:
    """A dry run's text: each grid point (method and knobs, N, T, seed), done, to copy (a sibling job of
    the multirun has it) or to run, and how long those to run will take by `times.estimate_seconds` from
    the run's finished records, with what that rests on."""
    lines, copied = [], {id(q) for q in shared}
    waiting = {id(q) for q in todo} - copied
    todo = [q for q in todo if id(q) in waiting]
    for p in points:
        n = f"  N={p['num_draft_tokens']}" if p.get("num_draft_tokens") is not None else ""
        state = "to run" if id(p) in waiting else "copy" if id(p) in copied else "done"
        lines.append(
            f"{state:>6}  {METHODS[p['method']].describe(p)}{n}  T={p['temperature']:g}  seed={p['seed']}"
        )
    seconds, basis = estimate_seconds(
        todo, finished, n_examples=n_examples, timing=timing, batch_size=batch_size
    )
    took = (
        "no estimate"
        if seconds is None
        else "about "
        + (
            f"{seconds / 3600:.1f} h"
            if seconds >= 3600
            else f"{seconds / 60:.1f} min"
            if seconds >= 60
            else f"{seconds:.2g} s"
        )
    )
    copies = f", {len(copied)} to copy from sibling jobs" if copied else ""
    lines.append(
        f"{len(points)} grid points, {len(points) - len(todo) - len(copied)} done{copies}, {len(todo)} to "
        f"run on {n_examples} examples each: {took} ({basis})"
    )
    return "\n".join(lines)


def _line(r: dict[str, Any]) -> str:
    """One record as a rounded log line."""
    knob = "".join(
        f" {k.field}={k.show(r[k.field])}" for k in METHODS[r["method"]].knobs if r.get(k.field) is not None
    )
    n = f" N={r['num_draft_tokens']}" if r.get("num_draft_tokens") is not None else ""
    acc = f" acc={r['acceptance_rate']:.3f}" if r.get("acceptance_rate") is not None else ""
    norm = f" ({r['normalized_time']:.2f}x autoregressive)" if r.get("normalized_time") is not None else ""
    wall = f", {r['wall_time_s']:.3g} s{norm}" if r.get("wall_time_s") is not None else ""
    lat = f", {r['latency_s']:.3g} s per sample alone" if r.get("latency_s") is not None else ""
    return f"{r['method']:>14} T={r['temperature']:g}{n}{knob}: score {r['score']:.3f}{acc}{wall}{lat}"


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="evaluate")
@hydra_task
def _main(cfg: DictConfig) -> None:
    print(evaluate(cfg))


def main() -> None:
    """`python -m diversed.evaluate`: the plugins the command line names loaded, then Hydra composes."""
    start()
    _main()


if __name__ == "__main__":
    main()
