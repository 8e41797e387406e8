"""One grid point, decoded, scored and timed: the heads and drafts a sweep loads, `decode` (the
point's method on its decoder: the engine, the autoregressive loop or transformers), `run_point`
(decoded once and scored once per example: the record's fields and its per-example rows) and
`time_point` (warm-up, timed passes at the sweep's batch size, latency passes at batch 1; the times
go through `sweep.times`). It writes nothing: `diversed.evaluate` keeps the records.

A point is decoded once and scored, then timed apart from scoring: `timing.warmup` untimed passes,
`timing.repeats` timed passes over all examples at `sweep.batch_size` (throughput), and, with
`timing.latency`, `timing.latency_repeats` passes that decode each example alone at batch 1 (the
paper's mean wall time per sample). Every run is recorded; `times.py` turns them into medians,
times per token and intervals. The time baseline `autoregressive` decodes with the target alone on
the engine's own forward path; transformers' `generate` is the separate reference method
`hf_generate`. Times are normalised by the autoregressive point of the same temperature, settings
and seed (`times.normalized`: the one rule, which `results.load_results` applies to older records).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from tqdm.auto import tqdm

from diversed.analysis.compare import mean_interval
from diversed.decoding.autoregressive import autoregressive_generate
from diversed.decoding.engine import speculative_generate
from diversed.decoding.inputs import left_pad
from diversed.decoding.prompt_cache import PromptCache
from diversed.decoding.reference import transformers_generate
from diversed.decoding.stats import Totals
from diversed.decoding.stopping import decode_completions
from diversed.decoding.verify import Verifier
from diversed.models.heads import WeightHead
from diversed.models.pair import hidden_size
from diversed.sweep.methods import METHODS
from diversed.tasks.base import Task


def load_heads(paths: list[str], pair: Any) -> dict[str, WeightHead]:
    """Each head, checked against the pair's hidden sizes, keyed by its path."""
    sizes = {"draft_hidden_size": hidden_size(pair.draft), "target_hidden_size": hidden_size(pair.target)}
    return {str(p): WeightHead.from_pretrained(p, **sizes).to(pair.device).eval() for p in paths}


def load_drafts(paths: list[str], pair: Any) -> dict[str, Any]:
    """Each fine-tuned draft (a `save_pretrained` directory) in the pair's dtype, on its device,
    frozen, on the pair's forward path, int8 where the pair's draft is (`pair.draft_quantize`) and on
    the pair's CPU kernels (`pair.cpu_kernels`): the baseline's draft costs what the pair's does;
    keyed by its path."""
    from transformers import AutoModelForCausalLM

    from diversed.decoding import draft_vocab
    from diversed.decoding.forward import use_forward
    from diversed.models.packed import pack_linears
    from diversed.models.quantize import quantize_draft

    drafts = {}
    for path in paths:
        model = draft_vocab.attach(AutoModelForCausalLM.from_pretrained(path, dtype=pair.target.dtype), path)
        model = model.to(pair.device)  # (a restricted vocabulary's head put back first)
        model.eval().requires_grad_(False)
        quantize_draft(model, getattr(pair, "draft_quantize", "none"), getattr(pair, "tokenizer", None))
        pack_linears(model, getattr(pair, "cpu_kernels", "auto"))
        use_forward(model, pair.forward)
        drafts[str(path)] = model
    return drafts


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
    prompt_cache: PromptCache | None = None,
):
    """One batch by the point's method: the engine, our autoregressive loop, or transformers (alone,
    or assisted with its static ensemble); rows end at EOS, at `max_new` tokens, or where `stop`
    (a task's `stopper`) says. A fine-tuned draft (`point["draft_model"]`) replaces the pair's.
    `prompt_cache`: the engine's and our loop's prompt passes kept there (transformers' decoders read
    their prompts themselves)."""
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
    if method.decoder == "autoregressive":  # with a verifier: each token from its law given p
        return autoregressive_generate(
            pair.target,
            ids,
            mask,
            verifier=verifier,
            generator=generator,
            prompt_cache=prompt_cache,
            **common,
        )
    return speculative_generate(
        pair.target,
        draft,
        ids,
        mask,
        verifier=verifier,
        generator=generator,
        num_draft_tokens=point["num_draft_tokens"],
        prompt_cache=prompt_cache,
        **engine,
        **common,
    )


def batch_indices(lengths: list[int], batch_size: int, by_length: bool = False) -> list[list[int]]:
    """The examples' indices in batches of `batch_size`: in the task's order, or with `by_length`
    (`sweep.batch_by_length`) in the order of their prompts' lengths (stable), so that a batch's
    prompts are about as long as each other and left padding wastes little of a prompt pass (100
    XSum test prompts at batch 8: 2.08 padded tokens per prompt token in the task's order, 1.11 so)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__) if by_length else list(range(len(lengths)))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def run_point(
    pair: Any,
    task: Task,
    point: dict[str, Any],
    verifier: Verifier | None,
    *,
    batch_size: int,
    seed: int,
    by_length: bool = False,
    engine: dict[str, Any] | None = None,
    drafts: dict[str, Any] | None = None,
    token_w: bool = False,
    progress: bool = False,
    prompt_cache: PromptCache | None = None,
):
    """Decode every example once and score it once (every metric of the task: `Task.checked_metrics`);
    returns (record fields, per-example rows, in the task's order). Batches: `batch_indices` (a batch's
    seed is `seed` + the position of its first example in that order). With
    `token_w`, rows of points whose verifier has a weight keep w at each emitted token and the tokens;
    with `progress`, a transient bar counts the examples decoded. With `prompt_cache`
    (`sweep.prompt_cache_gb`), the batches' prompt passes are kept there and reused by later points:
    the record says so (`prompt_cache`), and its scored pass is not a time (`times.measured`)."""
    tok = pair.tokenizer
    examples = list(task)
    prompts, cuts = task.encode_cut(tok, examples)
    stop = task.stopper(tok)
    rows, totals, new_tokens, wall = [], Totals(), 0, 0.0
    metric_sums: dict[str, float] = {}
    bar = tqdm(total=len(examples), desc="decode", unit="example", leave=False, disable=not progress)
    cache_s = prompt_cache.seconds if prompt_cache is not None else 0.0
    start = 0  # the batch's first position in the decoding order (its seed)
    by_index: dict[int, dict[str, Any]] = {}
    for index in batch_indices([len(p) for p in prompts], batch_size, by_length):
        batch = [examples[j] for j in index]
        ids, mask = left_pad([prompts[j] for j in index], tok.pad_token_id, pair.device)
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
            prompt_cache=prompt_cache,
        )
        stats, n_new = out.stats, out.stats.new_tokens
        wall += stats.wall_time_s
        completions = decode_completions(tok, out.sequences, ids.shape[1], n_new)
        batch_metrics = task.checked_metrics(batch, completions)  # each completion scored once
        batch_scores = [m[task.metric] for m in batch_metrics]
        for m in batch_metrics:
            if set(m) != {task.metric}:  # tasks with several metrics (ROUGE-1/2/L): each one's mean, recorded
                for k, v in m.items():
                    metric_sums[k] = metric_sums.get(k, 0.0) + v
        new_tokens += int(n_new.sum())
        totals.add(stats)
        bar.update(len(batch))
        speculative = METHODS[point["method"]].speculative
        for i, (j, ex) in enumerate(zip(index, batch, strict=True)):
            row = by_index[j] = {
                "example_id": task.example_id(ex, j),
                "prompt_tokens_cut": cuts[j],
                "prompt": tok.decode(prompts[j]) if cuts[j] else task.full_prompt(ex),  # what it saw
                "reference": task.reference(ex),
                "completion": completions[i],
                "extracted": task.extract(ex, completions[i]),
                "score": batch_scores[i],
                # nothing left to score once cut at the stop sequences (a model that ends at once)
                "empty": not task.truncate(completions[i]).strip(),
                "new_tokens": int(n_new[i]),
                "accepted_drafts": int(stats.accepted[i]) if speculative else None,
                "proposed_drafts": int(stats.proposed[i])
                if speculative
                else None,  # acceptance rate's denominator
                "verified_drafts": int(stats.verified[i])
                if speculative and stats.verified is not None
                else None,  # α's
            }
            if token_w and stats.token_w is not None:
                n = int(n_new[i])
                row["tokens"] = out.sequences[i, ids.shape[1] : ids.shape[1] + n].tolist()
                row["token_text"] = [pair.tokenizer.decode([t]) for t in row["tokens"]]  # for the report
                row["token_w"] = [round(float(v), 4) for v in stats.token_w[i, :n]]
        start += len(index)
    rows = [by_index[j] for j in range(len(examples))]
    scores = [r["score"] for r in rows]  # in the task's order whatever the batches' (the interval resamples)
    bar.close()
    score, low, high = mean_interval(scores)
    spec = METHODS[point["method"]].speculative
    fields = {
        "score": score,
        "score_ci_low": low,
        "score_ci_high": high,
        **totals.record(drafts=spec),  # the statistics (stats.RECORDED); without drafts, theirs are None
        "new_tokens": new_tokens,
        "empty_rate": sum(r["empty"] for r in rows) / max(len(rows), 1),  # completions with nothing to score
        "scored_wall_time_s": wall,
        # prompt passes kept across points (transformers' decoders read their prompts themselves)
        # and the seconds this point spent computing the passes it asked for first
        **(
            {"prompt_cache": True, "prompt_pass_s": prompt_cache.seconds - cache_s}
            if prompt_cache is not None and METHODS[point["method"]].decoder != "transformers"
            else {}
        ),
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
    by_length: bool = False,
    prompt_cache: PromptCache | None = None,
) -> dict[str, Any]:
    """Wall times of the point, apart from scoring. Throughput: `repeats` passes over all examples at
    `batch_size` (batched as `run_point` batches them, `by_length` too, with the same seeds: the same
    outputs as scored) after `warmup` passes over the first batch (none when `repeats` is 0); latency:
    `latency_repeats` passes over the first `latency_examples` (null: all), each alone at batch 1, the
    mean per sample, and the tokens one such pass generates. Alone, each example decodes with seed +
    its position in `run_point`'s decoding order: at batch size 1 that is the seed the scored pass gave
    it, so the timed completion is the scored one; at a larger batch size a row's draws depend on its
    batch, so timed and scored samples differ. Either way each timed example keeps its own numbers,
    lists in the task's order: `latency_example_ids`, `latency_example_s` (the median over the repeats
    of its call's seconds), `latency_example_tokens` and `latency_example_scores` (its timed completion's
    new tokens and task score, scored once after the timed passes), so times can be read of samples that
    were scored. With `progress`, a transient bar counts the examples decoded over all these passes. With
    `prompt_cache` (the scored pass kept its prompt passes), every timed call reads its prompt in a pass
    of its own as the scored one did, recomputed (`PromptCache(0)`): a time includes reading it.

    The seconds are end to end (prompt pass included): the engine reads a prompt in its first round's
    calls, so no moment inside a call separates reading it from decoding. Decode-only time is measured
    instead by the same calls stopped after their first new token, `latency_repeats` times more:
    `latency_example_first_s` (each example's median time to its first token), `latency_first_token_s`
    (their mean) and `latency_decode_per_token_s` = Σ_e (t_e − f_e) / Σ_e (n_e − 1), the time per new
    token after the first over the examples that made two or more."""
    tok = pair.tokenizer
    examples = list(task)
    prompts = task.encode(tok, examples)
    stop = task.stopper(tok)
    kwargs = {"max_new": task.max_new_tokens, "stop": stop, "engine": engine, "drafts": drafts}
    kwargs["prompt_cache"] = None if prompt_cache is None else PromptCache(0)

    last: list[tuple[int, Any]] = []  # the last pass's (prompt width, output) per call

    def passes(
        batches: list[list[list[int]]], seeds: list[int], count: int, *, first_token: bool = False
    ) -> list[list[float]]:
        """`count` passes over `batches`, batch i decoded with `seeds[i]`: each pass's seconds per call.
        `first_token`: each call stops after its first new token (the prompt read, one token out)."""
        times = []
        for _ in range(count):
            calls, outs = [], []
            for batch, batch_seed in zip(batches, seeds, strict=True):
                start = time.perf_counter()
                ids, mask = left_pad(batch, tok.pad_token_id, pair.device)
                args = {**kwargs, "max_new": 1} if first_token else kwargs
                outs.append((ids.shape[1], decode(pair, point, verifier, ids, mask, seed=batch_seed, **args)))
                calls.append(time.perf_counter() - start)
                bar.update(len(batch))
            times.append(calls)
            if not first_token:
                last[:] = outs
        return times

    out: dict[str, Any] = {}
    order = batch_indices([len(p) for p in prompts], batch_size, by_length)
    batches = [[prompts[j] for j in index] for index in order]
    firsts = [seed + sum(map(len, order[:i])) for i in range(len(order))]  # run_point's seeds
    position = {j: k for k, j in enumerate(j for index in order for j in index)}  # in the decoding order
    k = (timing.get("latency_examples") or len(prompts)) if timing.get("latency") else 0
    alone = [[p] for p in prompts[:k]]
    alone_seeds = [seed + position[j] for j in range(len(alone))]
    lat_repeats = timing.get("latency_repeats") or max(1, timing["repeats"])
    warmup = timing["warmup"] if timing["repeats"] else 0  # no timed pass at the batch size: none to warm
    total = warmup * sum(map(len, batches[:1])) + timing["repeats"] * len(prompts)
    bar = tqdm(
        total=total + bool(alone) * (timing["warmup"] + 2 * lat_repeats * len(alone)),
        desc="timing",
        unit="example",
        leave=False,
        disable=not progress,
    )
    passes(batches[:1], firsts[:1], warmup)
    runs = [sum(calls) for calls in passes(batches, firsts, timing["repeats"])]
    if runs:
        out.update(wall_time_s=statistics.median(runs), wall_time_runs=runs)
    if alone:
        passes(alone[:1], alone_seeds[:1], timing["warmup"])
        timed = passes(alone, alone_seeds, lat_repeats)
        lat = [sum(calls) / len(alone) for calls in timed]
        tokens = [int(o.stats.new_tokens.sum()) for _, o in last]
        completions = [
            decode_completions(tok, o.sequences, width, o.stats.new_tokens)[0] for width, o in last
        ]
        metrics = task.checked_metrics(examples[: len(alone)], completions)  # the timed samples, scored
        # time to the first token: the same calls stopped after one new token (the prompt read in both
        # models, one token out); decode-only per token = Σ_e (t_e − f_e) / Σ_e (n_e − 1) over examples
        # with two tokens or more (TTFT and time per output token, as serving benchmarks split them)
        firsts = passes(alone, alone_seeds, lat_repeats, first_token=True)
        first_s = [statistics.median(calls[i] for calls in firsts) for i in range(len(alone))]
        end_s = [statistics.median(calls[i] for calls in timed) for i in range(len(alone))]
        later = [i for i in range(len(alone)) if tokens[i] >= 2]
        decode_s = sum(max(end_s[i] - first_s[i], 0.0) for i in later)
        out.update(
            latency_s=statistics.median(lat),
            latency_runs=lat,
            latency_examples=len(alone),
            latency_new_tokens=sum(tokens),
            latency_example_ids=[task.example_id(ex, j) for j, ex in enumerate(examples[: len(alone)])],
            latency_example_s=end_s,
            latency_example_tokens=tokens,
            latency_example_scores=[m[task.metric] for m in metrics],
            latency_example_first_s=first_s,
            latency_first_token_s=statistics.mean(first_s),
            latency_decode_per_token_s=(decode_s / sum(tokens[i] - 1 for i in later) if later else None),
        )
    bar.close()
    return out
