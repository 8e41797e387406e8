"""One grid point, decoded, scored and timed: the heads and drafts a sweep loads, `decode` (the
point's method on its decoder: the engine, the autoregressive loop or transformers), `decode_task`
(a task's prompts in batches, stopped at its stop sequences, scored, their statistics summed: the one
loop that evaluate, the bench, the drafts' α and the toy build decode with), `run_point`
(decoded once and scored once per example: the record's fields and its per-example rows) and
`time_point` (warm-up, timed passes at the sweep's batch size, latency passes at batch 1, each a
`decode_task` with its decoder calls timed; the times go through `sweep.times`). It writes nothing:
`diversed.evaluate` keeps the records.

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

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from diversed.decoding.autoregressive import autoregressive_generate
from diversed.decoding.engine import speculative_generate
from diversed.decoding.inputs import left_pad
from diversed.decoding.prompt_cache import PromptCache
from diversed.decoding.reference import transformers_generate
from diversed.decoding.stats import Totals
from diversed.decoding.stopping import decode_completions
from diversed.decoding.verify import Verifier, sampler_name
from diversed.models.heads import WeightHead
from diversed.models.pair import hidden_size, load_member
from diversed.sweep.intervals import mean_interval
from diversed.sweep.methods import METHODS, WEIGHT
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
    return {
        str(path): load_member(
            "draft",
            str(path),
            pair.device,
            getattr(pair, "tokenizer", None),
            {"dtype": pair.target.dtype},
            pair.forward,
            getattr(pair, "draft_quantize", "none"),
            getattr(pair, "cpu_kernels", "auto"),
        )
        for path in paths
    }


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
    generator: torch.Generator | None = None,
):
    """One batch by the point's method: the engine, our autoregressive loop, or transformers (alone,
    or assisted with its static ensemble); rows end at EOS, at `max_new` tokens, or where `stop`
    (a task's `stopper`) says. `drafts`: the loaded values of path knobs that replace the pair's draft
    (`Files.replaces_draft`: a fine-tuned draft), by path; the point's value of such a knob decodes
    as its draft.
    `prompt_cache`: the engine's and our loop's prompt passes kept there (transformers' decoders read
    their prompts themselves). Draws come from a generator seeded with `seed` (and transformers' from
    torch's global one, seeded so), or from `generator` and torch's global one as the caller left them."""
    engine = dict(engine or {})
    # the engine's sampling truncation goes to every decoder: the same p and q for each method
    truncation = {"top_k": engine.pop("top_k", 0), "top_p": engine.pop("top_p", 1.0)}
    common = sampling_kwargs(pair.tokenizer, point["temperature"], max_new, stop=stop, **truncation)
    given = generator is not None  # (else its own generators, seeded with `seed`)
    generator = generator if given else torch.Generator(device=ids.device).manual_seed(seed)
    method = METHODS[point["method"]]
    replacing = [point.get(k.field) for k in method.knobs if k.path and k.files.replaces_draft]
    draft = next((drafts[p] for p in replacing if p in (drafts or {})), pair.draft)
    if method.decoder == "transformers":
        if not given:
            torch.manual_seed(seed)  # transformers samples from the global generator
        if not method.speculative:
            return transformers_generate(pair.target, ids, mask, **common)
        return transformers_generate(
            pair.target,
            ids,
            mask,
            draft=draft,
            ensemble_weight=point.get(WEIGHT.field),
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


def sampling_kwargs(
    tok: Any, temperature: float, max_new: int, *, stop=None, top_k: int = 0, top_p: float = 1.0
) -> dict[str, Any]:
    """The keyword arguments every decoder samples with (the engine, our loop, transformers'): greedy at
    T = 0, else temperature `temperature`, then `top_k` and `top_p` of p and q alike; rows end at the
    tokenizer's EOS, `max_new` tokens or where `stop` says. The one place they are built (`decode`, and
    the bench's own references)."""
    return {
        "max_new_tokens": max_new,
        "do_sample": temperature > 0,
        "temperature": temperature if temperature > 0 else 1.0,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "stop": stop,
        "top_k": top_k,
        "top_p": top_p,
    }


def batch_indices(lengths: list[int], batch_size: int, by_length: bool = False) -> list[list[int]]:
    """The examples' indices in batches of `batch_size`: in the task's order, or with `by_length`
    (`sweep.batch_by_length`) in the order of their prompts' lengths (stable), so that a batch's
    prompts are about as long as each other and left padding wastes little of a prompt pass (100
    XSum test prompts at batch 8: 2.08 padded tokens per prompt token in the task's order, 1.11 so)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__) if by_length else list(range(len(lengths)))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


# ----------------------------------------------------------------------------- a task, decoded


@dataclass
class Decoded:
    """A task's prompts decoded by `decode_task`. `batches` is the decoding order (each batch's example
    indices), `outputs` each batch's `(sequences, stats)` and `widths` its padded prompt width; per
    example, in the task's order: `completions` and `metrics` (every metric of the task, scored once by
    `score`; empty where not scored). `totals` sums every batch's statistics (`stats.Totals`)."""

    examples: list[dict[str, Any]]
    prompts: list[list[int]]
    # tokens each prompt lost to the task's `max_prompt_tokens` (all 0 when `decode_task` was given
    # `prompts=`: it cuts nothing)
    cuts: list[int]
    batches: list[list[int]] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    metrics: list[dict[str, float]] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)

    def rows(self):
        """(example index, its batch's output, its row in it, the batch's prompt width), in decoding order."""
        for index, out, width in zip(self.batches, self.outputs, self.widths, strict=True):
            for i, j in enumerate(index):
                yield j, out, i, width

    def score(self, task: Task, tok: Any) -> None:
        """Each decoded example's completion and its metrics (`Task.checked_metrics`, each completion
        scored once, batch by batch in decoding order), in the task's order: the one place a batch's
        completions are scored (`decode_task`, and `time_point` after its timed passes)."""
        found: dict[int, tuple[str, dict[str, float]]] = {}
        for index, batch, width in zip(self.batches, self.outputs, self.widths, strict=True):
            texts = decode_completions(tok, batch.sequences, width, batch.stats.new_tokens)
            scored = task.checked_metrics([self.examples[j] for j in index], texts)
            found.update({j: (texts[i], scored[i]) for i, j in enumerate(index)})
        self.completions = [found[j][0] for j in sorted(found)]
        self.metrics = [found[j][1] for j in sorted(found)]

    def per_example(self, stat: str) -> list[int]:
        """A per-row statistic (`accepted`, `verified`, `new_tokens`...) of each example, task's order."""
        found = {j: int(getattr(out.stats, stat)[i]) for j, out, i, _ in self.rows()}
        return [found[j] for j in range(len(found))]


def decode_task(  # ~80 lines: the one loop every caller decodes with, each option said in one docstring
    pair: Any,
    point: dict[str, Any],
    verifier: Verifier | None,
    task: Task | None = None,
    *,
    prompts: list[list[int]] | None = None,
    batch_size: int,
    seed: int = 0,
    generator: torch.Generator | None = None,
    by_length: bool = False,
    max_new: int | None = None,
    stop: bool = True,
    score: bool = True,
    engine: dict[str, Any] | None = None,
    drafts: dict[str, Any] | None = None,
    prompt_cache: PromptCache | None = None,
    progress: bool = False,
    call: Callable[[Callable[[], Any]], Any] | None = None,
    decoder: Callable[..., Any] | None = None,
    batches: list[list[int]] | None = None,
    seeds: list[int] | None = None,
    totals: Totals | None = None,
) -> Decoded:
    """Decode a task's prompts (or `prompts`, token ids, without a task) by the point's method
    (`decode`), in batches of `batch_size` (`batch_indices`, `by_length` too), and score each
    completion once (`Task.checked_metrics`; `score=False`: not scored). The one loop that evaluate
    (`run_point`), the bench, the drafts' α and the toy build decode with.

    Draws: each batch its own generator seeded with `seed` + the position of its first example in the
    decoding order (a sweep's points), or `seeds[i]` for batch i, or, with `generator`, that one
    generator for every batch in turn (torch's global generator left as the caller seeded it). Rows end
    at EOS, at `max_new` (default: the task's `max_new_tokens`) or, with `stop`, at the task's stop
    sequences. `batches` (example indices per batch, in decoding order) replaces `batch_indices`'s:
    `time_point` decodes some examples alone, each with the seed its scored batch gave it.
    `call(decode_batch)` runs each batch's decoder call (the bench and `time_point` time it there: the
    batch's prompts are padded and copied to the pair's device inside it, as they always were timed);
    `decoder(ids, mask, **kwargs)` decodes instead of `decode(pair, point, verifier, ...)` (the bench's
    own references). The completions are scored after the last batch (`Decoded.score`). `totals`: every
    batch's statistics are added to it (`Decoded.totals` is it; default a new `Totals`): the bench sums a
    setting's batches over all its chunks there."""

    tok = pair.tokenizer
    examples = list(task) if task is not None else []
    if prompts is None:
        prompts, cuts = task.encode_cut(tok, examples)
    else:
        cuts = [0] * len(prompts)
    if batches is None:
        batches = batch_indices([len(p) for p in prompts], batch_size, by_length)
    out = Decoded(examples, prompts, cuts, batches=batches, totals=Totals() if totals is None else totals)
    kwargs = {
        "max_new": max_new or task.max_new_tokens,
        "stop": task.stopper(tok) if stop and task is not None else None,
        "engine": engine,
        "drafts": drafts,
        "prompt_cache": prompt_cache,
    }
    decoder = decoder or (lambda ids, mask, **kw: decode(pair, point, verifier, ids, mask, **kw))
    bar = tqdm(
        total=sum(map(len, out.batches)), desc="decode", unit="example", leave=False, disable=not progress
    )

    def padded(rows: list[list[int]], **kw: Any) -> Any:
        """One batch padded (and copied to the pair's device), then decoded: the call `call` times."""
        return decoder(*left_pad(rows, tok.pad_token_id, pair.device), **kw)

    start = 0  # the batch's first position in the decoding order (its seed)
    for b, index in enumerate(out.batches):
        rows = [prompts[j] for j in index]
        batch_seed = seed + start if seeds is None else seeds[b]
        run = functools.partial(padded, rows, seed=batch_seed, generator=generator, **kwargs)
        batch = call(run) if call else run()
        out.outputs.append(batch)
        out.widths.append(max(map(len, rows)))  # (the padded width, `left_pad`'s)
        out.totals.add(batch.stats)
        bar.update(len(index))
        start += len(index)
    bar.close()
    if score and task is not None:
        out.score(task, tok)
    return out


# ----------------------------------------------------------------------------- a grid point


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
    """Decode every example once and score it once (`decode_task`: every metric of the task);
    returns (record fields, per-example rows, in the task's order). A batch's seed is `seed` + the
    position of its first example in the decoding order. With
    `token_w`, rows of points whose verifier has a weight keep w at each emitted token and the tokens;
    with `progress`, a transient bar counts the examples decoded. With `prompt_cache`
    (`sweep.prompt_cache_gb`), the batches' prompt passes are kept there and reused by later points:
    the record says so (`prompt_cache`), and its scored pass is not a time (`times.measured`)."""
    cache_s = prompt_cache.seconds if prompt_cache is not None else 0.0
    done = decode_task(
        pair,
        point,
        verifier,
        task,
        batch_size=batch_size,
        seed=seed,
        by_length=by_length,
        engine=engine,
        drafts=drafts,
        prompt_cache=prompt_cache,
        progress=progress,
    )
    method = METHODS[point["method"]]
    rows = example_rows(pair.tokenizer, task, done, method.speculative, token_w)
    scores = [r["score"] for r in rows]  # in the task's order whatever the batches' (the interval resamples)
    metric_sums: dict[str, float] = {}
    for m in (done.metrics[j] for index in done.batches for j in index):  # summed in decoding order
        if set(m) != {task.metric}:  # tasks with several metrics (ROUGE-1/2/L): each one's mean, recorded
            for k, v in m.items():
                metric_sums[k] = metric_sums.get(k, 0.0) + v
    score, low, high = mean_interval(scores)
    fields = {
        "score": score,
        "score_ci_low": low,
        "score_ci_high": high,
        **done.totals.record(drafts=method.speculative),  # the statistics (stats.RECORDED); else None
        "new_tokens": sum(int(o.stats.new_tokens.sum()) for o in done.outputs),
        "empty_rate": sum(r["empty"] for r in rows) / max(len(rows), 1),  # completions with nothing to score
        "capped_rate": sum(r["at_cap"] for r in rows) / max(len(rows), 1),  # completions cut at the cap
        "scored_wall_time_s": sum(o.stats.wall_time_s for o in done.outputs),
        # which draws a seed gives (not the law): our sampler's, transformers' own for its decoders
        "sampler": sampler_name(
            point["temperature"], "transformers" if method.decoder == "transformers" else None
        ),
        # prompt passes kept across points (transformers' decoders read their prompts themselves)
        # and the seconds this point spent computing the passes it asked for first
        **(
            {"prompt_cache": True, "prompt_pass_s": prompt_cache.seconds - cache_s}
            if prompt_cache is not None and method.decoder != "transformers"
            else {}
        ),
        **{k: v / max(len(scores), 1) for k, v in metric_sums.items()},
    }
    return fields, rows


def example_rows(
    tok: Any, task: Task, done: Decoded, speculative: bool, token_w: bool
) -> list[dict[str, Any]]:
    """`run_point`'s per-example rows, in the task's order: what each example saw and made, its score,
    and its drafts' counts (speculative methods); with `token_w`, w at each emitted token."""
    rows: dict[int, dict[str, Any]] = {}
    for j, out, i, width in done.rows():
        ex, stats, completion, n = (
            done.examples[j],
            out.stats,
            done.completions[j],
            int(out.stats.new_tokens[i]),
        )
        row = rows[j] = {
            "example_id": task.example_id(ex, j),
            "prompt_tokens_cut": done.cuts[j],
            "prompt": tok.decode(done.prompts[j]) if done.cuts[j] else task.full_prompt(ex),  # what it saw
            "reference": task.reference(ex),
            "completion": completion,
            "extracted": task.extract(ex, completion),
            "score": done.metrics[j][task.metric],
            # nothing left to score once cut at the stop sequences (a model that ends at once)
            "empty": not task.truncate(completion).strip(),
            "new_tokens": n,
            # stopped by the task's max_new_tokens, not by the model (an EOS on the last allowed token too)
            "at_cap": n >= task.max_new_tokens,
            "accepted_drafts": int(stats.accepted[i]) if speculative else None,
            "proposed_drafts": int(stats.proposed[i])
            if speculative
            else None,  # acceptance rate's denominator
            "verified_drafts": int(stats.verified[i])
            if speculative and stats.verified is not None
            else None,  # α's
        }
        if token_w and stats.token_w is not None:
            row["tokens"] = out.sequences[i, width : width + n].tolist()
            row["token_text"] = [tok.decode([t]) for t in row["tokens"]]  # for the report
            row["token_w"] = [round(float(v), 4) for v in stats.token_w[i, :n]]
    return [rows[j] for j in range(len(done.examples))]


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
    `latency_repeats` passes over the first `latency_examples` (null, or more than the task has: all),
    each alone at batch 1, the mean per sample, and the tokens one such pass generates. Alone, each
    example decodes with seed + its position in `run_point`'s decoding order: at batch size 1 that is the
    seed the scored pass gave it, so the timed completion is the scored one; at a larger batch size a
    row's draws depend on its batch, so timed and scored samples differ. Either way each timed example
    keeps its own numbers, lists in the task's order: `latency_example_ids`, `latency_example_s` (the
    median over the repeats of its call's seconds), `latency_example_tokens` and
    `latency_example_scores` (its timed completion's new tokens and task score, scored once after every
    timed pass), so times can be read of samples that were scored. With `progress`, a transient bar
    counts the examples decoded over all these passes. With `prompt_cache` (the scored pass kept its
    prompt passes), every timed call reads its prompt in a pass of its own as the scored one did,
    recomputed (`PromptCache(0)`): a time includes reading it.

    Every pass is a `decode_task` (each example alone: `batches` of one, `seeds` as above), none scored,
    whose calls are timed (`call`: a batch's padding, its copy to the device and its decoder call). The
    seconds are end to end (prompt pass included): the engine reads a prompt in its first round's calls,
    so no moment inside a call separates reading it from decoding. Decode-only time is measured instead
    by the same calls stopped after their first new token, `latency_repeats` times more:
    `latency_example_first_s` (each example's median time to its first token), `latency_first_token_s`
    (their mean) and `latency_decode_per_token_s` = Σ_e (t_e − f_e) / Σ_e (n_e − 1), the time per new
    token after the first over the examples that made two or more."""
    prompts = task.encode(pair.tokenizer, list(task))
    order = batch_indices([len(p) for p in prompts], batch_size, by_length)  # run_point's batches
    position = {j: k for k, j in enumerate(j for index in order for j in index)}  # in the decoding order
    k = min(timing.get("latency_examples") or len(prompts), len(prompts)) if timing.get("latency") else 0
    alone = {"batches": [[j] for j in range(k)], "seeds": [seed + position[j] for j in range(k)]}
    lat_repeats = timing.get("latency_repeats") or max(1, timing["repeats"])
    warmup = timing["warmup"] if timing["repeats"] else 0  # no timed pass at the batch size: none to warm
    total = warmup * sum(map(len, order[:1])) + timing["repeats"] * len(prompts)
    bar = tqdm(
        total=total + bool(k) * (timing["warmup"] + 2 * lat_repeats * k),
        desc="timing",
        unit="example",
        leave=False,
        disable=not progress,
    )
    # every call as the scored pass makes it (`decode_task`), on the prompts encoded once; a kept
    # prompt pass recomputed (`PromptCache(0)`), so that a time includes reading the prompt
    cache = None if prompt_cache is None else PromptCache(0)
    same = {"prompts": prompts, "batch_size": batch_size, "seed": seed, "engine": engine, "drafts": drafts}
    passes = functools.partial(_timed_passes, pair, task, point, verifier, bar, prompt_cache=cache, **same)
    out: dict[str, Any] = {}
    passes(warmup, batches=order[:1])
    runs = [sum(calls) for calls in passes(timing["repeats"], batches=order)[0]]
    if runs:
        out.update(wall_time_s=statistics.median(runs), wall_time_runs=runs)
    if k:
        passes(timing["warmup"], batches=alone["batches"][:1], seeds=alone["seeds"][:1])
        timed, last = passes(lat_repeats, **alone)
        # time to the first token: the same calls stopped after one new token (the prompt read in both
        # models, one token out)
        firsts, _ = passes(lat_repeats, max_new=1, **alone)
        last.score(task, pair.tokenizer)  # the last timed pass's samples, scored after every timed call
        out.update(_latency_fields(task, timed, firsts, last))
    bar.close()
    return out


def _timed_passes(
    pair: Any,
    task: Task,
    point: dict[str, Any],
    verifier: Verifier | None,
    bar: Any,
    count: int,
    **kwargs: Any,
) -> tuple[list[list[float]], Decoded | None]:
    """`count` passes of `decode_task(..., **kwargs)`, none scored: each pass's seconds per decoder call,
    and the last pass. A call's seconds are its batch's padding and decoder call, end to end (prompt pass
    included)."""
    times, done = [], None

    def timed(seconds: list[float], call: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        batch = call()
        seconds.append(time.perf_counter() - start)
        bar.update(len(batch.stats.new_tokens))
        return batch

    for _ in range(count):
        calls: list[float] = []
        done = decode_task(
            pair, point, verifier, task, score=False, call=functools.partial(timed, calls), **kwargs
        )
        times.append(calls)
    return times, done


def _latency_fields(
    task: Task, timed: list[list[float]], firsts: list[list[float]], last: Decoded
) -> dict[str, Any]:
    """`time_point`'s latency record fields, from each pass's seconds per example alone (`timed`: to
    the end, `firsts`: to the first token) and the last timed pass (its tokens and scores). Decode-only
    per token = Σ_e (t_e − f_e) / Σ_e (n_e − 1) over examples with two tokens or more (TTFT and time
    per output token, as serving benchmarks split them)."""
    k = len(last.batches)
    lat = [sum(calls) / k for calls in timed]
    tokens = last.per_example("new_tokens")
    first_s = [statistics.median(calls[i] for calls in firsts) for i in range(k)]
    end_s = [statistics.median(calls[i] for calls in timed) for i in range(k)]
    later = [i for i in range(k) if tokens[i] >= 2]
    decode_s = sum(max(end_s[i] - first_s[i], 0.0) for i in later)
    return {
        "latency_s": statistics.median(lat),
        "latency_runs": lat,
        "latency_examples": k,
        "latency_new_tokens": sum(tokens),
        "latency_example_ids": [task.example_id(ex, j) for j, ex in enumerate(last.examples[:k])],
        "latency_example_s": end_s,
        "latency_example_tokens": tokens,
        "latency_example_scores": [m[task.metric] for m in last.metrics],
        "latency_example_first_s": first_s,
        "latency_first_token_s": statistics.mean(first_s),
        "latency_decode_per_token_s": (decode_s / sum(tokens[i] - 1 for i in later) if later else None),
    }
