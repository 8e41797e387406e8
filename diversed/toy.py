"""`python -m diversed.toy`: rebuild the toy pair (or reuse a cached rebuild), measure its quality gap,
print its report and whether it is the shipped pair.

The toy models, their training, cache and shipped copy are `diversed.models.toy`'s; this verb adds
what needs the toy tasks: the quality gap per skill on its first `n_eval` test problems (the build
config's), measured on the build's one thread right after training (`models.toy.build(measure=...)`),
each number through the one loop that decodes a task (`sweep.point.decode_task`):

- greedy exact match of each model alone (transformers' `generate`, the `hf_generate` method), in
  batches of 250, each row decoded to EOS or the task's `max_new_tokens`;
- the lossless acceptance rate (accepted / proposed drafts) at T = 1, N = the config's, all problems
  in one batch, 16 new tokens, no stop sequences.

A build the loader made on first use has no quality gap; this command measures it from the saved
models and adds it to the build's report. It does not train or load pairs itself (`models.toy`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from diversed.errors import ConfigError, cli
from diversed.files.atomic import write_file
from diversed.models.pair import Pair
from diversed.models.toy import (  # noqa: F401 (load_toy_pair: configs from before models/ name the loader here)
    BUILD_THREADS,
    REPORT,
    SHIPPED_DIR,
    ToyBuildConfig,
    build_cached,
    compare_with_shipped,
    format_report,
    is_built,
    load_toy_pair,
    pair_dir,
    ship,
)
from diversed.models.toy import build as train_pair
from diversed.models.toy_corpus import examples
from diversed.sweep.point import decode_task
from diversed.tasks.toy import SKILL_TASKS

# ----------------------------------------------------------------------------- the quality gap


def alone(model: Any, tokenizer: Any) -> Pair:
    """`model` as the target of a pair of its own (decoded alone; no draft)."""
    return Pair(model, None, tokenizer, name="toy", target_name="toy", draft_name="")


@torch.no_grad()
def greedy_accuracy(
    model, tokenizer, exs: list[dict[str, Any]], batch_size: int = 250, skill: str = "add"
) -> float:
    """Greedy accuracy (the skill's toy task's metric: exact match) of the completions."""
    point = {"method": "hf_generate", "temperature": 0.0}
    task = SKILL_TASKS[skill](exs)
    done = decode_task(
        alone(model, tokenizer),
        point,
        None,
        task,
        batch_size=batch_size,
        generator=torch.Generator(),  # (greedy: nothing drawn; torch's global generator left alone)
        stop=False,
    )
    return sum(m[task.metric] for m in done.metrics) / max(1, len(exs))


@torch.no_grad()
def acceptance_rate(
    target,
    draft,
    tokenizer,
    exs: list[dict[str, Any]],
    *,
    num_draft_tokens: int = 5,
    temperature: float = 1.0,
    seed: int = 0,
    skill: str = "add",
) -> float:
    """Lossless speculative decoding acceptance rate (accepted / proposed drafts) on the prompts of
    `exs` (the skill's toy task's prompts)."""
    pair = Pair(target, draft, tokenizer, name="toy", target_name="target", draft_name="draft")
    point = {"method": "lossless", "temperature": temperature, "num_draft_tokens": num_draft_tokens}
    task = SKILL_TASKS[skill](exs)
    done = decode_task(
        pair, point, None, task, batch_size=len(exs), seed=seed, max_new=16, stop=False, score=False
    )
    return done.totals.acceptance_rate


def quality_gap(
    target,
    draft,
    tokenizer,
    *,
    seed: int = 0,
    n_eval: int = 500,
    num_draft_tokens: int = 5,
    skills: tuple[str, ...] = ("add",),
) -> dict[str, Any]:
    """The quality gap per skill: greedy test accuracy of each model and the lossless acceptance
    rate (T = 1); the first skill's also at the top level."""
    per = {}
    for skill in skills:
        exs = examples("test", seed, skill)[:n_eval]
        per[skill] = {
            "target_accuracy": greedy_accuracy(target, tokenizer, exs, skill=skill),
            "draft_accuracy": greedy_accuracy(draft, tokenizer, exs, skill=skill),
            "acceptance_rate": acceptance_rate(
                target, draft, tokenizer, exs, num_draft_tokens=num_draft_tokens, seed=seed, skill=skill
            ),
        }
    return {**per[skills[0]], "skills": per}


def measure(target, draft, tokenizer, config: ToyBuildConfig) -> dict[str, Any]:
    """`quality_gap` with the build config's settings (what `build` records as `metrics`)."""
    return quality_gap(
        target,
        draft,
        tokenizer,
        seed=config.seed,
        n_eval=config.n_eval,
        num_draft_tokens=config.num_draft_tokens,
        skills=config.skills,
    )


def build(config: ToyBuildConfig, out_dir: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Train the pair into `out_dir` and measure its quality gap (`models.toy.build`); the report."""
    return train_pair(config, out_dir, progress=progress, measure=measure)


def measure_saved(path: Path, config: ToyBuildConfig) -> dict[str, Any]:
    """Measure a cached build made without its quality gap (by the loader) from its saved models, on
    the build's one thread, into its report; returns the report."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report = json.loads((path / REPORT).read_text())
    threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        models = {r: AutoModelForCausalLM.from_pretrained(path / r).eval() for r in ("target", "draft")}
        report["metrics"] = measure(
            models["target"], models["draft"], AutoTokenizer.from_pretrained(path / "target"), config
        )
    finally:
        torch.set_num_threads(threads)
    write_file(path / REPORT, json.dumps(report, indent=2) + "\n")
    return report


# ----------------------------------------------------------------------------- CLI


def run(argv: list[str] | None = None) -> Path:
    """`python -m diversed.toy`: the rebuilt pair's directory (printed last)."""
    parser = argparse.ArgumentParser(prog="python -m diversed.toy", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cache-dir", default=None, help="default: $DIVERSED_CACHE/toy or ~/.cache/diversed/toy"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the cache has it")
    parser.add_argument("--tiny", action="store_true", help="a few-step build of tiny models (for tests)")
    parser.add_argument(
        "--ship",
        action="store_true",
        help=f"write the rebuilt default pair over the shipped one ({SHIPPED_DIR}) with a new "
        "manifest: for a maintainer, the shipped pair is what every machine loads",
    )
    args = parser.parse_args(argv)
    config = ToyBuildConfig.tiny(args.seed) if args.tiny else ToyBuildConfig(seed=args.seed)
    default = config.key() == ToyBuildConfig().key()
    if args.ship and not default:
        raise ConfigError("--ship ships the default build config's pair only (seed 0, not --tiny)")
    built = is_built(pair_dir(config, args.cache_dir)) and not args.force
    path = build_cached(config, cache_dir=args.cache_dir, force=args.force, measure=measure)
    if built:  # a fresh build has printed its report already
        report = json.loads((path / REPORT).read_text())
        if report.get("metrics") is None:  # built by the loader: measured now
            report = measure_saved(path, config)
        print(format_report(report, cached=True), file=sys.stderr)
    if default:
        print(compare_with_shipped(path), file=sys.stderr)
    if args.ship:
        manifest = ship(path)
        print(f"shipped: {SHIPPED_DIR} now holds this build (digest {manifest['digest']})", file=sys.stderr)
    print(path)
    return path


def main(argv: list[str] | None = None) -> int:
    """The console script: exit status 0, or 2 with a user error's message (`errors.cli`)."""
    return cli(run, argv)


if __name__ == "__main__":
    sys.exit(main())
