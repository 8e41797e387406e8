"""Check the performance goals of the speed issue (#7), or the CPU floors of the real-pair speed
issue (#42, `--floors cpu`), on a bench run's records.

    python -m diversed.bench --output bench.json
    python scripts/bench_goals.py bench.json [--temperature 1.0]
    python scripts/bench_goals.py qwen.json --floors cpu
    python scripts/bench_goals.py qwen.json --floors cpu --quality RUN_DIR... [--margin 0.05]

The CPU floors, per generated token at batch 1, end to end and decode only (prompt passes left out):
lossless speculative decoding at least 1.0x autoregressive decoding with the same target, forward
path and temperature; the static ensemble (or DIVERSED) at least 1.5x at quality non-inferior to
autoregressive decoding; every speculative setting at least 0.8 of the bound
(1 - a^(N+1)) / ((1 - a)(N c + 1)), a and c measured in the same run; a verification pass at most 1.5
one-token steps (v/d). A floor "holds" where the 95 % interval's lower end clears it, is "point" where
only the estimate does, else "MISS".

Quality is not the bench's to measure (it decodes a few prompts, unscored). `--quality RUN_DIR...`
takes it from `python -m diversed.evaluate` runs: for each timed static / DIVERSED / lossless setting,
the test split's points that decoded what it timed (`matching_points`: the same method, temperature, N and
knobs, the same head by its digest, the same target, draft, dtype and draft quantization, the same
engine options), paired by example against autoregressive decoding of the same task rows, target and
dtype (those of the point's own settings group first); non-inferior where the one-sided 95 % lower
bound of the difference clears -delta, delta = `--margin` (default 0.05) x autoregressive quality, as
the sweep chooses knobs (`analysis.compare.non_inferior`). The 1.5x floor then "holds" only where the
speedup's interval clears 1.5 AND quality is non-inferior ("point" where only the estimate clears 1.5); "none"
where no point matches, or its per-example rows are missing. Where quality is not shown, the line
also says how many paired examples would show it with 80 % power at the differences' observed spread
(`compare.examples_needed`): were the setting as good as autoregressive decoding, and were it worse by
the difference observed ("no n" where that difference is below -delta). Lossless records get the same
quality line as information ("info": no floor, their law is the target's): how far a test of this size
resolves quality at all (left out, not refused, where several settings groups decoded it).

The goals are the issue's, not the product's (so they live here, not in `diversed.bench`): our
engine at batch 1 at least 2x transformers' assisted generation; batch 8 at least 3x batch 1; the
speedup at least 0.8 of the theoretical one; training rollouts at least 2x sampling from v.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any


def goals(records: list[dict[str, Any]], temperature: float) -> str:
    """The goals, each as measured against its target."""
    rows = []
    ours = [r for r in records if r["engine"] == "diversed"]
    for r in ours:
        if r.get("ratio_to_transformers") is not None:
            rows.append(("tok/s vs transformers", r["label"], r["ratio_to_transformers"], 2.0, ""))
    for r in ours:
        if r.get("ratio_to_batch_1") is not None:
            rows.append(("tok/s vs our batch 1", r["label"], r["ratio_to_batch_1"], 3.0, ""))
    for r in ours:
        if r.get("speedup_fraction_of_theory") is not None:
            note = f"speedup {r['speedup']:.2f} of {r['theoretical_speedup']:.2f}"
            if r.get("verify_decode_time_ratio") is not None:  # absent where the target made no decoding step
                note += (
                    f"; a verify forward costs {r['verify_decode_time_ratio']:.2f} one-token decoding steps: "
                    f"{r['speedup_fraction_at_verify_cost']:.2f} of the bound at that cost"
                )
            rows.append(("speedup / theory", r["label"], r["speedup_fraction_of_theory"], 0.8, note))
    for r in ours:
        if r.get("speedup_over_v_sampling") is not None and r["temperature"] == temperature:
            note = f"bound {r['theoretical_speedup_over_v_sampling']:.2f}"
            rows.append(("rollouts vs sampling v", r["label"], r["speedup_over_v_sampling"], 2.0, note))
    return "\n".join(
        f"{'ok  ' if value >= goal else 'MISS'} {what:<23} {label:<56} {value:5.2f} (goal {goal:g}) {note}"
        for what, label, value, goal, note in rows
    )


FLOORS = {"lossless": 1.0, "static": 1.5, "dynamic": 1.5}  # speedup over autoregressive decoding
BOUND_FLOOR, VERIFY_CEILING = 0.8, 1.5
AT_QUALITY = ("static", "dynamic")  # their floor holds at quality non-inferior to autoregressive decoding
QUALITY_LINES = (*AT_QUALITY, "lossless")  # lossless: a line of information (the target's law, no floor)
MARGIN = 0.05  # delta = MARGIN x autoregressive quality, as the sweep's knob choice (fronts.choose_on)


def cpu_floors(records: list[dict[str, Any]], quality: dict[str, dict[str, Any]] | None = None) -> str:
    """The real-pair speed issue's floors on our engine's batch-1 records (module docstring); with
    `quality` (`quality_against_ar`, by record label), the static / DIVERSED floor at that quality."""
    rows = []
    for r in records:
        if r["engine"] != "diversed" or r["batch_size"] != 1 or r.get("speedup") is None:
            continue
        if r["verifier"] not in FLOORS:  # (the bonus from p too: the released code's rule)
            continue
        floor = FLOORS[r["verifier"]]
        for what, key in (("speedup, end to end", "speedup"), ("speedup, decode only", "decode_speedup")):
            low = r.get(f"{key}_low")
            verdict = "holds" if low is not None and low >= floor else "point" if r[key] >= floor else "MISS"
            interval = "" if low is None else f"[{low:.2f}, {r[f'{key}_high']:.2f}]"
            rows.append((verdict, what, r["label"], f"{r[key]:.2f} {interval}", f">= {floor:g}"))
            if quality is not None and r["verifier"] in AT_QUALITY:
                rows.append(_at_quality(verdict, what, r, quality.get(r["label"]), floor))
        if quality is not None and r["verifier"] not in AT_QUALITY and r["label"] in quality:
            # exact (the target's law): no floor; how far a test of this size resolves quality at all
            shown = _quality_shown(quality[r["label"]])
            rows.append(("info", "quality, the target's law", r["label"], shown, "(no floor: exact)"))
        theory = r["theoretical_speedup"]
        for what, key in (
            ("of the bound, end to end", "speedup"),
            ("of the bound, decode", "decode_speedup"),
        ):
            share = r[key] / theory
            rows.append(
                ("holds" if share >= BOUND_FLOOR else "MISS", what, r["label"], f"{share:.2f}", ">= 0.8")
            )
        v = r.get("verify_decode_time_ratio")
        if v is not None:
            rows.append(("holds" if v <= VERIFY_CEILING else "MISS", "v/d", r["label"], f"{v:.2f}", "<= 1.5"))
    return "\n".join(
        f"{verdict:<5} {what:<34} {label:<56} {value:<20} {goal}"
        for verdict, what, label, value, goal in rows
    )


def _at_quality(speed: str, what: str, r: dict[str, Any], q: dict[str, Any] | None, floor: float) -> tuple:
    """The floor's row at quality: the speed verdict joined with non-inferiority (`quality_against_ar`)."""
    if q is None:
        return ("none", f"{what}, at quality", r["label"], "no quality point", "--quality")
    shown = _quality_shown(q)
    verdict = (
        "holds" if speed == "holds" and q["holds"] else "point" if speed != "MISS" and q["holds"] else "MISS"
    )
    return (verdict, f"{what}, at quality", r["label"], shown, f">= {floor:g} and >= -{100 * q['delta']:.2f}")


def _quality_shown(q: dict[str, Any]) -> str:
    """A quality comparison's value: the paired difference ×100, its one-sided lower bound and n, and
    where non-inferiority is not shown, the paired examples that would show it (80 % power,
    `compare.examples_needed`): were the setting as good as autoregressive decoding, and at this diff."""
    shown = f"quality {100 * q['diff']:+.2f}, low {100 * q['low']:+.2f} (n {q['n']}"
    if not q["holds"]:
        needed = (_count(q["n_needed"]), _count(q["n_needed_at_diff"]))
        shown += f"; to show it: {needed[0]} if as good, {needed[1]} at this diff"
    return shown + ")"


def _count(n: float) -> str:
    """An example count for the verdict line: "no n" where none would do (inf), "?" where unknown."""
    return "no n" if n == float("inf") else "?" if n != n else f"{int(n):,}"


def quality_against_ar(
    records: list[dict[str, Any]], run_dirs: list[str], margin: float = MARGIN
) -> dict[str, dict[str, Any]]:
    """For each batch-1 static / DIVERSED / lossless record of our engine, its quality against
    autoregressive decoding from the sweep points under `run_dirs` that decoded what it timed
    (`matching_points`), by record label: {diff, low (one-sided 95 %), n, delta, holds, n_needed,
    n_needed_at_diff, run_dir, n_examples}. Records that no point matches are left out. Lossless has no
    floor at quality (it is the target's law); its line says what a test of this size resolves."""
    from diversed.analysis.compare import non_inferior, per_example
    from diversed.sweep.results import load_runs

    runs = load_runs(*run_dirs)
    runs = runs[runs["split"].fillna("test") == "test"]  # held-out rows: never the validation split's
    out = {}
    for r in records:
        if r["engine"] != "diversed" or r["batch_size"] != 1 or r["verifier"] not in QUALITY_LINES:
            continue
        try:
            found = matching_points(r, runs)
        except SystemExit:  # several settings groups decoded it: refused, but lossless is information only
            if r["verifier"] in AT_QUALITY:
                raise
            continue
        if found is None:
            continue
        points, reference = found
        a, ref = per_example(points), per_example(reference)
        if a is None or ref is None:
            continue
        delta = margin * float(ref["score"].mean())
        test = non_inferior(a, ref, delta)
        out[r["label"]] = test | {
            "delta": delta,
            "run_dir": str(points["run_dir"].iloc[0]),
            "n_examples": int(points["n_examples"].iloc[0]),
        }
    return out


def _settings(row: Any) -> dict[str, Any]:
    """A sweep record's settings (`settings/<digest>.json` in its run directory; {} if unreadable)."""
    return _settings_file(str(Path(row["run_dir"]) / "settings" / f"{row['settings']}.json"))


@functools.cache
def _settings_file(path: str) -> dict[str, Any]:
    """One settings file, read once however many records and bench settings look at it."""
    from diversed.files.rundir import read_json

    return (read_json(path) or {}) if Path(path).is_file() else {}


def _digest(found: Any) -> Any:
    """A path knob's files' digest as a sweep's settings keep it: a head of another pair (allowed) is kept
    with that pair's identity beside it (`preflight.check_heads`)."""
    return found.get("files") if isinstance(found, dict) else found


def _same_model(identity: dict[str, Any], given: Any) -> bool:
    """A settings file's model (a local directory, or a Hub id) is the model a bench record names."""
    if given is None:
        return False
    if identity.get("path") is not None:
        return Path(str(identity["path"])).resolve() == Path(str(given)).resolve()
    return identity.get("id") is not None and identity["id"] == str(given)


def _dtype(pair: dict[str, Any]) -> Any:
    """The dtype a settings file's pair ran in: "auto" is bf16 on a GPU, float32 on a CPU (`pair._dtype`)."""
    dtype = pair.get("dtype")
    if dtype == "auto":
        return "bfloat16" if str(pair.get("device", "")).startswith("cuda") else "float32"
    return dtype


# A bench record's own engine options, and what the bench decodes with beyond them: N constant, no
# confidence stop.
SAMPLING_ENGINE = ("top_k", "top_p")  # the options autoregressive decoding reads too
RECORDED_ENGINE = ("bonus_token", "first_token", *SAMPLING_ENGINE)
BENCH_ENGINE = {"num_draft_tokens_schedule": "constant", "draft_confidence_threshold": None}


def _engine(r: dict[str, Any]) -> dict[str, Any]:
    """A bench record's engine options as a sweep's settings keep them (`sweep.grid.engine_settings`:
    an option at its old behaviour left out), to compare with a settings file's `engine`."""
    from diversed.sweep.grid import engine_settings  # (imports torch: only where --quality is given)

    return engine_settings(BENCH_ENGINE | {k: r[k] for k in RECORDED_ENGINE if k in r})


def _sampling(engine: dict[str, Any]) -> dict[str, Any]:
    """The engine options autoregressive decoding reads (the truncation of p); the bonus token, the
    first token and the draft's schedule are a speculative decoder's alone."""
    return {k: v for k, v in engine.items() if k in SAMPLING_ENGINE}


def matching_points(r: dict[str, Any], runs: Any) -> tuple[Any, Any] | None:
    """The sweep records (every seed) of the point that decoded what bench record `r` timed, and the
    autoregressive records of the same task rows, target, dtype and sampling (those of the point's own
    settings group where there are any); None where either is missing. A point matches on method,
    temperature, N, each knob (a path knob by its files' digest, `r["files"]`: a bench record without a
    digest, the untrained head, matches none), the target's and the draft's directories (or Hub ids),
    the dtype, the draft's quantization (not for lossless, whose law is the target's whatever the
    draft), the engine options (a sweep's settings leave out those at their defaults; autoregressive
    decoding's only its truncation of p, `_sampling`) and few-shot examples. Points of several
    settings groups (another batch size, other task rows) are not pooled: SystemExit names them."""
    import math

    from diversed.sweep.methods import METHODS

    point, task = r.get("point"), r.get("task")
    if not point or not task or point.get("method") not in METHODS:
        return None
    method = METHODS[point["method"]]
    models = r.get("models") or {}
    timed = _engine(r)  # the engine options of what was timed, as a sweep's settings would say them

    def close(a: Any, b: Any) -> bool:
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):  # None, NaN-like markers, strings
            return False

    def same_knob(k: Any, row: Any, s: dict[str, Any]) -> bool:
        if k.path:
            digest = _digest((r.get("files") or {}).get(k.files.settings))
            return digest is not None and _digest(s.get(k.files.settings)) == digest
        want = point.get(k.field)
        return close(row.get(k.field), want) if isinstance(want, (int, float)) else row.get(k.field) == want

    def same_run(s: dict[str, Any], draft: bool) -> bool:
        pair = s.get("pair", {})
        ok = _dtype(pair) == r.get("dtype") and _same_model(pair.get("target", {}), models.get("target"))
        # the same target's numerics: an int8 target is another target (absent in both: none)
        ok = ok and pair.get("target_quantize", "none") == r.get("target_quantize_scheme", "none")
        # the point: every engine option; autoregressive decoding: only what it reads (p's truncation)
        engine = s.get("engine", {})
        ok = ok and (engine == timed if draft else _sampling(engine) == _sampling(timed))
        if "num_few_shot" in r:
            ok = ok and s.get("task", {}).get("num_few_shot", 0) == r["num_few_shot"]
        if draft:
            ok = ok and _same_model(pair.get("draft", {}), models.get("draft"))
            ok = ok and (
                point["method"] == "lossless" or pair.get("draft_quantize") == r.get("quantize_scheme")
            )
        return ok

    rows = runs[(runs["task"] == task) & (runs["method"] == point["method"])]
    keep = []
    for i, row in rows.iterrows():
        if not close(row["temperature"], point["temperature"]):
            continue
        if point.get("num_draft_tokens") is not None and not close(
            row["num_draft_tokens"], point["num_draft_tokens"]
        ):
            continue
        s = _settings(row)
        if all(same_knob(k, row, s) for k in method.knobs) and same_run(s, draft=True):
            keep.append(i)
    if not keep:
        return None
    points = rows.loc[keep]
    groups = points.groupby(["run_dir", "settings_group"]).groups
    if len(groups) > 1:
        raise SystemExit(
            f"{r['label']}: points of {len(groups)} settings groups decoded it "
            f"({', '.join(map(str, groups))}): give --quality run directories that hold it once"
        )
    rows_key = json.dumps(_settings(points.iloc[0]).get("task"), sort_keys=True)  # the same task rows
    ar = runs[(runs["task"] == task) & (runs["method"] == "autoregressive")]
    ref = [
        i
        for i, row in ar.iterrows()
        if close(row["temperature"], point["temperature"])
        and json.dumps((s := _settings(row)).get("task"), sort_keys=True) == rows_key
        and same_run(s, draft=False)
    ]
    if not ref:
        return None
    reference = ar.loc[ref]
    own = reference[
        (reference["run_dir"] == points["run_dir"].iloc[0])
        & (reference["settings_group"] == points["settings_group"].iloc[0])
    ]
    if len(own):
        return points, own
    if reference.groupby(["run_dir", "settings_group"]).ngroups > 1:
        raise SystemExit(
            f"{r['label']}: autoregressive decoding of its task rows is in several settings groups: give "
            "--quality run directories that hold it once"
        )
    return points, reference


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", help="a `python -m diversed.bench --output` file")
    parser.add_argument("--temperature", type=float, default=1.0, help="the bench's --temperature")
    parser.add_argument("--floors", choices=("cpu",), default=None, help="cpu: the real-pair CPU floors")
    parser.add_argument(
        "--quality",
        nargs="+",
        default=None,
        metavar="RUN_DIR",
        help=(
            "--floors cpu: evaluate runs whose test points give each static / DIVERSED (and lossless) "
            "setting's quality"
        ),
    )
    parser.add_argument("--margin", type=float, default=MARGIN, help="non-inferiority margin, x AR quality")
    args = parser.parse_args(argv)
    if args.quality is not None and args.floors != "cpu":
        parser.error("--quality judges the CPU floors: give --floors cpu with it")
    records = json.loads(Path(args.records).read_text())
    if args.floors == "cpu":
        quality = None if args.quality is None else quality_against_ar(records, args.quality, args.margin)
        text = cpu_floors(records, quality)
    else:
        text = goals(records, args.temperature)
    print(text)
    return text


if __name__ == "__main__":
    main()
