"""The evaluation grid: methods × weight w × draft length N × temperature, for one pair and task.

`python -m diversed.evaluate +experiment=toy` loads the pair once and, for each temperature in
`sweep.temperatures` and each N in `sweep.draft_lengths`, decodes the task's prompts in batches
with: the autoregressive target (`model.generate`, the time baseline), lossless speculative
decoding, the static ensemble at each w in `sweep.weights`, and the dynamic ensemble with each
head in `sweep.heads`; every method ends a row at EOS or at the task's stop sequences (`Task.stopper`).
Every grid point becomes one record in `<run dir>/results.jsonl` (through
`results.ResultStore`, so a re-run skips finished points and a killed run leaves nothing partial)
and its per-example rows; the resolved config is saved beside them.

Coarse axes (task, experiment, cluster fan-out) are Hydra multirun's job, not this module's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from diversed import CONFIG_DIR
from diversed.engine import speculative_generate
from diversed.heads import WeightHead
from diversed.inputs import left_pad
from diversed.methods import METHOD_NAMES, METHODS
from diversed.reference import transformers_generate
from diversed.results import ResultStore, grid_key, mean_ci
from diversed.stats import Totals
from diversed.stopping import decode_completions
from diversed.tasks.base import Task
from diversed.verify import Verifier, hidden_size

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- the grid


def grid(sweep: DictConfig | dict, heads: dict[str, WeightHead]) -> Iterator[dict[str, Any]]:
    """Grid points in run order: per temperature, the non-speculative methods first, then per N
    each speculative method at each value of its knob (`sweep.<Method.sweep>`; heads by path)."""
    methods = [m for m in METHOD_NAMES if m in set(sweep["methods"])]
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
                if not m.knobs:
                    yield {"method": name, **base}
                    continue
                values = list(heads) if m.sweep == "heads" else [float(v) for v in sweep[m.sweep]]
                for value in values:
                    yield {"method": name, m.knobs[0]: value, **base}


def check_sweep(sweep: DictConfig | dict) -> None:
    """Bad sweep settings fail here, before the pair is loaded."""
    unknown = set(sweep["methods"]) - set(METHOD_NAMES)
    if unknown:
        raise ValueError(f"sweep.methods has unknown {sorted(unknown)}; choose from {METHOD_NAMES}")
    bad_w = [w for w in sweep["weights"] if not 0.0 <= float(w) <= 1.0]
    if bad_w:
        raise ValueError(f"sweep.weights must lie in [0, 1] (the weight on the TARGET), got {bad_w}")
    bad_n = [n for n in sweep["draft_lengths"] if int(n) < 1]
    if bad_n:
        raise ValueError(f"sweep.draft_lengths must be >= 1, got {bad_n}")
    bad_t = [t for t in sweep["temperatures"] if float(t) < 0]
    if bad_t:
        raise ValueError(f"sweep.temperatures must be >= 0 (0 = greedy), got {bad_t}")
    if "dynamic" in sweep["methods"]:
        for h in sweep["heads"]:
            if not (Path(h) / "head_config.json").is_file():
                raise ValueError(f"sweep.heads entry {h} is not a saved head (no head_config.json); train one first")


def load_heads(paths: list[str], pair: Any) -> dict[str, WeightHead]:
    """Each head, checked against the pair's hidden sizes, keyed by its path."""
    heads = {}
    for path in paths:
        head = WeightHead.from_pretrained(
            path, draft_hidden_size=hidden_size(pair.draft), target_hidden_size=hidden_size(pair.target)
        )
        heads[str(path)] = head.to(pair.device).eval()
    return heads


# ----------------------------------------------------------------------------- one grid point


def make_verifier(point: dict[str, Any], heads: dict[str, WeightHead]) -> Verifier | None:
    """The engine's verifier for a grid point (None: a method without one, e.g. autoregressive)."""
    build = METHODS[point["method"]].verifier
    return None if build is None else build(point, heads)


def _decode(pair: Any, point: dict[str, Any], verifier: Verifier | None, ids, mask, max_new: int, seed: int, stop=None):
    """One batch through the engine (or transformers' `generate` for the autoregressive baseline);
    rows end at EOS, at `max_new` tokens, or where `stop` (a task's `stopper`) says."""
    tok = pair.tokenizer
    T = point["temperature"]
    sampling = T > 0
    common = {"max_new_tokens": max_new, "do_sample": sampling, "temperature": T if sampling else 1.0,
              "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "stop": stop}  # fmt: skip
    if point["method"] == "autoregressive":
        torch.manual_seed(seed)  # transformers samples from the global generator
        out = transformers_generate(pair.target, ids, mask, **common)
        return out.sequences, out.stats.new_tokens, None, out.stats.wall_time_s
    generator = torch.Generator(device=ids.device).manual_seed(seed)
    out = speculative_generate(pair.target, pair.draft, ids, mask, verifier=verifier,
                               num_draft_tokens=point["num_draft_tokens"], generator=generator, **common)  # fmt: skip
    return out.sequences, out.stats.new_tokens, out.stats, out.stats.wall_time_s


def run_point(pair: Any, task: Task, point: dict[str, Any], verifier: Verifier | None, *, batch_size: int, seed: int):
    """Decode and score every example; returns (record fields, per-example rows)."""
    tok = pair.tokenizer
    examples = list(task)
    prompts = task.encode(tok, examples)
    max_new = task.max_new_tokens
    stop = task.stopper(tok)
    rows, totals = [], Totals()
    wall, new_tokens = 0.0, 0
    metric_sums: dict[str, float] = {}
    scores: list[float] = []
    for start in range(0, len(examples), batch_size):
        batch = examples[start : start + batch_size]
        ids, mask = left_pad(prompts[start : start + batch_size], tok.pad_token_id, pair.device)
        seqs, n_new, stats, t = _decode(pair, point, verifier, ids, mask, max_new, seed + start, stop)
        wall += t
        P = ids.shape[1]
        completions = decode_completions(tok, seqs, P, n_new)
        batch_scores = task.score_batch(batch, completions)
        scores += batch_scores
        if type(task).metrics is not Task.metrics:  # tasks with several metrics (ROUGE-1/2/L)
            for ex, c in zip(batch, completions, strict=False):
                for k, v in task.metrics(ex, c).items():
                    metric_sums[k] = metric_sums.get(k, 0.0) + v
        new_tokens += int(n_new.sum())
        if stats is not None:
            totals.add(stats)
        for i, ex in enumerate(batch):
            rows.append({
                "example_id": task.example_id(ex, start + i), "completion": completions[i], "score": batch_scores[i],
                "new_tokens": int(n_new[i]), "accepted_drafts": int(stats.accepted[i]) if stats is not None else None,
            })  # fmt: skip
    score, low, high = mean_ci(scores)
    spec = METHODS[point["method"]].speculative
    fields = {
        "score": score, "score_ci_low": low, "score_ci_high": high,
        "acceptance_rate": totals.acceptance_rate if spec else None,
        "mean_accepted_length": totals.mean_accepted_length if spec else None,
        "tokens_per_target_call": totals.tokens_per_target_call if spec else 1.0,
        "tokens_per_s": new_tokens / wall if wall > 0 else None,
        "wall_time_s": wall,
        "mean_w": totals.mean_w,
        "new_tokens": new_tokens,
        **{k: v / max(len(scores), 1) for k, v in metric_sums.items()},
    }  # fmt: skip
    return fields, rows


# ----------------------------------------------------------------------------- the runner


def evaluate(cfg: DictConfig) -> Path:
    """Run every grid point not yet in the run directory; returns the directory."""
    sweep = cfg.sweep
    check_sweep(sweep)
    run_dir = Path(cfg.paths.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    store = ResultStore(run_dir)

    log.info(f"Instantiating task <{cfg.task.name}>")
    task = hydra.utils.instantiate(cfg.task)
    log.info(f"Instantiating pair <{cfg.pair._target_}>")
    pair = hydra.utils.instantiate(cfg.pair)
    heads = load_heads(list(sweep.heads) if "dynamic" in sweep.methods else [], pair)
    meta = {"pair": pair.name, "task": task.name, "seed": int(cfg.seed), "n_examples": len(task), "metric": task.metric}
    extras = {k: getattr(task, k) for k in ("use_stemmer", "max_summary_words") if hasattr(task, k)}

    ar_wall: dict[float, float] = {
        r["temperature"]: r["wall_time_s"] for r in store.records() if r["method"] == "autoregressive"
    }
    points = list(grid(sweep, heads))
    done = store.done_keys()
    log.info(f"{len(points)} grid points, {sum(grid_key(**meta, **p) in done for p in points)} already done")
    for point in points:
        key = grid_key(**meta, **point)
        if key in done:
            continue
        verifier = make_verifier(point, heads)
        fields, rows = run_point(pair, task, point, verifier, batch_size=int(sweep.batch_size), seed=int(cfg.seed))
        if point["method"] == "autoregressive":
            ar_wall[point["temperature"]] = fields["wall_time_s"]
        base = ar_wall.get(point["temperature"])
        fields["normalized_time"] = fields["wall_time_s"] / base if base else None
        record = store.write({**meta, **point, **fields, **extras}, rows)
        log.info(
            f"{point['method']:>14} T={point['temperature']} N={point.get('num_draft_tokens')} "
            f"w={point.get('weight')} score={record['score']:.3f} acc={record['acceptance_rate']} "
            f"time={record['normalized_time']}"
        )
    return run_dir


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="evaluate")
def main(cfg: DictConfig) -> None:
    print(evaluate(cfg))


if __name__ == "__main__":
    main()
