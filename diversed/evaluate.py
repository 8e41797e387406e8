"""The evaluation grid: methods × knob (w, head, ...) × draft length N × temperature, for one pair and task.

`python -m diversed.evaluate +experiment=toy` imports the config's `plugins` (modules that register
methods of one's own, `methods.py`), checks every setting, then loads the task's
examples and describes the pair from its files (`preflight.py`: prompts fit the context, heads fit
the pair) before any weights are read. Each grid point is keyed by a fingerprint of everything
that determines its output (task settings and prompt texts, the pair's identity, engine options,
batch size, seed, a head's files): re-running the same command skips finished points without even
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

A point is decoded once and scored, then timed apart from scoring: `timing.warmup` untimed passes,
`timing.repeats` timed passes over all examples at `sweep.batch_size` (throughput), and, with
`timing.latency`, `timing.latency_repeats` passes that decode each example alone at batch 1 (the
paper's mean wall time per sample). Every run is recorded; `times.py` turns them into medians,
times per token and intervals. The time baseline `autoregressive` decodes with the target alone on
the engine's own forward path; transformers' `generate` is the separate reference method
`hf_generate`. Times are normalised by the autoregressive point of the same temperature, settings
and seed (`times.normalized`: the one rule, which `results.load_results` applies to older records).

Records go to `<run dir>/results.jsonl` through `results.ResultStore` (a killed run leaves nothing
partial), their per-example rows (dataset id, prompt as the model saw it, tokens cut from its start
by task.max_prompt_tokens, reference, completion, what the task extracted, score) beside them, and
to the configured loggers. Coarse axes (task, experiment, cluster fan-out) are Hydra multirun's job,
not this module's.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from diversed import CONFIG_DIR
from diversed.analysis.compare import mean_interval
from diversed.config.jobs import parallel_launcher
from diversed.config.runtime import (
    PointLog,
    finish,
    instantiate,
    make_loggers,
    quiet,
    set_threads,
    show_config,
)
from diversed.config.schema import check_evaluate
from diversed.decoding.autoregressive import autoregressive_generate
from diversed.decoding.engine import speculative_generate
from diversed.decoding.inputs import left_pad
from diversed.decoding.reference import transformers_generate
from diversed.decoding.stats import Totals
from diversed.decoding.stopping import decode_completions
from diversed.decoding.verify import Verifier
from diversed.errors import ConfigError, hydra_task
from diversed.files.provenance import digest, task_settings
from diversed.files.rundir import hold, keep_settings
from diversed.models.heads import WeightHead, head_metadata
from diversed.models.pair import describe_pair, hidden_size
from diversed.sweep.methods import METHODS
from diversed.sweep.preflight import check_context, check_drafts, check_heads, describe
from diversed.sweep.results import ResultStore, grid_key, read_records, run_fields
from diversed.sweep.times import Baselines, estimate_seconds, measured
from diversed.tasks.base import Task

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- the grid


def grid(
    sweep: DictConfig | dict, heads: dict[str, Any], drafts: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """Grid points in run order: per temperature, the non-speculative methods first (in the registry's
    order), then per N each speculative method at each combination of its knobs' values (`sweep.<key>`
    per knob, its default grid where the config has none; heads and fine-tuned drafts as checked, by
    path), skipping combinations the method does not have."""
    import itertools

    checked = {"heads": list(heads), "draft_models": list(drafts or {})}
    methods = [m for m in METHODS if m in set(sweep["methods"])]
    for temperature in sweep["temperatures"]:
        for name in methods:
            if not METHODS[name].speculative:
                yield {"method": name, "temperature": float(temperature)}
        for n in sweep["draft_lengths"]:
            base = {"temperature": float(temperature), "num_draft_tokens": int(n)}
            for name in methods:
                m = METHODS[name]
                if not m.speculative:
                    continue
                values = [
                    checked[k.sweep] if k.sweep in checked else list(sweep.get(k.sweep, k.default))
                    for k in m.knobs
                ]
                for combination in itertools.product(*values):
                    point = {"method": name, **dict(zip(m.fields, combination, strict=True)), **base}
                    if m.valid is None or m.valid(point):
                        yield point


def make_verifier(point: dict[str, Any], heads: dict[str, WeightHead]) -> Verifier | None:
    """The engine's verifier for a grid point (None: a method without one, e.g. autoregressive)."""
    build = METHODS[point["method"]].verifier
    return None if build is None else build(point, heads)


def load_heads(paths: list[str], pair: Any) -> dict[str, WeightHead]:
    """Each head, checked against the pair's hidden sizes, keyed by its path."""
    sizes = {"draft_hidden_size": hidden_size(pair.draft), "target_hidden_size": hidden_size(pair.target)}
    return {str(p): WeightHead.from_pretrained(p, **sizes).to(pair.device).eval() for p in paths}


def load_drafts(paths: list[str], pair: Any) -> dict[str, Any]:
    """Each fine-tuned draft (a `save_pretrained` directory) in the pair's dtype, on its device,
    frozen, on the pair's forward path; keyed by its path."""
    from transformers import AutoModelForCausalLM

    from diversed.decoding import draft_vocab
    from diversed.decoding.forward import use_forward

    drafts = {}
    for path in paths:
        model = draft_vocab.attach(AutoModelForCausalLM.from_pretrained(path, dtype=pair.target.dtype), path)
        model = model.to(pair.device)  # (a restricted vocabulary's head put back first)
        model.eval().requires_grad_(False)
        use_forward(model, pair.forward)
        drafts[str(path)] = model
    return drafts


# ----------------------------------------------------------------------------- one grid point


def decode(
    pair: Any,
    point: dict[str, Any],
    verifier: Verifier | None,
    ids,
    mask,
    *,
    max_new: int,
    seed: int,
    stop=None,
    engine: dict[str, Any] | None = None,
    drafts: dict[str, Any] | None = None,
):
    """One batch by the point's method: the engine, our autoregressive loop, or transformers (alone,
    or assisted with its static ensemble); rows end at EOS, at `max_new` tokens, or where `stop`
    (a task's `stopper`) says. A fine-tuned draft (`point["draft_model"]`) replaces the pair's."""
    tok, T, engine = pair.tokenizer, point["temperature"], dict(engine or {})
    # the engine's sampling truncation goes to every decoder: the same p and q for each method
    common = {
        "max_new_tokens": max_new,
        "do_sample": T > 0,
        "temperature": T if T > 0 else 1.0,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "stop": stop,
        "top_k": engine.pop("top_k", 0),
        "top_p": engine.pop("top_p", 1.0),
    }
    generator = torch.Generator(device=ids.device).manual_seed(seed)
    method = METHODS[point["method"]]
    draft = (drafts or {}).get(point.get("draft_model"), pair.draft)
    if method.decoder == "transformers":
        torch.manual_seed(seed)  # transformers samples from the global generator
        if not method.speculative:
            return transformers_generate(pair.target, ids, mask, **common)
        return transformers_generate(
            pair.target,
            ids,
            mask,
            draft=draft,
            ensemble_weight=point.get("weight"),
            num_draft_tokens=point["num_draft_tokens"],
            **common,
        )
    if method.decoder == "autoregressive":
        return autoregressive_generate(pair.target, ids, mask, generator=generator, **common)
    return speculative_generate(
        pair.target,
        draft,
        ids,
        mask,
        verifier=verifier,
        generator=generator,
        num_draft_tokens=point["num_draft_tokens"],
        **engine,
        **common,
    )


def run_point(
    pair: Any,
    task: Task,
    point: dict[str, Any],
    verifier: Verifier | None,
    *,
    batch_size: int,
    seed: int,
    engine: dict[str, Any] | None = None,
    drafts: dict[str, Any] | None = None,
    token_w: bool = False,
    progress: bool = False,
):
    """Decode every example once and score it once (every metric of the task: `Task.checked_metrics`);
    returns (record fields, per-example rows). With
    `token_w`, rows of points whose verifier has a weight keep w at each emitted token and the tokens;
    with `progress`, a transient bar counts the examples decoded."""
    tok = pair.tokenizer
    examples = list(task)
    prompts, cuts = task.encode_cut(tok, examples)
    stop = task.stopper(tok)
    rows, totals, new_tokens, wall = [], Totals(), 0, 0.0
    metric_sums: dict[str, float] = {}
    scores: list[float] = []
    bar = tqdm(total=len(examples), desc="decode", unit="example", leave=False, disable=not progress)
    for start in range(0, len(examples), batch_size):
        batch = examples[start : start + batch_size]
        ids, mask = left_pad(prompts[start : start + batch_size], tok.pad_token_id, pair.device)
        out = decode(
            pair,
            point,
            verifier,
            ids,
            mask,
            max_new=task.max_new_tokens,
            seed=seed + start,
            stop=stop,
            engine=engine,
            drafts=drafts,
        )
        stats, n_new = out.stats, out.stats.new_tokens
        wall += stats.wall_time_s
        completions = decode_completions(tok, out.sequences, ids.shape[1], n_new)
        batch_metrics = task.checked_metrics(batch, completions)  # each completion scored once
        batch_scores = [m[task.metric] for m in batch_metrics]
        scores += batch_scores
        for m in batch_metrics:
            if set(m) != {task.metric}:  # tasks with several metrics (ROUGE-1/2/L): each one's mean, recorded
                for k, v in m.items():
                    metric_sums[k] = metric_sums.get(k, 0.0) + v
        new_tokens += int(n_new.sum())
        totals.add(stats)
        bar.update(len(batch))
        speculative = METHODS[point["method"]].speculative
        for i, ex in enumerate(batch):
            rows.append(
                {
                    "example_id": task.example_id(ex, start + i),
                    "prompt_tokens_cut": cuts[start + i],
                    "prompt": tok.decode(prompts[start + i])
                    if cuts[start + i]
                    else task.full_prompt(ex),  # what it saw
                    "reference": task.reference(ex),
                    "completion": completions[i],
                    "extracted": task.extract(ex, completions[i]),
                    "score": batch_scores[i],
                    "new_tokens": int(n_new[i]),
                    "accepted_drafts": int(stats.accepted[i]) if speculative else None,
                    "proposed_drafts": int(stats.proposed[i])
                    if speculative
                    else None,  # acceptance rate's denominator
                    "verified_drafts": int(stats.verified[i])
                    if speculative and stats.verified is not None
                    else None,  # α's
                }
            )
            if token_w and stats.token_w is not None:
                n = int(n_new[i])
                rows[-1]["tokens"] = out.sequences[i, ids.shape[1] : ids.shape[1] + n].tolist()
                rows[-1]["token_text"] = [
                    pair.tokenizer.decode([t]) for t in rows[-1]["tokens"]
                ]  # for the report
                rows[-1]["token_w"] = [round(float(v), 4) for v in stats.token_w[i, :n]]
    bar.close()
    score, low, high = mean_interval(scores)
    spec = METHODS[point["method"]].speculative
    fields = {
        "score": score,
        "score_ci_low": low,
        "score_ci_high": high,
        **totals.record(drafts=spec),  # the statistics (stats.RECORDED); without drafts, theirs are None
        "new_tokens": new_tokens,
        "scored_wall_time_s": wall,
        **{k: v / max(len(scores), 1) for k, v in metric_sums.items()},
    }
    return fields, rows


def time_point(
    pair: Any,
    task: Task,
    point: dict[str, Any],
    verifier: Verifier | None,
    *,
    batch_size: int,
    seed: int,
    timing: dict[str, Any],
    engine: dict[str, Any] | None = None,
    drafts: dict[str, Any] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Wall times of the point, apart from scoring (the same seeds: the same outputs as scored).
    Throughput: `repeats` passes over all examples at `batch_size` after `warmup` passes; latency:
    `latency_repeats` passes over the first `latency_examples` (null: all), each alone at batch 1,
    the mean per sample, and the tokens one such pass generates (alone, sampling draws other seeds).
    With `progress`, a transient bar counts the examples decoded over all these passes."""
    tok = pair.tokenizer
    prompts = task.encode(tok, list(task))
    stop = task.stopper(tok)
    kwargs = {"max_new": task.max_new_tokens, "stop": stop, "engine": engine, "drafts": drafts}

    new_tokens = []  # generated in the last pass

    def passes(batches: list[list[list[int]]], count: int) -> list[float]:
        times = []
        for _ in range(count):
            start, outs = time.perf_counter(), []
            for i, batch in enumerate(batches):
                ids, mask = left_pad(batch, tok.pad_token_id, pair.device)
                outs.append(
                    decode(pair, point, verifier, ids, mask, seed=seed + i * len(batches[0]), **kwargs)
                )
                bar.update(len(batch))
            times.append(time.perf_counter() - start)
            new_tokens[:] = [int(o.stats.new_tokens.sum()) for o in outs]
        return times

    out: dict[str, Any] = {}
    batches = [prompts[i : i + batch_size] for i in range(0, len(prompts), batch_size)]
    alone = (
        [[p] for p in prompts[: timing.get("latency_examples") or len(prompts)]]
        if timing.get("latency")
        else []
    )
    lat_repeats = timing.get("latency_repeats") or max(1, timing["repeats"])
    total = timing["warmup"] * sum(map(len, batches[:1])) + timing["repeats"] * len(prompts)
    bar = tqdm(
        total=total + bool(alone) * (timing["warmup"] + lat_repeats * len(alone)),
        desc="timing",
        unit="example",
        leave=False,
        disable=not progress,
    )
    passes(batches[:1], timing["warmup"])
    runs = passes(batches, timing["repeats"])
    if runs:
        out.update(wall_time_s=statistics.median(runs), wall_time_runs=runs)
    if alone:
        passes(alone[:1], timing["warmup"])
        lat = [t / len(alone) for t in passes(alone, lat_repeats)]
        out.update(
            latency_s=statistics.median(lat),
            latency_runs=lat,
            latency_examples=len(alone),
            latency_new_tokens=sum(new_tokens),
        )
    bar.close()
    return out


# ----------------------------------------------------------------------------- the runner


# engine options added after the first records, and their values that behave as before they existed
LATER_ENGINE_OPTIONS = {"first_token": ("ensemble",), "top_k": (0, None), "top_p": (1.0,)}


def engine_settings(engine: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The engine options of a fingerprint: a later option at its old behaviour is left out, so
    points from before it keep their keys (and their run directories resume)."""
    engine = OmegaConf.to_container(engine, resolve=True) if isinstance(engine, DictConfig) else dict(engine)
    return {
        k: v for k, v in engine.items() if not (k in LATER_ENGINE_OPTIONS and v in LATER_ENGINE_OPTIONS[k])
    }


def settings_fingerprint(cfg: DictConfig, task: Task, card: Any) -> dict[str, Any]:
    """Everything that determines a grid point's output, but the point itself and its head."""
    pair = describe(card) or {"config": OmegaConf.to_container(cfg.pair, resolve=True)}
    return {
        "task": task_settings(task),
        "pair": pair,
        "engine": engine_settings(cfg.engine),
        "batch_size": int(cfg.sweep.batch_size),
        "seed": int(cfg.seed),
    }


# What says which examples a run scored: left out of the comparison group (see evaluate).
_WHICH_EXAMPLES = (
    "split",
    "n_examples",
    "n_loaded",
    "examples",
    "prompts",
    "selection",
    "data_files",
    "seed",
)


def comparison_group(common: dict[str, Any]) -> str:
    """Digest of the settings without the seed and without which examples were scored: records of one
    protocol on its validation and its test split share it."""
    task = {k: v for k, v in common["task"].items() if k not in _WHICH_EXAMPLES}
    return digest({**{k: v for k, v in common.items() if k != "seed"}, "task": task})


def evaluate(cfg: DictConfig) -> Path:
    """Run every grid point not yet in the run directory, holding its lock (`rundir.hold`: one writer at a
    time; a dry run only reads); returns the directory."""
    check_evaluate(cfg)  # every setting, before anything is read
    set_threads(cfg.get("runtime", {}).get("threads"))
    quiet(bool(cfg.get("runtime", {}).get("verbose", False)))
    run_dir = Path(cfg.paths.output_dir)
    if cfg.sweep.get("dry_run", False):
        return _sweep(cfg, run_dir, writable=False)
    with hold(run_dir) as writable:  # False: a read-only directory, which a finished sweep may be
        return _sweep(cfg, run_dir, writable=writable)


def _sweep(cfg: DictConfig, run_dir: Path, *, writable: bool) -> Path:
    sweep, timing = cfg.sweep, OmegaConf.to_container(cfg.timing, resolve=True)
    engine = OmegaConf.to_container(cfg.engine, resolve=True)
    store = ResultStore(run_dir) if writable else None  # (opening it repairs what a killed run left)
    finished = store.found if store is not None else read_records(run_dir)  # (the file read once)

    log.info(f"Loading task <{cfg.task.name}>")
    task = instantiate(cfg.task)
    card = describe_pair(cfg.pair)  # the pair's files, no weights
    check_context(card, task, task.max_new_tokens)
    head_digests = check_heads(
        card,
        list(sweep.heads) if "dynamic" in sweep.methods else [],
        allow_other_pairs=bool(sweep.get("allow_other_pair_heads", False)),
    )
    head_tasks = {h: head_metadata(h).get("task") for h in head_digests}  # Table 3: what each head learned on
    draft_digests = check_drafts(card, list(sweep.draft_models) if "finetuned_draft" in sweep.methods else [])
    for method, key, found in (
        ("dynamic", "heads", head_digests),
        ("finetuned_draft", "draft_models", draft_digests),
    ):
        if method in sweep.methods and not found:
            log.warning(f"sweep.methods has {method} but sweep.{key} is empty: no {method} points")
    common = settings_fingerprint(cfg, task, card)
    name = card.name if card is not None else str(cfg.pair.get("name"))
    meta = {
        "pair": name,
        "task": task.name,
        "n_examples": len(task),
        "metric": task.metric,
        "split": task.source.get("split"),
    }
    seeds = [
        int(cfg.seed) + i for i in range(int(sweep.get("num_seeds", 1)))
    ]  # each point decoded once per seed
    options = task.option_settings()  # the task's recorded options (part of its settings()), in every record
    if clash := sorted(set(options) & {*run_fields(), *meta}):
        raise ConfigError(
            f"task {task.name}'s options {clash} have the names of record fields (results.run_fields()), "
            "which they would overwrite: rename them in its options"
        )

    def settings_of(point: dict[str, Any]) -> dict[str, Any]:  # a head's or a draft's files are part of it
        extra = {
            "head": head_digests.get(point.get("head")),
            "draft": draft_digests.get(point.get("draft_model")),
        }
        return {**common, "seed": point["seed"], **{k: v for k, v in extra.items() if v}}

    # one group for every seed of these settings: plots average over seeds within a group only; the
    # comparison group also leaves out which examples (split, subset): a validation run and a test run of
    # one protocol share it, so a knob chosen on one is looked up in the other (fronts.choose_on)
    group = digest({k: v for k, v in common.items() if k != "seed"})
    comparison = comparison_group(common)
    points = [{**p, "seed": seed} for seed in seeds for p in grid(sweep, head_digests, draft_digests)]
    points = [{**p, "settings": digest(settings_of(p))} for p in points]
    done = {r["key"] for r in finished}
    todo = [p for p in points if grid_key(**meta, **p) not in done]
    legacy = sum(1 for r in finished if not r.get("settings"))
    if legacy:
        log.warning(
            f"{run_dir}: {legacy} records from before settings fingerprints are kept (and plotted) but not "
            "resumed: their points run again"
        )
    log.info(f"{len(points)} grid points, {len(points) - len(todo)} already done")
    if store is not None:  # each fingerprint's settings and config, written again where torn
        for p in {p["settings"]: p for p in points}.values():
            keep_settings(
                run_dir, p["settings"], settings_of(p), lambda: OmegaConf.to_yaml(cfg, resolve=True)
            )
    if sweep.get("dry_run", False):  # the plan, then out: no weights are read
        print(
            plan(
                points, todo, finished, n_examples=len(task), timing=timing, batch_size=int(sweep.batch_size)
            )
        )
        return run_dir
    if not todo:
        log.info(f"Every grid point is done ({run_dir}): nothing to run")
        return run_dir
    if store is None:
        raise ConfigError(
            f"{run_dir} cannot be written (read-only) and {len(todo)} of its {len(points)} grid points "
            "are still to run: make it writable, or give another directory (paths.output_dir=... or "
            "hydra.run.dir=...)"
        )

    show_config(cfg)  # once everything is checked: an error is not buried under the config
    log.info(f"Loading pair <{cfg.pair._target_}>")
    pair = instantiate(cfg.pair)
    heads, drafts = load_heads(list(head_digests), pair), load_drafts(list(draft_digests), pair)
    loggers = make_loggers(cfg, job_type="evaluate")
    for lg in loggers:
        lg.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    points_log, beside = PointLog(loggers), parallel_launcher()
    if beside and (timing["repeats"] or timing.get("latency")):
        log.warning(
            f"Hydra's launcher runs jobs side by side ({beside}): times measured at once are not comparable "
            "(each job slows the others). Time with hydra/launcher=basic, or score with timing.repeats=0 "
            "and time later; the records say parallel_launcher"
        )
    base = Baselines(finished)  # the time baselines: autoregressive points, as they finish too
    progress = bool(
        cfg.get("runtime", {}).get("progress", True)
    )  # the points' bar, and each point's examples
    bar = tqdm(todo, desc=f"{name} · {task.name}", unit="point", disable=not progress)
    with logging_redirect_tqdm():
        for index, point in enumerate(bar):
            bar.set_postfix_str(f"{len(task)} examples, {point['method']}")
            verifier = make_verifier(point, heads)
            batch = 1 if METHODS[point["method"]].batch_one else int(sweep.batch_size)
            args = {
                "batch_size": batch,
                "seed": point["seed"],
                "engine": engine,
                "drafts": drafts,
                "progress": progress,
            }
            fields, rows = run_point(
                pair, task, point, verifier, **args, token_w=bool(sweep.get("token_w", False))
            )
            fields |= time_point(pair, task, point, verifier, timing=timing, **args)
            fields |= measured(fields)
            fields["timing"] = {
                **timing,
                "batch_size": batch,
                "threads": torch.get_num_threads(),
                "device": str(pair.device),
            } | ({"parallel_launcher": beside} if beside else {})
            if point.get("head"):
                fields["head_task"] = head_tasks[point["head"]]
                if isinstance(head_digests[point["head"]], dict):  # sweep.allow_other_pair_heads: say so
                    fields["head_trained_on_pair"] = head_digests[point["head"]]["trained_on_pair"]
            record = {
                **meta,
                **point,
                **fields,
                **options,
                "settings_group": group,
                "comparison_group": comparison,
            }
            base.add(record)
            record |= base.normalized(record)
            record = store.write(record, rows)
            points_log.add(record, index)
            log.info(_line(record))
    finish(loggers)
    return run_dir


def plan(
    points: list[dict[str, Any]],
    todo: list[dict[str, Any]],
    finished: list[dict[str, Any]],
    *,
    n_examples: int,
    timing: dict[str, Any],
    batch_size: int,
) -> str:
    """A dry run's text: each grid point (method and knobs, N, T, seed), done or to run, and how long those
    to run will take by `times.estimate_seconds` from the run's finished records, with what that rests on."""
    lines, waiting = [], {id(q) for q in todo}
    for p in points:
        n = f"  N={p['num_draft_tokens']}" if p.get("num_draft_tokens") is not None else ""
        state = "to run" if id(p) in waiting else "done"
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
    lines.append(
        f"{len(points)} grid points, {len(points) - len(todo)} done, {len(todo)} to run on "
        f"{n_examples} examples each: {took} ({basis})"
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
    return (
        f"{r['method']:>14} T={r['temperature']:g}{n}{knob}: score {r['score']:.3f}{acc}, "
        f"{r['wall_time_s']:.3g} s{norm}"
    )


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="evaluate")
@hydra_task
def main(cfg: DictConfig) -> None:
    print(evaluate(cfg))


if __name__ == "__main__":
    main()
