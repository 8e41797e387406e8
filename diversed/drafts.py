"""Drafts the project builds for a target that has none sharing its tokenizer.

A real model rarely comes with a small sibling on the same tokenizer (SmolLM2-135M and
Gemma-3-270M do not). `python -m diversed.drafts build smollm2` makes one:

1. **init**: the target itself cut to its first `layers` decoder layers, with its own embeddings,
   final norm and LM head, so the tokenizer and vocabulary are the target's by construction
   (measured on SmolLM2: keeping the LAST layer instead makes it worse, acceptance ≈ 0);
2. **distil** through `diversed.distill`, once per task in `stages`, in turn: DistillSpec-style
   forward KL towards the target on the target's own samples (`distill.rollout=target`) for that
   task's TRAIN prompts, also scoring some of each prompt's teacher-forced positions (more signal
   per rollout); the validation set is held out of the train split (`data.val_split=holdout`);
3. **measure** lossless acceptance α (accepted over verified drafts, T = 1, N = 5) on held-out
   prompts of each task in `eval_tasks` (the test split's first `n_eval` in the seed's order),
   before and after, and write it with the build time to `build.json`.

The result is cached in `$DIVERSED_CACHE/drafts/<name>/` (default `~/.cache/diversed/drafts`)
and named `draft:<name>` in a pair config (`weights.resolve_model`). Offline, each task's rows
come from `--data DIR` (`DIR/<task>/<split>.jsonl`, see `scripts/real_data.py`).

It does not fetch or convert the target (`weights.py`), time the draft (`python -m diversed.bench
--pair smollm2` gives the forward-time ratio c) or train heads (`train.py`).
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- recipes


@dataclass(frozen=True)
class DraftRecipe:
    """How one draft is made: from which target, how many of its layers, distilled on what."""

    name: str
    target: str  # a pair member (weights.resolve_model): shipped:<name>, a .gguf file, a directory
    layers: int  # the target's first decoder layers kept
    vocab: (
        int | None
    )  # K: propose only the K most frequent ids of the train texts (draft_vocab.py); None: all
    stages: tuple[tuple[str, int], ...]  # (task, optimizer steps) distilled in turn
    overrides: tuple[str, ...] = ()  # distill config overrides every stage shares
    eval_tasks: tuple[str, ...] = ("xsum", "gsm8k")
    vocab_tasks: tuple[str, ...] = ()  # whose train texts rank the vocabulary (default: the stages' tasks)
    n_eval: int = 32  # held-out test prompts per task for α
    max_new_tokens: int = 64  # of the α measurement


# Sized for about half an hour of distillation on 2 CPU cores (measured: 37 min, README). Rollouts at batch 8
# with up to 64 new tokens; 128 teacher-forced prompt positions per row join the completion's.
_SHARED = ("distill.rollout=target", "distill.divergence=forward_kl", "distill.prompt_positions=128",
           "task.max_prompt_tokens=640",  # training prompts only (their ends are kept): long articles cost most
           "distill.max_new_tokens=64", "distill.optimizer.lr=5e-4", "data.batch_size=8", "data.val_split=holdout",
           "data.n_val=8", "data.val_batch_size=8", "runtime.threads=2", "logger=csv")  # fmt: skip
RECIPES: dict[str, DraftRecipe] = {
    r.name: r
    for r in (
        DraftRecipe("smollm2", "shipped:smollm2", layers=6, vocab=16384, stages=(("xsum", 40), ("gsm8k", 40)),
                    overrides=_SHARED, n_eval=16),
        # Gemma-3-270M: its 262k-token LM head is most of a forward; restricted to 16k ids it is cheap.
        # This draft (3 sliding-window layers, not distilled) exists to run the sliding-window case.
        DraftRecipe("gemma3_270m", "shipped:gemma3_270m", layers=3, vocab=16384, stages=(), vocab_tasks=("xsum",),
                    overrides=_SHARED, eval_tasks=("xsum",), n_eval=8),
    )
}  # fmt: skip


def built_dir(name: str) -> Path:
    from diversed.weights import built_draft_dir

    return built_draft_dir(name)


def check_built(name: str, role: str = "draft") -> None:
    """ValueError for a draft the project does not build; FileNotFoundError naming the build
    command unless draft `name` is built."""
    from diversed.weights import DRAFT_PREFIX, check_member

    if name not in RECIPES and not built_dir(name).is_dir():
        raise ValueError(f"pair.{role}=draft:{name}: no such draft; the project builds {sorted(RECIPES)}")
    check_member(DRAFT_PREFIX + name, role)


# ----------------------------------------------------------------------------- the steps


def cut_layers(model: Any, layers: int) -> Any:
    """`model` keeping its first `layers` decoder layers (config updated, layer types too)."""
    import torch

    config = model.config
    total = config.num_hidden_layers
    if not 1 <= layers < total:
        raise ValueError(
            f"a draft keeps between 1 and {total - 1} of the target's {total} layers, got {layers}"
        )
    base = model.base_model
    base.layers = torch.nn.ModuleList(list(base.layers)[:layers])
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[:layers]
    return model


def init_draft(target_dir: str | Path, layers: int, out: str | Path, vocab: int | None = None,
               texts: list[str] | None = None) -> Path:  # fmt: skip
    """Save the target cut to its first `layers` layers (and its tokenizer) into `out`; with
    `vocab`, its head restricted to the `vocab` most frequent ids of `texts` (specials always in)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from diversed import draft_vocab

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    cut_layers(model, layers)
    if vocab is not None:
        specials = [i for i in (tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id,
                                *tokenizer.all_special_ids) if i is not None]  # fmt: skip
        ids = (tokenizer(t, add_special_tokens=False).input_ids for t in texts or [])
        draft_vocab.restrict(
            model, draft_vocab.rank_tokens(ids, vocab, draft_vocab.vocab_size(model), specials)
        )
    draft_vocab.save_pretrained(model, out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return Path(out)


def train_texts(tasks: list[str], data: str | Path | None) -> list[str]:
    """Each TRAIN example of each task, its prompt and its text fields (references, worked answers):
    what the draft vocabulary is ranked on."""
    from diversed.tasks import load_task

    texts = []
    for task in dict.fromkeys(tasks):
        t = load_task(task, split="train", data_files=local_files(task, data))
        texts += [" ".join([t.prompt(e), *(v for v in e.values() if isinstance(v, str))]) for e in t.examples]
    return texts


def local_files(task: str, data: str | Path | None) -> dict[str, str] | None:
    """{split: path} of `data/<task>/<split>.jsonl` (absolute), or None without `data` (the Hub)."""
    if data is None:
        return None
    folder = Path(data) / task
    splits = {p.stem: str(p.resolve()) for p in sorted(folder.glob("*.jsonl"))}
    if not splits:
        raise FileNotFoundError(f"no {folder}/<split>.jsonl files for task {task} (see scripts/real_data.py)")
    return splits


def data_overrides(task: str, data: str | Path | None) -> list[str]:
    """`task.data_files=...` for `task` from `data/<task>/<split>.jsonl`, or none (the Hub)."""
    splits = local_files(task, data)
    if splits is None:
        return []
    return ["task.data_files={" + ",".join(f"{k}:'{v}'" for k, v in splits.items()) + "}"]


def acceptance(target_dir: str, draft_dir: str, task: str, data: str | Path | None, n: int, max_new: int,
               seed: int = 0) -> dict[str, float]:  # fmt: skip
    """Lossless α (accepted / verified drafts) and acceptance rate at T = 1, N = 5 on the first `n`
    test prompts of `task`, batch 8."""
    import torch

    from diversed.engine import speculative_generate
    from diversed.inputs import left_pad
    from diversed.pair import load_pair
    from diversed.stats import Totals
    from diversed.tasks import load_task

    t = load_task(task, split="test", data_files=local_files(task, data), n_examples=n, seed=seed)
    pair = load_pair(target_dir, draft_dir, dtype="float32", device="cpu")
    tok, totals = pair.tokenizer, Totals()
    g = torch.Generator().manual_seed(seed)
    for i in range(0, len(t.examples), 8):
        ids, mask = left_pad(t.encode(tok, t.examples[i : i + 8]), tok.pad_token_id, "cpu")
        out = speculative_generate(pair.target, pair.draft, ids, mask, num_draft_tokens=5, max_new_tokens=max_new,
                                   do_sample=True, temperature=1.0, eos_token_id=tok.eos_token_id,
                                   pad_token_id=tok.pad_token_id, stop=t.stopper(tok), generator=g)  # fmt: skip
        totals.add(out.stats)
    summary = totals.summary()
    return {
        "alpha": round(float(summary["alpha"]), 4),
        "acceptance_rate": round(float(summary["acceptance_rate"]), 4),
    }


def distill_stage(
    target_dir: str, draft_dir: str, task: str, steps: int, overrides: list[str], out: Path
) -> str:
    """One `diversed.distill` run on `task`; returns the distilled draft's directory."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from diversed import CONFIG_DIR
    from diversed.distill import distill

    pair = ["pair=local", f"pair.target='{target_dir}'", f"pair.draft='{draft_dir}'", "pair.name=draft-build",
            "pair.device=cpu", "pair.dtype=float32"]  # fmt: skip
    run = [f"task={task}", f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}",
           "trainer.accelerator=cpu", "trainer.devices=1", f"task_name=draft_{task}"]  # fmt: skip
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("distill", overrides=[*pair, *run, *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = str(out)
    return distill(cfg)["draft_dir"]


def build(name: str, *, data: str | Path | None = None, force: bool = False, steps_scale: float = 1.0,
          measure: bool = True) -> Path:  # fmt: skip
    """Build draft `name` (a key of RECIPES) into the cache unless it is there; returns its directory."""
    from diversed.weights import check_member, resolve_model

    if name not in RECIPES:
        raise ValueError(f"unknown draft {name!r}; the project builds {sorted(RECIPES)}")
    recipe, out = RECIPES[name], built_dir(name)
    if (out / "build.json").is_file() and not force:
        return out
    check_member(recipe.target, "target")  # fetched? (fails before anything is built)
    stages = [(task, max(1, round(steps * steps_scale))) for task, steps in recipe.stages]
    tasks = {*dict(stages), *recipe.eval_tasks, *recipe.vocab_tasks}
    overrides = {task: data_overrides(task, data) for task in tasks}  # checked first
    t0 = time.perf_counter()
    target_dir = resolve_model(recipe.target, "target")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{name}-"))
    try:
        texts = (
            train_texts(list(recipe.vocab_tasks) or [t for t, _ in stages], data) if recipe.vocab else None
        )
        draft = str(init_draft(target_dir, recipe.layers, work / "init", recipe.vocab, texts))
        report: dict[str, Any] = {"recipe": asdict(recipe), "steps": dict(stages), "target": target_dir}
        alpha = lambda d: {t: acceptance(target_dir, d, t, data, recipe.n_eval, recipe.max_new_tokens)  # noqa: E731
                           for t in recipe.eval_tasks}  # fmt: skip
        if measure:
            t1 = time.perf_counter()
            report["before"] = alpha(draft)
            log.info("draft %s before distillation: %s", name, report["before"])
            report["measure_seconds"] = round(time.perf_counter() - t1, 1)
        t2 = time.perf_counter()
        for i, (task, steps) in enumerate(stages):
            draft = distill_stage(target_dir, draft, task, steps, [*recipe.overrides, *overrides[task]],
                                  work / f"stage{i}_{task}")  # fmt: skip
        report["distill_seconds"] = round(time.perf_counter() - t2, 1)
        final = work / "final"
        shutil.copytree(draft, final)
        for i, (task, _) in enumerate(
            stages
        ):  # each stage's logged metrics (loss, acceptance) kept beside it
            for found in sorted((work / f"stage{i}_{task}").glob("csv/*/metrics.csv"))[-1:]:
                shutil.copy(found, final / f"distill_{i}_{task}_metrics.csv")
        if measure and stages:
            report["after"] = alpha(str(final))
            log.info("draft %s after distillation: %s", name, report["after"])
        report["build_seconds"] = round(time.perf_counter() - t0, 1)
        (final / "build.json").write_text(json.dumps(report, indent=1) + "\n")
        if force:
            shutil.rmtree(out, ignore_errors=True)
        os.rename(final, out)  # atomic: a reader sees a whole draft or none
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


# ----------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diversed.drafts", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (once) and cache a draft for a target")
    b.add_argument("name", choices=sorted(RECIPES))
    b.add_argument("--data", default=None, help="local rows: DIR/<task>/<split>.jsonl (default: the Hub)")
    b.add_argument("--force", action="store_true", help="rebuild even if the cache has it")
    b.add_argument("--steps-scale", type=float, default=1.0, help="scale every stage's optimizer steps")
    b.add_argument("--no-measure", action="store_true", help="skip the acceptance before and after")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        out = build(args.name, data=args.data, force=args.force, steps_scale=args.steps_scale,
                    measure=not args.no_measure)  # fmt: skip
    except (FileNotFoundError, ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = json.loads((out / "build.json").read_text())
    print(
        json.dumps({k: report.get(k) for k in ("before", "after", "distill_seconds", "build_seconds")}),
        file=sys.stderr,
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
