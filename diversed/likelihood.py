"""`python -m diversed.likelihood <evaluate's overrides>`: does a head use its context? Each head of
`sweep.heads` against the static ensemble that rejects as much, on the references of the sweep's own
rows, without decoding.

It reads evaluate's config, so a command that runs a sweep measures the same rows (task, split,
`task.n_examples`, seed, prompts, chat template), pair and heads; `sweep.temperatures` gives the
temperatures (T = 0 is skipped: greedy has no law to score). Per temperature one pass of both models
over every example's prompt and reference (`DiversedModule.teacher_forced_rows`, the rows the
teacher-forced objective trains on) gives, per reference token, p_t(y*), q_t(y*), TV_t and the hidden
states; per head then, with w_t the head's weight:

    NLL(head)  = −Σ_t log(w_t·p_t(y*_t) + (1 − w_t)·q_t(y*_t)) / Σ_t 1        (nats per token)
    w*         = Σ_t w_t·TV_t / Σ_t TV_t       the one constant with the head's mean rejection, so
    acceptance = 1 − mean_t w·TV                is the same for the head and for static w*
    Δ          = NLL(head) − NLL(static w*)     < 0: at that acceptance the head's v explains the
                                                references better than the constant that has it

1 − w·TV is the expected acceptance of a token drafted from q (v − q = w·(p − q)), here at the
reference's prefixes (teacher-forced), not along a decoding's own path; an equal mean acceptance is
not an equal accepted length either. Δ is paired by example (pooled over the tokens; 95 % BCa
bootstrap over examples, `sweep.intervals`) with w* held at its value on all the rows (its own
interval is recorded beside it), next to Δ against static w at the head's mean w (the comparison a
decoded sweep makes, at unequal acceptance) and the static curve (NLL and acceptance for w in 0,
0.05, ..., 1). The laws are the full softmax at each temperature (no engine.top_k / top_p: refused),
and a token both laws give under 1e-30 is floored there (`log_v`; their share is recorded: at low
temperatures it sets the NLL's level, not Δ). This is a proxy: the reference's likelihood, not the
task's score. It costs a pass over the rows, not a decode; a decoded sweep (`diversed.evaluate`) is
what measures quality and acceptance themselves.

Writes `<run dir>/likelihood.json` (one record per head and temperature, with the head's digest and
the settings that chose the rows), rewritten whole after each temperature, and prints a table. It
decodes, times and chooses nothing.
"""

from __future__ import annotations

import gc
import json
import logging
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from omegaconf import DictConfig

from diversed import CONFIG_DIR
from diversed.config.runtime import instantiate, keep_freed_memory, quiet, set_threads
from diversed.errors import ConfigError, hydra_task
from diversed.evaluate import check_evaluate
from diversed.files.atomic import write_file
from diversed.models.pair import describe_pair
from diversed.sweep.intervals import bootstrap_interval, pooled_ratio, pooled_ratio_difference
from diversed.sweep.plugins import start
from diversed.sweep.point import load_heads
from diversed.sweep.resources import check_resources
from diversed.tasks import unscored_options
from diversed.tasks.context import check_context
from diversed.tasks.data import skipped
from diversed.training.head_module import DiversedModule
from diversed.training.reinforce import equal_acceptance_weight, log_v

log = logging.getLogger(__name__)

CURVE = [round(0.05 * i, 2) for i in range(21)]  # the static curve's w


def likelihood(cfg: DictConfig) -> Path:
    """Check the settings and the heads (before any weights load), then per temperature score the rows
    once and set every head against the static ensemble at its acceptance; write likelihood.json."""
    check_evaluate(cfg)
    set_threads(cfg.get("runtime", {}).get("threads"))
    keep_freed_memory(cfg.get("runtime", {}).get("malloc", "keep"))
    quiet(bool(cfg.get("runtime", {}).get("verbose", False)))
    sweep = cfg.sweep
    temperatures = [float(t) for t in sweep.temperatures if float(t) > 0]
    if not temperatures:
        raise ConfigError(
            f"sweep.temperatures={list(sweep.temperatures)}: greedy has no law to score the references "
            "under; give a temperature above 0 (e.g. 'sweep.temperatures=[1.0]')"
        )
    if not sweep.get("heads"):
        raise ConfigError("sweep.heads is empty: name the heads to check ('sweep.heads=[DIR, ...]')")
    engine = cfg.get("engine", {})
    if (engine.get("top_k") or 0) > 0 or float(engine.get("top_p", 1.0)) < 1.0:
        raise ConfigError(
            f"engine.top_k={engine.get('top_k')} engine.top_p={engine.get('top_p')}: the references are "
            "scored under the full softmax, not the truncated laws a sweep with these decodes from; "
            "set engine.top_k=0 engine.top_p=1.0"
        )
    # it scores references and runs no completion: a task's code-execution opt-in (MBPP's) is not asked
    task = instantiate(cfg.task, **unscored_options(cfg.task.get("name")))
    card = describe_pair(cfg.pair)  # the pair's files, no weights
    check_context(card, task, task.max_new_tokens)
    # the heads checked as a sweep checks them (finite, of this pair's shapes), digested for the records
    resources = check_resources(card, {**sweep, "methods": ["dynamic"]})
    heads = list(resources.paths().get("head", []))
    examples = list(task)
    try:  # every example has a reference to score (a task without one: its error, before any weights)
        refs = [task.target(e) for e in examples]
    except NotImplementedError as e:
        raise ConfigError(f"task {task.name} gives no reference completions to score: {e}") from None
    if not any(refs):
        raise ConfigError(f"none of the {len(examples)} {task.name} examples has a reference to score")
    run_dir = Path(cfg.paths.output_dir)
    out = run_dir / "likelihood.json"
    pair = instantiate(cfg.pair)
    loaded = load_heads(heads, pair)
    records: list[dict[str, Any]] = []
    for t in temperatures:
        shared: list[dict[str, torch.Tensor]] | None = None  # the rows every plain head reads
        for path in heads:
            head = loaded[path]
            own = bool(getattr(head, "uses_distributions", False))  # features from p and q: rows of its own
            if own or shared is None:
                module = DiversedModule(
                    head,
                    torch.optim.AdamW,
                    pair=pair,
                    temperature=t,
                    do_sample=True,
                    max_new_tokens=task.max_new_tokens,
                ).to(pair.device)
                log.info(f"T={t:g}: scoring the references of {len(examples)} {task.name} examples")
                rows = module.teacher_forced_rows(task, examples, int(sweep.batch_size))
                shared = shared if own else rows
            else:
                rows = shared
            record = compare(head, rows, pair.device)
            records.append(
                {
                    "pair": card.name if card is not None else str(cfg.pair.get("name")),
                    "task": task.name,
                    "split": task.source.get("split"),
                    "n_examples": len(examples),
                    **skipped(task.source.get("skip_examples", 0)),  # fresh rows, where asked
                    "seed": int(cfg.seed),
                    "temperature": t,
                    "head": path,
                    "files": resources.settings({"method": "dynamic", "head": path}),  # the head's digest
                    **resources.record({"method": "dynamic", "head": path}),
                    **record,
                }
            )
            log.info(line(records[-1]))
        del shared, rows  # this temperature's rows, before the next one's are scored
        gc.collect()
        write_file(out, json.dumps(records, indent=1) + "\n")  # each temperature kept as it ends
    print(table(records))
    return out


@torch.no_grad()
def compare(head: torch.nn.Module, rows: list[dict[str, torch.Tensor]], device: Any) -> dict[str, Any]:
    """The head against static ensembles over `rows` (`teacher_forced_rows`): NLL per token, the
    teacher-forced acceptance 1 − mean w·TV, w* and the paired differences with their intervals."""
    per_row = []
    for r in rows:
        w = head(r["h_d"].to(device), r["h_t"].to(device), features=_on(r.get("features"), device))
        per_row.append((w.float().cpu(), r["p_y"], r["q_y"], r["tv"]))
    w_all, tv_all = torch.cat([x[0] for x in per_row]), torch.cat([x[3] for x in per_row])
    ones = torch.ones_like(w_all, dtype=torch.bool)
    w_star = equal_acceptance_weight(w_all, tv_all, ones)  # w* = Σ w·TV / Σ TV
    w_mean = float(w_all.mean())
    lo, hi = getattr(head, "w_bounds", (0.0, 1.0))
    n = np.array([len(x[0]) for x in per_row], dtype=float)

    def nll(w_of) -> np.ndarray:  # −Σ_t log v_t(y*_t) per row
        return np.array([float(-log_v(w_of(x[0]), x[1], x[2]).sum()) for x in per_row])

    head_nll, equal_nll, mean_nll = nll(lambda w: w), nll(lambda w: w_star), nll(lambda w: w_mean)
    floored = sum(int(((x[1] < 1e-30) & (x[2] < 1e-30)).sum()) for x in per_row)  # both laws rule y* out
    wtv, tvs = (
        np.array([float(f(x)) for x in per_row])
        for f in (lambda x: (x[0] * x[3]).sum(), lambda x: x[3].sum())
    )
    tokens, mean_tv = float(n.sum()), float(tv_all.mean())

    def diff(other: np.ndarray) -> list[float]:
        return list(bootstrap_interval(pooled_ratio_difference, [head_nll, n, other, n]))

    curve = [
        {"w": w, "acceptance": 1 - w * mean_tv, "nll": float(nll(lambda _, w=w: w).sum() / tokens)}
        for w in CURVE
    ]
    return {
        "n_tokens": int(tokens),
        "mean_w": w_mean,
        "w_quantiles": [float(v) for v in torch.quantile(w_all, torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9]))],
        "at_bounds": float(((w_all - lo < 0.01) | (hi - w_all < 0.01)).float().mean()),  # within 0.01
        "w_equal_acceptance": w_star,
        "w_equal_acceptance_interval": list(bootstrap_interval(pooled_ratio, [wtv, tvs]))[1:],
        "floored_share": floored / tokens,
        "acceptance": 1 - float((w_all * tv_all).mean()),
        "nll_head": float(head_nll.sum() / tokens),
        "nll_static_equal_acceptance": float(equal_nll.sum() / tokens),
        "nll_static_mean_w": float(mean_nll.sum() / tokens),
        "delta_equal_acceptance": diff(equal_nll),
        "delta_mean_w": diff(mean_nll),
        "static_curve": curve,
    }


def _on(x: torch.Tensor | None, device: Any) -> torch.Tensor | None:
    return None if x is None else x.to(device)


def line(r: dict[str, Any]) -> str:
    """One record as a log line."""
    d, lo, hi = r["delta_equal_acceptance"]
    return (
        f"T={r['temperature']:g} {r['head']}: NLL {r['nll_head']:.4f} against "
        f"{r['nll_static_equal_acceptance']:.4f} for static w*={r['w_equal_acceptance']:.3f} "
        f"(mean w {r['mean_w']:.3f}, acceptance {r['acceptance']:.3f}): "
        f"Δ {d:+.4f} [{lo:+.4f}, {hi:+.4f}] nats per token"
    )


def table(records: list[dict[str, Any]]) -> str:
    """The records as a Markdown table."""
    head = ["T", "head", "tokens", "mean w", "w*", "acceptance", "NLL head", "NLL static w*", "Δ [95 %]"]
    rows = ["| " + " | ".join([*head, "Δ vs static at mean w [95 %]", "floored %"]) + " |", "|---" * 11 + "|"]
    d = "{:+.4f} [{:+.4f}, {:+.4f}]"
    for r in records:
        cells = [
            f"{r['temperature']:g}",
            r["head"],
            str(r["n_tokens"]),
            f"{r['mean_w']:.3f}",
            f"{r['w_equal_acceptance']:.3f}",
            f"{r['acceptance']:.3f}",
            f"{r['nll_head']:.4f}",
            f"{r['nll_static_equal_acceptance']:.4f}",
            d.format(*r["delta_equal_acceptance"]),
            d.format(*r["delta_mean_w"]),
            f"{100 * r['floored_share']:.1f}" if "floored_share" in r else "–",  # (records before it: –)
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="likelihood")
@hydra_task
def _main(cfg: DictConfig) -> None:
    likelihood(cfg)


def main() -> None:
    """`python -m diversed.likelihood`: the plugins the command line names loaded, then Hydra composes."""
    start()
    _main()


if __name__ == "__main__":
    main()
