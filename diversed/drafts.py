"""Drafts the project builds for a target: one where it has none sharing its tokenizer, a cheaper
one where it has.

A real model rarely comes with a small sibling on the same tokenizer (SmolLM2-135M and
Gemma-3-270M do not). `python -m diversed.drafts build smollm2` makes one:

1. **init**: the target itself cut to its first `layers` decoder layers, with its own embeddings,
   final norm and LM head, so the tokenizer and vocabulary are the target's by construction
   (measured on SmolLM2: keeping the LAST layer instead makes it worse, acceptance ≈ 0), its head
   restricted to the `vocab` ids most frequent in the tasks' train texts (`draft_vocab.py`; the
   surgery is `models/surgery.py`'s), and with `vocab_completions` every id of the model's own greedy
   completions of some train prompts ahead of those (`completion_ids`: raw train texts miss an
   instruct model's markdown fences and phrasing). A recipe with a `base` starts from that model
   instead (a sibling on the target's tokenizer, e.g. Qwen2.5-Coder-0.5B), whole with
   `layers=None`: only its head restricted, which at batch 1 is a large share of a small draft's step;
2. **distil** through `diversed.distill`, once per task in `stages`, in turn: forward KL towards
   the target on the target's own samples for that task's TRAIN prompts, every prompt and
   completion position scored; the samples are drawn once per prompt with the target's law at
   each position (its top `distill.top_k` ids) and reused every epoch (`distill.reuse`); each
   stage also trains on the earlier stages' samples (`distill.replay`), so the last one trains on
   every task's. The first `freeze` layers stay the target's own (`distill.freeze_layers`); the
   validation set is held out of the train split (`data.val_split=holdout`);
3. **measure** lossless acceptance α (accepted over verified drafts, T = 1, N = 5) on held-out
   prompts of each task in `eval_tasks` (the test split's first `n_eval` in the seed's order, with a
   bootstrap interval over the prompts; decoded by `sweep.point.decode_task`), after (and with
   `--before`, before) distillation, or for a recipe without stages the undistilled draft's, and
   write it with the times to `build.json` (`build_seconds`: init and distillation, the part the
   recipe is sized for; measuring apart).

`python -m diversed.drafts measure NAME` measures a built draft's α again, as step 3 does, printed:
with `--draft-quantize none int8`, the float and the int8 draft (`models/quantize.py`) on the same
prompts and seed, and their paired difference with its bootstrap interval over prompts.

The result is cached in `$DIVERSED_CACHE/drafts/<name>/` (default `~/.cache/diversed/drafts`)
and named `draft:<name>` in a pair config (`models.gguf.resolve_model`). Offline, each task's rows
come from `--data DIR` (`DIR/<task>/<split>.jsonl`, see `scripts/real_data.py`).

It does not fetch or convert the target (`weights.py`), cut models (`models/surgery.py`), time the
draft (`python -m diversed.bench --pair smollm2` gives the forward-time ratio c) or train heads
(`train.py`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from diversed import CONFIG_DIR
from diversed.errors import ConfigError, MissingFile, cli
from diversed.files.atomic import write_file
from diversed.models.gguf import DRAFT_PREFIX, built_draft_dir, check_member, resolve_model
from diversed.models.surgery import init_draft

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- recipes


@dataclass(frozen=True)
class DraftRecipe:
    """How one draft is made: from which target, how many of its layers, distilled on what."""

    name: str
    target: str  # a pair member (models.gguf.resolve_model): shipped:<name>, a .gguf file, a directory
    layers: int | None  # the first decoder layers kept (None: all of them)
    # K: propose only K ids (draft_vocab.py): those of the completions (`vocab_completions`), then the
    # train texts' most frequent; None: all
    vocab: int | None
    # (task, optimizer steps, that stage's own distill overrides), distilled in turn, each stage
    # replaying the earlier stages' samples
    stages: tuple[tuple[str, int, tuple[str, ...]], ...]
    overrides: tuple[str, ...] = ()  # distill config overrides every stage shares
    freeze: int = 0  # the first layers kept as the target's (distill.freeze_layers)
    eval_tasks: tuple[str, ...] = ("xsum", "gsm8k")
    vocab_tasks: tuple[str, ...] = ()  # whose train texts rank the vocabulary (default: the stages' tasks)
    n_eval: int = 32  # held-out test prompts per task for α
    max_new_tokens: int = 64  # of the α measurement
    # the model the draft is made from, a pair member as `target` (None: the target itself); a real
    # draft sharing the target's tokenizer, kept whole (`layers=None`) with its head restricted
    base: str | None = None
    # with `vocab`: `vocab_completions` TRAIN prompts of each vocabulary task (a seed-0 draw) completed
    # greedily by the model the draft is made from (at most `vocab_max_new` tokens, in the tasks' prompt
    # format), their ids kept ahead of the train texts' (`completion_ids`). The draft's own, not the
    # target's: a third of the target's cost here, and what the draft proposes is what it writes.
    vocab_completions: int = 0
    vocab_max_new: int = 128

    def __post_init__(self) -> None:
        if self.layers is not None and self.layers < 1:
            raise ValueError(f"draft {self.name}: layers must be at least 1 or None (all), got {self.layers}")
        if self.vocab is not None and self.vocab < 1:
            raise ValueError(
                f"draft {self.name}: vocab must be at least 1 or None (all ids), got {self.vocab}"
            )
        if self.vocab_completions < 0 or self.vocab_max_new < 1:
            raise ValueError(
                f"draft {self.name}: vocab_completions must be at least 0 and vocab_max_new at least 1, "
                f"got {self.vocab_completions} and {self.vocab_max_new}"
            )
        if self.vocab_completions and self.vocab is None:
            raise ValueError(f"draft {self.name}: vocab_completions ranks a restricted head's ids; set vocab")


# Sized for at most half an hour on 2 CPU cores (measured: 25.8 min, docs/real-models.md). Per stage, one
# target sample per train prompt (T = 1, prompts cut to 320 tokens: an article loses its end; the builds
# recorded in docs/real-models.md, before 2026-11-27's round, kept prompts' last 320 tokens; batches of
# 64 by length) with the target's top 256 ids over the draft's support at every position, then epochs of the
# draft's forward and backward in bf16 autocast, rows of 12; linear warm-up and decay; lr 3e-3 (measured
# against 1e-3 and 2e-3: higher held-out acceptance at equal steps, docs/real-models.md).
_SHARED = (
    "distill.rollout=target",
    "distill.reuse=true",
    "distill.top_k=256",
    "distill.prompt_positions=-1",
    "distill.divergence=forward_kl",
    "distill.sample_batch_size=64",
    "task.max_prompt_tokens=320",
    "task.chat_template=false",  # raw prompts, as the recorded builds (docs/real-models.md)
    "distill.optimizer.lr=3e-3",
    "distill.lr_schedule=linear",
    "distill.warmup_steps=10",
    "trainer.precision=bf16-mixed",
    "data.batch_size=12",
    "data.val_split=holdout",
    "data.n_val=8",
    "data.val_batch_size=8",
    "runtime.threads=2",
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "callbacks.last_checkpoint.every_n_train_steps=100",
)  # a 15-layer draft's state is 0.6 GB
RECIPES: dict[str, DraftRecipe] = {
    r.name: r
    for r in (
        # 17 of 30 layers, the first 10 frozen (7 trained): 15 layers with 8 frozen were measured
        # against 6 and 10 layers trained whole, the highest acceptance per second of training; 17
        # with 10 frozen trains as many layers in about the same time and read +0.006 / +0.008 over
        # it on held-out train rows (docs/real-models.md). XSum first (400 prompts, one epoch), then
        # GSM8K (240 prompts, 128 new tokens) with XSum's samples replayed, about 3.3 epochs. 640 XSum prompts
        # (54 steps) measured worse on both tasks' held-out α (docs/real-models.md).
        DraftRecipe(
            "smollm2",
            "shipped:smollm2",
            layers=17,
            vocab=16384,
            freeze=10,
            stages=(
                ("xsum", 34, ("data.n_train=400", "distill.max_new_tokens=64")),
                ("gsm8k", 176, ("data.n_train=240", "distill.max_new_tokens=128")),
            ),
            overrides=_SHARED,
            n_eval=64,  # 32 left α within ±0.03 of rounding noise
        ),
        # Gemma-3-270M: its 262k-token LM head is most of a forward; restricted to 16k ids it is cheap.
        # This draft (3 sliding-window layers, not distilled) exists to run the sliding-window case.
        DraftRecipe(
            "gemma3_270m",
            "shipped:gemma3_270m",
            layers=3,
            vocab=16384,
            stages=(),
            vocab_tasks=("xsum",),
            overrides=_SHARED,
            eval_tasks=("xsum",),
            n_eval=8,
        ),
        # Qwen2.5-Coder-0.5B-Instruct as shipped (the 1.5B target's sibling, not distilled), its tied
        # 151,936 x 896 head restricted to 32,768 ids: the head is 136 M of the draft's 494 M parameters,
        # and a draft step reads them all at batch 1 (issue 42: c = 0.37-0.42 with the int8 target). The
        # ids: every id of the draft's own greedy completions of 32 train prompts per task (chat
        # template), then the most frequent of MBPP's, GSM8K's and XSum's train texts. Ranked on the
        # texts alone, the support missed the markdown fences every MBPP answer opens with (4.8 % of
        # the int8 target's tokens on round 5's 64 MBPP test completions were outside it).
        # K = 2^15 (a fifth of the vocabulary) was fixed before any measurement. Built in 23.6 min here
        # (2 cores, AVX2, float32), nearly all of it the 96 completions (11,157 tokens, 2,158 distinct ids).
        DraftRecipe(
            "qwen25coder_0p5b_v32k",
            "shipped:qwen25coder_1p5b",
            base="shipped:qwen25coder_0p5b",
            layers=None,
            vocab=32768,
            vocab_completions=32,
            stages=(),
            vocab_tasks=("mbpp", "gsm8k", "xsum"),
            eval_tasks=("mbpp", "gsm8k"),
            n_eval=32,
        ),
    )
}


def built_dir(name: str) -> Path:
    return built_draft_dir(name)


def check_built(name: str, role: str = "draft") -> None:
    """ValueError for a draft the project does not build; FileNotFoundError naming the build
    command unless draft `name` is built."""
    if name not in RECIPES and not built_dir(name).is_dir():
        raise ConfigError(f"pair.{role}=draft:{name}: no such draft; the project builds {sorted(RECIPES)}")
    check_member(DRAFT_PREFIX + name, role)


# ----------------------------------------------------------------------------- the steps


def train_texts(tasks: list[str], data: str | Path | None) -> list[str]:
    """Each TRAIN example of each task, its prompt and its text fields (references, worked answers):
    what the draft vocabulary is ranked on."""
    from diversed.tasks import read_task  # the verb starts torch-free

    texts = []
    for task in dict.fromkeys(tasks):
        t = read_task(task, split="train", data_files=local_files(task, data))
        texts += [" ".join([t.prompt(e), *(v for v in e.values() if isinstance(v, str))]) for e in t.examples]
    return texts


def completion_ids(
    model_dir: str, tasks: list[str], data: str | Path | None, n: int, max_new: int, batch_size: int = 8
) -> list[list[int]]:
    """The new ids of greedy completions by the model in `model_dir` (float32, CPU, the engine's loop)
    for `n` TRAIN prompts of each task (the split's seed-0 draw, as `load_task` takes it), encoded as
    the tasks encode them (the chat template where the tokenizer has one), each cut at its first EOS
    (the generation config's, an instruct model's end of turn among them) or `max_new` tokens: the
    ids a model writes (an instruct model's markdown fences, its phrasing), which raw train texts miss.
    Rows run past the tasks' stop sequences, as the bench decodes (a sweep's rows stop there: a
    subset). One model, not a pair: `sweep.point.decode_task` decodes pairs. Logged: the tokens and
    distinct ids found, and the seconds."""
    import torch
    from transformers import AutoModelForCausalLM

    from diversed.decoding.autoregressive import autoregressive_generate  # the verb starts torch-free
    from diversed.decoding.inputs import left_pad, special_tokens
    from diversed.models.pair import load_tokenizer
    from diversed.sweep.point import sampling_kwargs
    from diversed.tasks import read_task

    t0 = time.perf_counter()
    tok = load_tokenizer(model_dir, "draft")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos, pad = special_tokens(model, None, tok.pad_token_id)
    stops = {*eos, *([tok.eos_token_id] if tok.eos_token_id is not None else [])}
    found: list[list[int]] = []
    for task in dict.fromkeys(tasks):
        t = read_task(task, split="train", data_files=local_files(task, data), n_examples=n, seed=0)
        prompts = t.encode(tok, t.examples)
        for i in range(0, len(prompts), batch_size):
            ids, mask = left_pad(prompts[i : i + batch_size], pad, torch.device("cpu"))
            kwargs = sampling_kwargs(tok, 0.0, max_new) | {"eos_token_id": sorted(stops), "pad_token_id": pad}
            with torch.inference_mode():
                out = autoregressive_generate(model, ids, mask, **kwargs)
            for row in out.sequences[:, ids.shape[1] :].tolist():
                end = next((j for j, x in enumerate(row) if x in stops), len(row))
                found.append(row[:end])
    log.info(
        "%s: %d completions, %d tokens, %d distinct ids (%.0f s)",
        model_dir,
        len(found),
        sum(map(len, found)),
        len({i for row in found for i in row}),
        time.perf_counter() - t0,
    )
    return found


def local_files(task: str, data: str | Path | None) -> dict[str, str] | None:
    """{split: path} of `data/<task>/<split>.jsonl` (absolute), or None without `data` (the Hub)."""
    if data is None:
        return None
    folder = Path(data) / task
    splits = {p.stem: str(p.resolve()) for p in sorted(folder.glob("*.jsonl"))}
    if not splits:
        raise MissingFile(f"no {folder}/<split>.jsonl files for task {task} (see scripts/real_data.py)")
    return splits


def data_overrides(task: str, data: str | Path | None) -> list[str]:
    """`task.data_files=...` for `task` from `data/<task>/<split>.jsonl`, or none (the Hub)."""
    splits = local_files(task, data)
    if splits is None:
        return []
    return ["task.data_files={" + ",".join(f"{k}:'{v}'" for k, v in splits.items()) + "}"]


def pooled_alpha(accepted, verified, axis=-1):
    """α pooled over prompts: Σ accepted / Σ verified (numpy arrays; 0 where nothing was verified)."""
    import numpy as np

    return accepted.sum(axis) / np.maximum(verified.sum(axis), 1)


def acceptance(
    target_dir: str,
    draft_dir: str,
    task: str,
    data: str | Path | None,
    n: int,
    max_new: int,
    seed: int = 0,
    draft_quantize: str = "none",
    per_prompt: bool = False,
) -> dict[str, Any]:
    """Lossless α (accepted / verified drafts) with its bootstrap 95 % interval over the prompts
    (`alpha_low`, `alpha_high`: on 32 prompts α moves by ±0.03 from the last bits of the forward path
    alone, which sample other tokens), and the acceptance rate, at T = 1, N = 5 on the first `n` test
    prompts of `task`, batch 8, one generator seeded with `seed` for every batch, rows ending at the
    task's stop sequences (`sweep.point.decode_task`); `draft_quantize="int8"`: of the draft with int8
    linear layers. `per_prompt`: also each prompt's accepted and verified drafts (`accepted`, `verified`)."""
    import numpy as np
    import torch

    from diversed.models.pair import load_pair  # the verb starts torch-free
    from diversed.sweep.intervals import bootstrap_interval  # the verb starts pandas-free
    from diversed.sweep.point import decode_task  # the verb starts torch-free
    from diversed.tasks import read_task  # the verb starts torch-free

    # decoded unscored (`score=False`): no code-execution opt-in is asked
    t = read_task(task, split="test", data_files=local_files(task, data), n_examples=n, seed=seed)
    pair = load_pair(target_dir, draft_dir, dtype="float32", device="cpu", draft_quantize=draft_quantize)
    point = {"method": "lossless", "temperature": 1.0, "num_draft_tokens": 5}
    done = decode_task(
        pair,
        point,
        None,
        t,
        batch_size=8,
        generator=torch.Generator().manual_seed(seed),
        max_new=max_new,
        score=False,
    )
    summary = done.totals.summary()
    accepted, verified = (np.array(done.per_example(k), dtype=float) for k in ("accepted", "verified"))
    # α pooled over prompts (Σ accepted / Σ verified), resampling prompts
    _, low, high = bootstrap_interval(pooled_alpha, [accepted, verified])
    return {
        "alpha": round(float(summary["alpha"]), 4),
        "alpha_low": round(low, 4),
        "alpha_high": round(high, 4),
        "prompts": len(accepted),
        "acceptance_rate": round(float(summary["acceptance_rate"]), 4),
    } | ({"accepted": accepted.tolist(), "verified": verified.tolist()} if per_prompt else {})


def distill_stage(
    target_dir: str,
    draft_dir: str,
    task: str,
    steps: int,
    overrides: list[str],
    out: Path,
    replay: list[Path] = (),
) -> str:
    """One `diversed.distill` run on `task` (replaying `replay`'s samples); returns the distilled
    draft's directory. Its samples are kept in `out/teacher_samples.pt`."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from diversed.distill import distill  # the verb starts torch- and lightning-free

    pair = [
        "pair=local",
        f"pair.target='{target_dir}'",
        f"pair.draft='{draft_dir}'",
        "pair.name=draft-build",
        "pair.device=cpu",
        "pair.dtype=float32",
    ]
    run = [
        f"task={task}",
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps}",
        "trainer.accelerator=cpu",
        "trainer.devices=1",
        f"task_name=draft_{task}",
    ]
    if replay:
        run.append("distill.replay=[" + ",".join(f"'{p}'" for p in replay) + "]")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("distill", overrides=[*pair, *run, *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = str(out)
    return distill(cfg)["draft_dir"]


def build(
    name: str,
    *,
    data: str | Path | None = None,
    force: bool = False,
    steps_scale: float = 1.0,
    measure: bool = True,
    before: bool = False,
    keep: str | Path | None = None,
) -> Path:
    """Build draft `name` (a key of RECIPES) into the cache unless it is there; returns its directory.
    `keep`: a directory (new, or empty) that receives each stage's run directory (its target samples,
    `teacher_samples.pt`, its metrics and checkpoints) instead of their being deleted. The steps: init
    (`_initial_draft`), α before (with `before`, or a recipe without stages), distil (`_distill`), put
    in the cache whole (`_install`), α after (`_measure_after`, once the draft is safe in the cache)."""
    if name not in RECIPES:
        raise ConfigError(f"unknown draft {name!r}; the project builds {sorted(RECIPES)}")
    recipe, out = RECIPES[name], built_dir(name)
    if (out / "build.json").is_file() and not force:
        if measure and recipe.stages and "after" not in json.loads((out / "build.json").read_text()):
            # built, its measurement interrupted: measure only
            check_member(recipe.target, "target")
            _measure_after(out, recipe, resolve_model(recipe.target, "target"), data)
        return out
    check_member(recipe.target, "target")  # fetched? (fails before anything is built)
    if recipe.base is not None:
        check_member(recipe.base, "draft")
    if keep is not None and Path(keep).exists() and (not Path(keep).is_dir() or any(Path(keep).iterdir())):
        raise ConfigError(f"--keep {keep}: not a new or empty directory; name another one")
    stages = [(task, max(1, round(steps * steps_scale)), extra) for task, steps, extra in recipe.stages]
    tasks = {*(t for t, _, _ in stages), *recipe.eval_tasks, *recipe.vocab_tasks}
    overrides = {task: data_overrides(task, data) for task in tasks}  # checked first
    t0 = time.perf_counter()
    target_dir = resolve_model(recipe.target, "target")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{name}-"))
    try:
        draft = _initial_draft(recipe, target_dir, [t for t, _, _ in stages], data, work)
        report: dict[str, Any] = {
            "recipe": asdict(recipe),
            "steps": {t: n for t, n, _ in stages},
            "target": target_dir,
        }
        measured = 0.0
        if measure and (before or not stages):  # an undistilled draft's only α is its own
            t1 = time.perf_counter()
            report["before"] = _alphas(recipe, target_dir, draft, data)
            log.info("draft %s before distillation: %s", name, report["before"])
            measured += time.perf_counter() - t1
        t2 = time.perf_counter()
        draft = _distill(recipe, target_dir, draft, stages, overrides, work)
        report["distill_seconds"] = round(time.perf_counter() - t2, 1)
        final = _gather(draft, stages, work)
        report["build_seconds"] = round(time.perf_counter() - t0 - measured, 1)
        report["measure_seconds"] = round(measured, 1)
        (final / "build.json").write_text(json.dumps(report, indent=1) + "\n")
        _install(final, out, force)
        if keep is not None:
            Path(keep).mkdir(parents=True, exist_ok=True)
            for i, (task, _, _) in enumerate(stages):
                shutil.move(str(work / f"stage{i}_{task}"), str(Path(keep) / f"stage{i}_{task}"))
            log.info("draft %s: its stages' run directories kept in %s", name, keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if (
        measure and stages
    ):  # after the draft is safe in the cache: an interrupted measurement loses no training
        _measure_after(out, recipe, target_dir, data)
    return out


def _initial_draft(
    recipe: DraftRecipe, target_dir: str, stage_tasks: list[str], data: str | Path | None, work: Path
) -> str:
    """Step 1: the target (or `recipe.base`) cut to `recipe.layers` layers in `work/init`, its head
    restricted to `recipe.vocab` ids: every id of that model's own greedy completions of
    `recipe.vocab_completions` train prompts per vocabulary task (`completion_ids`), then the ids
    most frequent in those tasks' train texts (default tasks: the stages')."""
    tasks = list(recipe.vocab_tasks) or stage_tasks
    texts = train_texts(tasks, data) if recipe.vocab else None
    source = target_dir if recipe.base is None else resolve_model(recipe.base, "draft")
    first = None
    if recipe.vocab and recipe.vocab_completions:
        first = completion_ids(source, tasks, data, recipe.vocab_completions, recipe.vocab_max_new)
    return str(init_draft(source, recipe.layers, work / "init", recipe.vocab, texts, first))


def _alphas(recipe: DraftRecipe, target_dir: str, draft: str, data: str | Path | None) -> dict[str, Any]:
    """The draft's α (`acceptance`) on each of `recipe.eval_tasks`."""
    return {
        t: acceptance(target_dir, draft, t, data, recipe.n_eval, recipe.max_new_tokens)
        for t in recipe.eval_tasks
    }


def _distill(
    recipe: DraftRecipe,
    target_dir: str,
    draft: str,
    stages: list[tuple[str, int, Any]],
    overrides: dict[str, list[str]],
    work: Path,
) -> str:
    """Step 2: one `distill_stage` per stage, in turn, each replaying the earlier stages' samples, in
    `work/stage<i>_<task>`; returns the last stage's draft (`draft` itself without stages)."""
    freeze = [f"distill.freeze_layers={recipe.freeze}"] if recipe.freeze else []
    replay: list[Path] = []
    for i, (task, steps, extra) in enumerate(stages):
        stage = work / f"stage{i}_{task}"
        extra = [*recipe.overrides, *freeze, *extra, *overrides[task]]
        draft = distill_stage(target_dir, draft, task, steps, extra, stage, replay)
        replay.append(stage / "teacher_samples.pt")
    return draft


def _gather(draft: str, stages: list[tuple[str, int, Any]], work: Path) -> Path:
    """The built draft in `work/final`, each stage's logged metrics (loss, acceptance) kept beside it."""
    final = work / "final"
    shutil.copytree(draft, final)
    for i, (task, _, _) in enumerate(stages):
        for found in sorted((work / f"stage{i}_{task}").glob("csv/*/metrics.csv"))[-1:]:
            shutil.copy(found, final / f"distill_{i}_{task}_metrics.csv")
    return final


def _install(final: Path, out: Path, force: bool) -> None:
    """`final` renamed to the cache's `out` (with `force`, replacing it): a reader sees a whole draft or
    none."""
    if force:
        shutil.rmtree(out, ignore_errors=True)
    os.rename(final, out)


def _measure_after(out: Path, recipe: DraftRecipe, target_dir: str, data: str | Path | None) -> None:
    """Step 3: measure the cached draft's α on `recipe.eval_tasks` into its `build.json` (atomically)."""
    report = json.loads((out / "build.json").read_text())
    t3 = time.perf_counter()
    report["after"] = _alphas(recipe, target_dir, str(out), data)
    log.info("draft %s after distillation: %s", recipe.name, report["after"])
    report["measure_seconds"] = round(report.get("measure_seconds", 0.0) + time.perf_counter() - t3, 1)
    write_file(out / "build.json", json.dumps(report, indent=1) + "\n")


def measure(
    name: str, data: str | Path | None, quantize: Sequence[str], n: int | None, seed: int
) -> dict[str, Any]:
    """The built draft's α per eval task and `draft_quantize` setting, measured as `build` does, on the
    same prompts and seed; with two settings, also their paired difference (second − first) with its
    bootstrap 95 % interval over prompts (`difference`). Printed as JSON on stdout."""
    import numpy as np
    import torch

    from diversed.models.quantize import check_quantize  # the verb starts torch-free
    from diversed.sweep.intervals import bootstrap_interval  # the verb starts pandas-free

    recipe = RECIPES[name]
    if not 1 <= len(quantize) <= 2 or len(set(quantize)) != len(quantize):
        raise ConfigError(f"--draft-quantize takes one setting or two different ones, got {list(quantize)}")
    for how in quantize:  # before any weights load
        check_quantize(how, torch.device("cpu"), torch.float32, "--draft-quantize ")
    if n is not None and n < 1:
        raise ConfigError(f"--n must be at least 1, got {n}")
    check_member(f"draft:{name}", "draft")
    out = Path(resolve_model(f"draft:{name}", "draft"))
    target_dir = resolve_model(recipe.target, "target")
    t0 = time.perf_counter()
    n = n or recipe.n_eval
    report: dict[str, Any] = {"draft": name, "seed": seed, "prompts_per_task": n, "alpha": {}}
    for t in recipe.eval_tasks:
        runs = {
            how: acceptance(target_dir, str(out), t, data, n, recipe.max_new_tokens, seed, how, True)
            for how in quantize
        }
        report["alpha"][t] = {
            how: {k: v for k, v in r.items() if k not in ("accepted", "verified")} for how, r in runs.items()
        }
        if len(quantize) == 2:
            a = [np.array(runs[how][k], dtype=float) for how in quantize for k in ("accepted", "verified")]
            est, low, high = bootstrap_interval(  # pooled α of the second minus the first's
                lambda a1, v1, a2, v2, axis: pooled_alpha(a2, v2, axis) - pooled_alpha(a1, v1, axis), a
            )
            report.setdefault("difference", {})[t] = {
                "of": f"{quantize[1]} - {quantize[0]}",
                "alpha": round(est, 4),
                "low": round(low, 4),
                "high": round(high, 4),
            }
    report["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(report))
    return report


# ----------------------------------------------------------------------------- CLI


def run(argv: list[str] | None = None) -> Path | dict[str, Any]:
    """`python -m diversed.drafts build NAME`: the built draft's directory (printed last);
    `measure NAME`: its α report (printed)."""
    parser = argparse.ArgumentParser(prog="python -m diversed.drafts", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (once) and cache a draft for a target")
    b.add_argument("name", choices=sorted(RECIPES))
    b.add_argument("--data", default=None, help="local rows: DIR/<task>/<split>.jsonl (default: the Hub)")
    b.add_argument("--force", action="store_true", help="rebuild even if the cache has it")
    b.add_argument("--steps-scale", type=float, default=1.0, help="scale every stage's optimizer steps")
    b.add_argument("--no-measure", action="store_true", help="skip measuring the acceptance")
    b.add_argument(
        "--before",
        action="store_true",
        help="also measure the undistilled draft's acceptance (always for a recipe without stages)",
    )
    b.add_argument(
        "--keep",
        default=None,
        metavar="DIR",
        help="keep each stage's run directory (its target samples, metrics) in DIR, new or empty",
    )
    m = sub.add_parser("measure", help="measure a built draft's lossless alpha again (printed, not saved)")
    m.add_argument("name", choices=sorted(RECIPES))
    m.add_argument("--data", default=None, help="local rows: DIR/<task>/<split>.jsonl (default: the Hub)")
    m.add_argument(
        "--draft-quantize",
        nargs="+",
        choices=("none", "int8"),
        default=["none"],
        help="as pair.draft_quantize; two settings: each, and their paired difference over prompts",
    )
    m.add_argument("--n", type=int, default=None, help="test prompts per task (default: the recipe's n_eval)")
    m.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from diversed.config.runtime import keep_freed_memory  # the verb starts hydra-free

    keep_freed_memory()  # as runtime.malloc=keep in the distillation runs it makes (config/runtime.py)
    if args.command == "measure":
        return measure(args.name, args.data, args.draft_quantize, args.n, args.seed)
    out = build(
        args.name,
        data=args.data,
        force=args.force,
        steps_scale=args.steps_scale,
        measure=not args.no_measure,
        before=args.before,
        keep=args.keep,
    )
    report = json.loads((out / "build.json").read_text())
    print(
        json.dumps(
            {
                k: report.get(k)
                for k in ("before", "after", "distill_seconds", "build_seconds", "measure_seconds")
            }
        ),
        file=sys.stderr,
    )
    print(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """The console script: exit status 0, or 2 with a user error's message (`errors.cli`)."""
    return cli(run, argv)


if __name__ == "__main__":
    sys.exit(main())
