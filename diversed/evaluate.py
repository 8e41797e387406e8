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
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from transformers import StoppingCriteria, StoppingCriteriaList

from diversed import CONFIG_DIR
from diversed.engine import left_pad, speculative_generate, trigger_mask
from diversed.heads import WeightHead
from diversed.results import ResultStore, grid_key, mean_ci
from diversed.tasks.base import Task, decode_completions
from diversed.verify import DynamicEnsemble, Lossless, StaticEnsemble, Verifier, hidden_size

log = logging.getLogger(__name__)
METHODS = ("autoregressive", "lossless", "static", "dynamic")


# ----------------------------------------------------------------------------- the grid


def grid(sweep: DictConfig | dict, heads: dict[str, WeightHead]) -> Iterator[dict[str, Any]]:
    """Grid points in run order: per temperature, the autoregressive baseline first."""
    methods = list(sweep["methods"])
    for temperature in sweep["temperatures"]:
        if "autoregressive" in methods:
            yield {"method": "autoregressive", "temperature": float(temperature)}
        for n in sweep["draft_lengths"]:
            base = {"temperature": float(temperature), "num_draft_tokens": int(n)}
            if "lossless" in methods:
                yield {"method": "lossless", **base}
            if "static" in methods:
                for w in sweep["weights"]:
                    yield {"method": "static", "weight": float(w), **base}
            if "dynamic" in methods:
                for name in heads:
                    yield {"method": "dynamic", "head": name, **base}


def check_sweep(sweep: DictConfig | dict) -> None:
    """Bad sweep settings fail here, before the pair is loaded."""
    unknown = set(sweep["methods"]) - set(METHODS)
    if unknown:
        raise ValueError(f"sweep.methods has unknown {sorted(unknown)}; choose from {METHODS}")
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
    """The engine's verifier for a grid point (None: the autoregressive baseline)."""
    method = point["method"]
    if method == "lossless":
        return Lossless()
    if method == "static":
        return StaticEnsemble(point["weight"])
    if method == "dynamic":
        return DynamicEnsemble(heads[point["head"]])
    return None


class _Stop(StoppingCriteria):
    """`generate`'s side of a task's `stop` callback: a row ends once its new tokens reach a stop
    sequence, as it does in the engine (so the time baseline does not decode past it either).
    `cuts[i]` is how many new tokens row i keeps (None while it has not stopped). With
    `stop.triggers`, only rows whose newest token is one are asked (picked on the device), so the
    baseline pays for the check about as the engine does."""

    def __init__(
        self, stop: Callable[[list[int], int], int | None], prompt_len: int, batch: int, vocab: int, device
    ) -> None:
        self.stop, self.prompt_len = stop, prompt_len
        self.cuts: list[int | None] = [None] * batch
        self.triggers = None if (mask := trigger_mask(stop, vocab)) is None else mask.to(device)
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        # one new token per row since the last call; a stopped row stays stopped
        ask = ~self.done if self.triggers is None else self.triggers[input_ids[:, -1]] & ~self.done
        rows = ask.nonzero().flatten().tolist()
        if rows:
            for i, tokens in zip(rows, input_ids[rows, self.prompt_len :].tolist(), strict=True):
                self.cuts[i] = self.stop(tokens, 1)
            self.done[rows] = torch.tensor([self.cuts[i] is not None for i in rows], device=self.done.device)
        return self.done.clone()


def _decode(pair: Any, point: dict[str, Any], verifier: Verifier | None, ids, mask, max_new: int, seed: int, stop=None):
    """One batch through the engine (or `model.generate` for the autoregressive baseline); rows end
    at EOS, at `max_new` tokens, or where `stop` (a task's `stopper`) says."""
    tok = pair.tokenizer
    T = point["temperature"]
    sampling = T > 0
    generator = torch.Generator(device=ids.device).manual_seed(seed)
    if point["method"] == "autoregressive":
        torch.manual_seed(seed)
        kwargs = {"do_sample": True, "temperature": T, "top_k": 0, "top_p": 1.0} if sampling else {"do_sample": False}
        vocab = pair.target.get_output_embeddings().weight.shape[0]
        stopped = _Stop(stop, ids.shape[1], ids.shape[0], vocab, ids.device) if stop is not None else None
        start = time.perf_counter()
        seqs = pair.target.generate(
            ids, attention_mask=mask, max_new_tokens=max_new, eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            stopping_criteria=StoppingCriteriaList([stopped] if stopped else []), **kwargs,
        )  # fmt: skip
        if ids.device.type == "cuda":
            torch.cuda.synchronize(ids.device)
        wall = time.perf_counter() - start
        new = seqs[:, ids.shape[1] :]
        # tokens up to and including the first EOS
        is_eos = new == tok.eos_token_id
        n_new = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, (new != tok.pad_token_id).sum(1))
        if stopped is not None:  # a row ended by `stop` is padded after it (and pad may be EOS)
            cuts = zip(stopped.cuts, n_new.tolist(), strict=True)
            n_new = torch.tensor([n if c is None else min(c, n) for c, n in cuts])
        return seqs, n_new.cpu(), None, wall
    out = speculative_generate(
        pair.target, pair.draft, ids, mask, verifier=verifier, num_draft_tokens=point["num_draft_tokens"],
        max_new_tokens=max_new, do_sample=sampling, temperature=T if sampling else 1.0,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, generator=generator, stop=stop,
    )  # fmt: skip
    return out.sequences, out.stats.new_tokens, out.stats, out.stats.wall_time_s


def run_point(pair: Any, task: Task, point: dict[str, Any], verifier: Verifier | None, *, batch_size: int, seed: int):
    """Decode and score every example; returns (record fields, per-example rows)."""
    tok = pair.tokenizer
    examples = list(task)
    prompts = task.encode(tok, examples)
    max_new = task.max_new_tokens
    stop = task.stopper(tok)
    rows, totals = [], {"accepted": 0, "proposed": 0, "rounds": 0, "new": 0, "w_sum": 0.0, "w_count": 0}
    wall = 0.0
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
        totals["new"] += int(n_new.sum())
        if stats is not None:
            totals["accepted"] += int(stats.accepted.sum())
            totals["proposed"] += int(stats.proposed.sum())
            totals["rounds"] += int(stats.rounds.sum())
            totals["w_sum"] += float(stats.w_sum.sum())
            totals["w_count"] += int(stats.w_count.sum())
        for i, ex in enumerate(batch):
            rows.append({
                "example_id": task.example_id(ex, start + i), "completion": completions[i], "score": batch_scores[i],
                "new_tokens": int(n_new[i]), "accepted_drafts": int(stats.accepted[i]) if stats is not None else None,
            })  # fmt: skip
    score, low, high = mean_ci(scores)
    spec = point["method"] != "autoregressive"
    fields = {
        "score": score, "score_ci_low": low, "score_ci_high": high,
        "acceptance_rate": totals["accepted"] / max(totals["proposed"], 1) if spec else None,
        "mean_accepted_length": totals["accepted"] / max(totals["rounds"], 1) if spec else None,
        "tokens_per_target_call": totals["new"] / max(totals["rounds"], 1) if spec else 1.0,
        "tokens_per_s": totals["new"] / wall if wall > 0 else None,
        "wall_time_s": wall,
        "mean_w": totals["w_sum"] / max(totals["w_count"], 1) if point["method"] == "dynamic" else None,
        "new_tokens": totals["new"],
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
