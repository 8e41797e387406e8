"""Throughput benchmark: our engine against transformers, side by side in one process.

`python -m diversed.bench` loads the pair once (the toy pair by default), tokenizes the same
prompts once, and times every setting `--repeats` times, interleaved (repeat r runs every setting
before repeat r + 1 starts, and within a repeat the settings take turns on chunks of prompts),
so that load from other processes slows every setting alike:

- autoregressive decoding of the target alone, greedy and sampled: `target.generate`, and our own
  token-by-token loop through the engine's model calls (same caches and forward path as the engine);
- autoregressive sampling from v = w·p + (1 − w)·q with the dynamic verifier, one target and one
  draft forward per token: what a training rollout costs without speculation;
- transformers assisted generation (batch 1 only, as transformers allows), lossless and with
  `assistant_ensemble_weight`; the draft's `generation_config` has a constant schedule,
  `num_assistant_tokens` = N and `assistant_confidence_threshold` = 0;
- our engine, each registered method of `--methods` (default lossless, static and dynamic; a plugin's
  too, loaded by `plugins=[my.mod]`, its knobs by `--knob field=value`; a path knob's value checked
  before any weights load and loaded as its knob's `Files` says, `sweep.resources`; a fine-tuned draft
  is timed as `--draft`, not as a knob), at every batch size (and, at
  batch 1, static with transformers' bonus token, the same algorithm as transformers' static
  ensemble, and DIVERSED with it: the bonus after a fully accepted round from p, as the paper's
  released code draws it, which takes no draft call for q there); `--first-token target` takes our
  first new token from the target alone (`speculative_generate(first_token=...)`);
- with `--llama-cpp GGUF` (or `auto`: the file the target was converted from), llama.cpp decoding that
  file autoregressively at batch 1 on the same threads (`decoding.llama_cpp`; the optional extra
  `diversed[llamacpp]`): the anchor for what this CPU does with the model, not a quality baseline.

Greedy and `--temperature` are timed, or exactly `--temperatures` (0: greedy). Torch runs on its own
default threads (one per core) unless `--threads` says otherwise; the pair's dtype (`--dtype native`:
bf16 where the CPU has bf16 instructions, else float32) and its CPU kernels (`--cpu-kernels`,
models/packed.py) are logged and recorded.

Per setting it reports the median tokens/s over the repeats (new tokens up to and including EOS
over wall time, prompt processing included; a decode call's time includes padding its batch and
copying it to the device, microseconds, as `sweep.point.time_point` times a call), our ratio to
transformers on the same setting and to llama.cpp at the same temperature, the
α = accepted / verified (the bounds') and accepted / proposed, tokens per target call against its
bound, and the speedup over autoregressive decoding with the same forward path (same batch size
and temperature), also with every prompt pass left out of both times (`decode_speedup`: the
decoding the theory prices); speedups and ratios are pooled (all new tokens over all seconds, every
repeat) with a 95 % paired bootstrap interval over the decode calls (`speedup_interval`: the same
batches of the same prompts in every setting of a batch size); against the theoretical speedup
(`stats.theoretical_speedup`: bound / (N·c + 1)).
Forward times come from hooks on the embeddings and the LM head of both models (`decoding.meter`).
Within each decode call the first forward of each model is its prompt pass (prefill), reported apart
(`*_prefill_ms`, `prefill_time_share`); every later forward is a decoding step (`*_forward_ms`). c is
Leviathan et al.'s: the draft's mean decoding step over the target's one-token decoding step, the latter from
the autoregressive setting with the same forward path, batch size and temperature (no c, theory
or speedup where `--only` leaves that setting out). That theory prices a verification forward over
N + 1 tokens like a one-token step; the report also gives v, our target decoding forward over that
one-token step (`v/d`), the fraction of the bound at that cost, bound / (N·c + v) (`frac@v`: what
is left is the engine's own overhead), and the shares of wall time spent in forwards (`fwd%`,
prompt passes included) and in prompt passes (`pre%`).
`--output FILE.json` writes one record per setting, each saying what it decoded: the pair config,
the models' directories, the task, and its grid point with the digests of the point's files (a head's,
`Bench.decoded_with`), so that `scripts/bench_goals.py --quality` finds a sweep's point of the same
method, knobs, head, numerics and temperature and judges the speed floors at the quality measured there.

The pair is the toy pair, a saved one (`--target/--draft`), a pair config by name (`--pair smollm2`:
real weights, see `weights.py` and `drafts.py`; with `--draft` alone, that config with another draft,
e.g. `--pair qwen25coder --draft draft:qwen25coder_0p5b_v32k`, its head restricted and recorded as
`draft_vocab`), or `--pair random-llama-8b-1b`:
random weights with the shapes of Llama-3.1-8B / 3.2-1B, for timing real sizes on a GPU without
downloads. Prompts are the toy test prompts ("Q: 37+48=") unless `--task gsm8k` (cnndm, xsum,
mbpp) takes the first `--num-prompts` of that task in its own prompt format (`--data-files`
offline, `--num-few-shot`): realistic prompt lengths for a real pair. Every setting decodes to EOS
or `--max-new-tokens` alike (not at a task's stop sequences), sampling with `--top-k`/`--top-p`.

It only measures and reports: pairs come from `diversed.models.pair` (and the toy pair), prompts from
the tasks, methods and their verifiers from the registry (`sweep.methods`), every decode call from
`sweep.point.decode_task` (the loop every entry point decodes with; the bench's own references,
transformers' lossless assisted generation, sampling from v and llama.cpp, through its `decoder`),
statistics and bounds from `diversed.decoding.stats` (bound / (N·c + v) too), forward times from
`decoding.meter`, llama.cpp's decoding from `decoding.llama_cpp`, intervals from `sweep.intervals`;
`scripts/bench_goals.py` checks a set of goals on an `--output` file.
It does not look at what a forward is fed: a prompt pass is a model's first forward in a decode
call, whatever it holds (our engine's first target forward and transformers' assisted generation's
also score the first round's drafts, so the target's prompt pass can cost a little more than the
prompt alone).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from diversed import CONFIG_DIR
from diversed.config.runtime import keep_freed_memory, quiet
from diversed.decoding.autoregressive import autoregressive_generate
from diversed.decoding.draft_vocab import support, vocab_size
from diversed.decoding.forward import forward_path
from diversed.decoding.inputs import check_decoding, token_ids
from diversed.decoding.llama_cpp import LLAMA_CPP_MISSING, LlamaCpp
from diversed.decoding.meter import ForwardMeter, ForwardTimes, clock
from diversed.decoding.reference import transformers_generate
from diversed.decoding.stats import Totals, theoretical_speedup, tokens_per_call_bound
from diversed.decoding.verify import DynamicEnsemble, Verifier, sampler_name
from diversed.errors import ConfigError, cli
from diversed.files.atomic import write_file
from diversed.files.provenance import machine
from diversed.models.gguf import check_member, gguf_source
from diversed.models.heads import WeightHead
from diversed.models.packed import CPU_KERNELS, check_kernels, kernels
from diversed.models.pair import (
    RANDOM_PAIRS,
    Pair,
    hidden_size,
    load_pair,
    native_dtype,
    numerics,
    random_pair,
)
from diversed.models.quantize import check_quantize, quantized, scheme
from diversed.models.toy import ToyBuildConfig, load_toy_pair
from diversed.sweep.intervals import bootstrap_interval, pooled_ratio_quotient
from diversed.sweep.methods import HEAD, METHODS, WEIGHT, Files, knobs, method
from diversed.sweep.plugins import load_plugins, parse_args
from diversed.sweep.point import decode_task, load_heads, sampling_kwargs
from diversed.sweep.resources import Resources, check_resources, load_resources
from diversed.tasks import TASKS, load_task, read_task

# ----------------------------------------------------------------------------- settings

ENGINE_METHODS = ("lossless", "static", "dynamic")  # the registered methods timed on our engine by default
UNTRAINED = "untrained"  # the dynamic verifier's head without --head: untrained, w = 0.5


@dataclass(frozen=True)
class Setting:
    engine: str  # "diversed", "transformers", "autoregressive" or "llama.cpp"
    verifier: str | None  # "lossless", "static", "dynamic", or None (the target alone)
    batch_size: int
    temperature: float  # 0 = greedy
    weight: float | None = None  # static target weight w
    num_draft_tokens: int | None = None
    implementation: str | None = None  # autoregressive: "generate" (transformers) or "loop" (ours)
    bonus_token: str | None = None  # diversed: "ensemble" or "target"
    first_token: str = "ensemble"  # diversed: verified against v (as transformers) or "target" (p alone)
    # the registered method that decodes it (`sweep.methods`, plugins included); None: the bench's own
    # reference (transformers' lossless assisted generation, sampling from v, llama.cpp)
    method: str | None = None

    @property
    def sampler(self) -> str:
        """Which scheme drew the tokens (`verify.sampler_name`): transformers' for its assisted
        generation and `generate`, llama.cpp's, or ours (the engine, our loop, sampling from v)."""
        other = self.engine if self.engine in ("llama.cpp", "transformers") else None
        return sampler_name(
            self.temperature, other or ("transformers" if self.implementation == "generate" else None)
        )

    @property
    def label(self) -> str:
        mode = "greedy" if self.temperature == 0 else f"T={self.temperature:g}"
        if self.engine == "llama.cpp":
            what = "target (GGUF)"
        elif self.engine == "autoregressive":
            what = (
                f"target ({self.implementation})"
                if self.verifier is None
                else f"from v ({self.verifier}, loop)"
            )
        else:
            what = self.verifier + (f" w={self.weight:g}" if self.verifier == "static" else "")
            if self.engine == "diversed" and self.verifier != "lossless" and self.bonus_token == "target":
                what += " target-bonus"
            if self.engine == "diversed" and self.first_token == "target":
                what += " target-first"
        name = {
            "llama.cpp": "llama.cpp",
            "diversed": "diversed",
            "transformers": "transformers assisted",
            "autoregressive": "autoregressive",
        }
        return f"{name[self.engine]} {what}, {mode}, batch {self.batch_size}"


def settings(
    n: int,
    batch_sizes: Sequence[int],
    temperature: float,
    weight: float,
    bonus: str,
    first: str = "ensemble",
    llama_cpp: bool = False,
    temperatures: Sequence[float] = (),
    methods: Sequence[str] = ENGINE_METHODS,
) -> list[Setting]:
    """Every setting the benchmark times (transformers' assisted generation and llama.cpp at batch 1
    only), at each of `temperatures` (0: greedy; default: greedy and `temperature`); on our engine,
    each of `methods` (registered methods that run on it, `sweep.methods`)."""
    out: list[Setting] = []
    for t in temperatures or (0.0, temperature):
        if llama_cpp and 1 in batch_sizes:
            out.append(Setting("llama.cpp", None, 1, t, implementation="gguf"))
        for b in batch_sizes:
            out.append(Setting("autoregressive", None, b, t, implementation="generate", method="hf_generate"))
            out.append(Setting("autoregressive", None, b, t, implementation="loop", method="autoregressive"))
        if 1 in batch_sizes:
            out.append(Setting("transformers", "lossless", 1, t, 1.0, n))
            out.append(Setting("transformers", "static", 1, t, weight, n, method="hf_static"))
            if (bonus, first) != ("target", "ensemble"):  # transformers' algorithm: the bonus from p
                out.append(
                    Setting("diversed", "static", 1, t, weight, n, bonus_token="target", method="static")
                )
            if bonus == "ensemble" and "dynamic" in methods:
                # DIVERSED with the released code's bonus token (from p; `paper_sampling/released` sets
                # it, with that code's top-k too): no draft call for q after a fully accepted round
                released = {"bonus_token": "target", "first_token": first, "method": "dynamic"}
                out.append(Setting("diversed", "dynamic", 1, t, None, n, **released))
        for b in batch_sizes:
            for name in methods:
                w = {"lossless": 1.0, "static": weight}.get(name)
                out.append(
                    Setting("diversed", name, b, t, w, n, bonus_token=bonus, first_token=first, method=name)
                )
    for t in [t for t in temperatures if t > 0] or (temperature,):
        for b in batch_sizes:  # training rollouts: sampling from v with the dynamic verifier
            out.append(Setting("autoregressive", "dynamic", b, t, implementation="loop"))
    return out


# ----------------------------------------------------------------------------- measurement


@dataclass
class Run:
    """One timed pass of a setting over all prompts."""

    seconds: float = 0.0
    totals: Totals = field(default_factory=Totals)  # new tokens, rounds, proposed and accepted drafts, w
    # every forward of each model, counted and timed, its prompt passes (the first in each decode call) apart
    forwards: ForwardTimes = field(default_factory=ForwardTimes)
    # per decode call (one batch of prompts), in order: new tokens, seconds, seconds in prompt passes;
    # the units the speedups' intervals resample (the same calls in every setting of a batch size)
    units: list[tuple[int, float, float]] = field(default_factory=list)


# ----------------------------------------------------------------------------- running


@dataclass
class BenchConfig:
    # "toy", "toy-tiny", a RANDOM_PAIRS name or a pair config's; ignored when target and draft are given
    pair: str = "toy"
    target: str | None = None  # local directories (or cached Hub ids) of another pair
    draft: str | None = None  # alone: `pair`'s config with this draft (a directory, a .gguf, draft:<name>)
    num_draft_tokens: int = 5
    batch_sizes: tuple[int, ...] = (1, 8)
    temperature: float = 1.0  # of the sampled settings (the others are greedy)
    # the temperatures timed instead of greedy and `temperature` (0: greedy)
    temperatures: tuple[float, ...] = ()
    weight: float = 0.5  # static target weight w (transformers needs 0 < w < 1)
    head: str | None = None  # saved WeightHead for the dynamic verifier (default: untrained, w = 0.5)
    num_prompts: int = 32
    max_new_tokens: int = 32
    ignore_eos: bool = False  # generate exactly max_new_tokens per row (steady-state decoding)
    repeats: int = 5
    warmup: int = 1
    threads: int = 0  # torch threads; 0 leaves torch's default (one per core)
    malloc: str = "keep"  # config/runtime.keep_freed_memory: "keep" (freed memory reused) or "system"
    seed: int = 0
    bonus_token: str = "ensemble"
    first_token: str = "ensemble"  # "target": the engine's first new token from the target alone
    # sampled settings: p and q truncated alike in every decoder, ours and transformers' (0: none)
    top_k: int = 0
    top_p: float = 1.0  # (1.0: none)
    only: tuple[str, ...] = ()  # run only settings whose label contains one of these
    device: str = "cpu"  # where --pair / --target / --draft are loaded ("cuda" on a GPU)
    dtype: str = "float32"  # their dtype ("bfloat16" on a GPU)
    # "int8": the draft's linear layers and head int8 at decoding steps (CPU; models/quantize.py); None: the
    # pair config's own setting (none for --target/--draft, toy and random pairs)
    draft_quantize: str | None = None
    # "int8": the target's too, each row on its own range (another target: the loop and every method run
    # it); None: the pair config's own setting (none for --target/--draft, toy and random pairs)
    target_quantize: str | None = None
    # linear layers of float32 models on CPU: "auto" (oneDNN packed, models/packed.py) or "blas"; None:
    # the pair config's own (auto for --target/--draft and random pairs; the toy pair is never packed)
    cpu_kernels: str | None = None
    llama_cpp: str | None = None  # a GGUF file (or "auto": the target's own) decoded by llama.cpp alongside
    task: str | None = None  # prompts from this task (its prompt format) instead of the toy prompts
    data_files: tuple[str, ...] = ()  # the task's local rows: a path, or split=path pairs
    num_few_shot: int = 0  # few-shot examples in each task prompt (needs the train split)
    # registered methods timed on our engine (`sweep.methods`; a plugin's once `plugins` loads it)
    methods: tuple[str, ...] = ENGINE_METHODS
    knobs: tuple[str, ...] = ()  # field=value: a method's knob other than w (--weight) and the head (--head)
    plugins: tuple[str, ...] = ()  # modules that register methods of one's own, imported first


def check_config(config: BenchConfig) -> Resources:
    """Bad settings fail here (a ConfigError naming the flag), before anything is loaded; the checked
    path knobs of `--methods` (`check_methods`)."""
    resources = check_methods(config)
    at_least = {
        "-N/--num-draft-tokens": (config.num_draft_tokens, 1),
        "--batch-sizes": (min(config.batch_sizes, default=0), 1),
        "--num-prompts": (config.num_prompts, 1),
        "--repeats": (config.repeats, 1),
        "--warmup": (config.warmup, 0),
        "--threads": (config.threads, 0),
        "--num-few-shot": (config.num_few_shot, 0),
    }
    for flag, (value, low) in at_least.items():
        if value < low:
            raise ConfigError(f"{flag} must be at least {low} (each of them), got {value}")
    if not 0 < config.weight < 1:
        raise ConfigError(
            f"--weight is the static target weight w, in (0, 1) (transformers' too), got {config.weight}"
        )
    if any(t < 0 for t in config.temperatures):
        raise ConfigError(f"--temperatures must be 0 (greedy) or positive, got {list(config.temperatures)}")
    if config.llama_cpp:  # before any weights load: the package, and a named file
        import importlib.util

        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(LLAMA_CPP_MISSING)
        if config.llama_cpp != "auto" and not Path(config.llama_cpp).expanduser().is_file():
            raise ConfigError(
                f"--llama-cpp {config.llama_cpp!r}: no such GGUF file (or 'auto': the target's own)"
            )
    if config.cpu_kernels is not None:
        check_kernels(config.cpu_kernels, "--cpu-kernels ")
    try:
        for t in config.temperatures or (0.0, config.temperature):
            check_decoding(config.max_new_tokens, t, config.top_k, config.top_p)
    except ValueError as e:  # "top_k must be ..." -> "--top-k must be ..."
        name, rest = str(e).split(" ", 1)
        raise ConfigError(f"--{name.replace('_', '-')} {rest}") from None
    if config.dtype != "native" and not isinstance(getattr(torch, config.dtype, None), torch.dtype):
        raise ConfigError(
            f"--dtype must be native or a torch dtype name such as float32 or bfloat16, got {config.dtype!r}"
        )
    for flag, how in (
        ("--draft-quantize ", config.draft_quantize),
        ("--target-quantize ", config.target_quantize),
    ):
        if how not in (None, "none"):
            check_quantize(how, torch.device(config.device), bench_dtype(config), flag)
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {config.device} asked for, but torch sees no GPU here; use --device cpu")
    if config.target and not config.draft:
        raise ConfigError("--target needs --draft (or give neither: then --pair is used)")
    pairs = ("toy", "toy-tiny", *RANDOM_PAIRS, *configured_pairs())
    if not config.target and config.pair not in pairs:
        raise ConfigError(
            f"--pair must be one of {list(pairs)} (or give --target and --draft), got {config.pair!r}"
        )
    if config.draft and not config.target:  # --pair's config with another draft: a configured pair only
        if config.pair not in configured_pairs():
            raise ConfigError(
                f"--draft without --target replaces the draft of a configured pair "
                f"{list(configured_pairs())}, not of --pair {config.pair}; give --target too"
            )
        check_member(config.draft, "draft")  # fetched or built? (else the command to run)
    return resources


def check_methods(config: BenchConfig) -> Resources:
    """The plugins loaded, then each of `--methods` registered and run on our engine, each knob of
    theirs given a value (`--knob`) that it takes, and the values of their path knobs (the head's
    `--head` too) checked by each knob's `Files.check` (`sweep.resources.check_resources`, no pair card
    yet): else a ConfigError naming the fix. A knob whose path replaces the pair's draft (a fine-tuned
    draft) is refused: the bench meters and plans the pair's own draft. Returns the checked paths."""
    load_plugins(config.plugins, where="plugins")
    values = knob_values(config)
    for name in config.methods:
        m = method(name)  # (unknown: the registered names, and how to load a plugin)
        if m.decoder != "engine":
            raise ConfigError(
                f"--methods {name}: it decodes on {m.decoder}, and --methods times methods on our engine "
                "(the target alone and transformers' decoders are timed anyway)"
            )
        for knob in m.knobs:
            if knob is WEIGHT or knob is HEAD:
                continue  # --weight, --head
            if knob.path and knob.files.replaces_draft:  # type: ignore[union-attr]
                raise ConfigError(
                    f"--methods {name}: its knob {knob.symbol} replaces the pair's draft, and the bench "
                    "times the pair's own draft (its forwards metered, its forward path planned): give that "
                    "draft as --draft (with --target), and time it with --methods lossless"
                )
            if knob.field not in values:
                raise ConfigError(
                    f"--methods {name}: give its knob {knob.symbol} as --knob {knob.field}=VALUE"
                )
            if why := knob.problem(values[knob.field]):
                raise ConfigError(f"--knob {knob.field}={values[knob.field]!r} {why}")
    try:
        resources = check_resources(None, resource_sweep(config, values))
        if config.head and HEAD.field not in resources.found:  # the rollout's head (sampling from v) alone
            Files.function(HEAD.files.check)(None, [str(config.head)], {}, HEAD)  # type: ignore[union-attr]
    except ConfigError as e:  # the checks name sweep.<key>: here the values are flags
        flags = {f"sweep.{k.sweep} entry ": f"--knob {k.field}=" for k in knobs().values() if k.path}
        message = (
            str(e).replace(f"sweep.{HEAD.sweep} entry ", "--head ").replace("sweep.methods", "--methods")
        )
        for key, flag in flags.items():
            message = message.replace(key, flag)
        raise ConfigError(message) from None
    return resources


def resource_sweep(config: BenchConfig, values: dict[str, Any]) -> dict[str, Any]:
    """The sweep mapping `check_resources` reads for the bench: the methods of `--methods` that take a
    path (the head's only where `--head` names one: without it `dynamic` decodes with the untrained
    head), and each path knob's one value (`--head`, `--knob`) under its `sweep.<key>`."""
    given = {**values, HEAD.field: config.head}
    taking = [
        name
        for name in config.methods
        if any(k.path and given.get(k.field) is not None for k in METHODS[name].knobs)
    ]
    paths = {
        k.sweep: [str(given[k.field])]
        for name in taking
        for k in METHODS[name].knobs
        if k.path and given.get(k.field) is not None
    }
    return {"methods": taking, **paths}


def knob_values(config: BenchConfig) -> dict[str, Any]:
    """`--knob field=value` as {field: value}, each value read as its knob's type; w and the head are
    --weight and --head."""
    found: dict[str, Any] = {}
    for given in config.knobs:
        field, sep, value = given.partition("=")
        known = knobs().get(field)
        if not sep or known is None:
            raise ConfigError(
                f"--knob {given!r}: give field=value for a registered knob ({', '.join(knobs())})"
            )
        if known is WEIGHT or known is HEAD:
            raise ConfigError(f"--knob {given!r}: use --weight / --head for {known.symbol}")
        try:
            found[field] = known.type(value)
        except ValueError:
            raise ConfigError(f"--knob {given!r}: {known.symbol} must be {known.allowed}") from None
    return found


def bench_dtype(config: BenchConfig) -> torch.dtype:
    """`--dtype` as a torch dtype: "native" is bf16 on accelerators and on CPUs with bf16
    instructions, float32 on other CPUs (`pair.native_dtype`, what `dtype: native` pairs choose)."""
    if config.dtype == "native":
        return native_dtype(torch.device(config.device))
    return getattr(torch, config.dtype)


def load_bench_pair(config: BenchConfig) -> Pair:
    """The configured pair through `diversed.models.pair` (or the toy pair), in `config.dtype` on
    `config.device`."""
    quantize = {
        "draft_quantize": config.draft_quantize or "none",
        "target_quantize": config.target_quantize or "none",
    }
    kernels = {"cpu_kernels": config.cpu_kernels or "auto"}
    dtype = str(bench_dtype(config)).removeprefix("torch.")  # ("native" chosen here, as the log says)
    if config.target:
        return load_pair(
            config.target, config.draft, dtype=dtype, device=config.device, **quantize, **kernels
        )
    if config.pair in RANDOM_PAIRS:
        return random_pair(
            config.pair, dtype=dtype, device=config.device, seed=config.seed, **quantize, **kernels
        )
    if config.pair in configured_pairs():  # configs/pair/<name>.yaml, e.g. smollm2 (real weights)
        import hydra
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(Path(CONFIG_DIR) / "pair" / f"{config.pair}.yaml")
        cfg.dtype, cfg.device = dtype, config.device
        if config.draft:  # the configured pair with another draft (e.g. draft:<name>, its head restricted)
            cfg.draft = config.draft
        for option in ("draft_quantize", "target_quantize", "cpu_kernels"):  # given: over the config's own
            if getattr(config, option) is not None:
                cfg[option] = getattr(config, option)
        for role in ("target", "draft"):  # fetched and built? (else the command to run, before any loading)
            check_member(cfg[role], role)
        return hydra.utils.instantiate(cfg)

    build = ToyBuildConfig.tiny() if config.pair == "toy-tiny" else None
    return load_toy_pair(config=build, dtype=dtype, device=config.device, **quantize)


def configured_pairs() -> tuple[str, ...]:
    """Pair configs the bench loads by name (`configs/pair/*.yaml` loaded by `load_pair` with both
    members set: smollm2, gemma3_270m, the paper's pairs), besides the toy and random pairs."""
    names = []
    for f in sorted((Path(CONFIG_DIR) / "pair").glob("*.yaml")):
        text = f.read_text()
        if "diversed.models.pair.load_pair" in text and "???" not in text:
            names.append(f.stem)
    return tuple(names)


def load_prompt_task(config: BenchConfig):
    """The task whose first `num_prompts` examples give the prompts (the toy task by default);
    loaded before the pair, so a bad name or missing file fails before any model is read."""
    if config.task is None:
        return load_task("toy", n_examples=config.num_prompts, seed=config.seed)
    if config.task not in TASKS:
        raise ConfigError(f"--task must be one of {sorted(TASKS)}, got {config.task!r}")
    files: Any = list(config.data_files) or None
    if files and all("=" in f for f in files):  # split=path pairs, e.g. test=... train=...
        files = dict(f.split("=", 1) for f in files)
    elif files and any("=" in f for f in files):
        raise ConfigError("--data-files takes paths, or split=path pairs, not a mix of both")
    return read_task(  # the bench only encodes its prompts (no code-execution opt-in asked)
        config.task,
        data_files=files,
        n_examples=config.num_prompts,
        seed=config.seed,
        num_few_shot=config.num_few_shot,
    )


class Bench:
    """The pair, the prompts cut into chunks, and each setting's grid point and verifier; `run` times
    one setting on one chunk.

    A chunk holds max(batch sizes) prompts, batched at every batch size, so that the settings can
    take turns chunk by chunk: a busy second on the machine then slows every setting alike. Every
    setting decodes through `sweep.point.decode_task` (the loop every entry point decodes with): a
    registered method by its `decode`, the bench's own references by `reference`; what is the bench's
    own is the timing of each call (`timed`, its forwards by `decoding.meter.ForwardMeter`): a call is
    a batch's padding, its copy to the device and its decoder call (as `time_point` times them; the
    padding is microseconds, within a run's noise). The values of `--methods`' path knobs
    (`resources`, checked by `check_methods`) are loaded by their knobs' `Files.load`
    (`sweep.resources.load_resources`) and given to the verifiers with the bench's head (`--head`, or
    the untrained one).
    """

    def __init__(
        self,
        config: BenchConfig,
        target,
        draft,
        prompts,
        eos: list[int],
        pad: int,
        todo: list[Setting],
        resources: Resources | None = None,
    ) -> None:
        self.config, self.target, self.draft, self.eos, self.pad = config, target, draft, eos, pad
        size = max(config.batch_sizes)
        self.device = next(target.parameters()).device  # batches, generators and clocks follow the pair
        # what `decode_task` reads of a pair: the models, where they are, and the bench's EOS and pad
        tokens = SimpleNamespace(eos_token_id=eos, pad_token_id=pad)
        self.pair = SimpleNamespace(target=target, draft=draft, tokenizer=tokens, device=self.device)
        self.prompts = prompts
        self.chunks = [list(prompts[i : i + size]) for i in range(0, len(prompts), size)]
        resources = check_methods(config) if resources is None else resources
        # each path knob's value loaded as its knob says (`Files.load`), the fine-tuned drafts apart
        loaded, self.drafts = load_resources(resources, self.pair)
        key = config.head or UNTRAINED
        if config.head and key not in loaded:  # --head for the rollout alone: loaded as a sweep loads it
            loaded |= load_heads([config.head], self.pair)
        if key not in loaded:  # the untrained head
            loaded[key] = WeightHead(hidden_size(draft), hidden_size(target)).eval().requires_grad_(False)
        self.loaded, self.resources = loaded, resources
        self.points = {s: self.point(s) for s in todo}
        self.verifiers: dict[Setting, Verifier | None] = {
            s: (
                method(s.method).verifier(self.points[s], self.loaded)
                if s.method and method(s.method).verifier
                else None
            )
            for s in todo
        }
        self.rollout = DynamicEnsemble(self.loaded[key])  # sampling from v
        self.meter = ForwardMeter({"target": target, "draft": draft})
        self.llama_cpp = None
        if config.llama_cpp:
            longest = max(len(p) for p in prompts)
            self.llama_cpp = LlamaCpp(
                llama_cpp_gguf(config.llama_cpp, target),
                torch.get_num_threads(),
                longest + config.max_new_tokens + 8,
            )
        # Each model's forward path is planned now, with the meter's hooks on (they are part of the
        # plan's key): choosing the direct path runs two check forwards, which the meter would
        # otherwise count inside the first decode call, the first of them as its prompt pass.
        for model in (target, draft):
            forward_path(model)

    def point(self, s: Setting) -> dict[str, Any]:
        """The grid point a registered method decodes `s` at: its temperature and N, and each of its
        knobs' values (w: `--weight`, the head: `--head`, any other: `--knob`)."""
        values = {
            WEIGHT.field: self.config.weight,
            HEAD.field: self.config.head or UNTRAINED,
            **knob_values(self.config),
        }
        fields = method(s.method).fields if s.method else ()
        point = {"method": s.method, "temperature": s.temperature, **{f: values[f] for f in fields}}
        return point | ({"num_draft_tokens": s.num_draft_tokens} if s.num_draft_tokens else {})

    def decoded_with(self, s: Setting) -> dict[str, Any]:
        """What a setting's record says it decoded with beyond its `Setting` fields: its grid point
        (`point`: method, temperature, N and each knob's value, the head's path among them) and the
        digests of the point's files under the keys a sweep's settings give them (`files`:
        `Resources.settings`), so that a bench record can be matched with a sweep's point (the same
        head, not one of the same name). None and {} for the bench's own references."""
        if not s.method:
            return {"point": None, "files": {}}
        point = self.points[s]
        return {"point": point, "files": self.resources.settings(point)}

    def run(self, s: Setting, chunk: int, seed: int, run: Run) -> None:
        """Generate from the prompts of `chunk` in batches of `s.batch_size`, adding to `run`."""
        gen = torch.Generator(self.device).manual_seed(seed)
        torch.manual_seed(seed)  # transformers samples from the global generator
        c = self.config  # every decoder samples alike: temperature, then top-k and top-p of p and q
        engine = {"top_k": c.top_k, "top_p": c.top_p}
        if s.engine == "diversed":
            engine.update(bonus_token=s.bonus_token, first_token=s.first_token)
        self.meter.times = run.forwards
        try:
            decode_task(
                self.pair,
                self.points[s],
                self.verifiers[s],
                prompts=self.chunks[chunk],
                batch_size=s.batch_size,
                generator=gen,
                max_new=c.max_new_tokens,
                score=False,
                engine=engine,
                drafts=self.drafts,
                totals=run.totals,  # every batch's statistics, summed over the chunks
                call=functools.partial(self.timed, run),
                decoder=None if s.method else functools.partial(self.reference, s, run),
            )
        finally:
            self.meter.times = None
            clock(self.device)
            self.meter.flush(run.forwards)

    def timed(self, run: Run, call: Callable[[], Any]) -> Any:
        """One decode call, timed (wall clock after the device's work, forwards by the meter) into `run`."""
        self.meter.start_decode()  # each model's next forward reads this batch's prompts
        before = sum(run.forwards.prefill_s.values())
        t0 = clock(self.device)
        out = call()
        seconds = clock(self.device) - t0
        self.meter.flush(run.forwards)  # (GPU: the forward times of this call, read after the sync)
        run.seconds += seconds
        prompt_s = sum(run.forwards.prefill_s.values()) - before
        run.units.append((int(out.stats.new_tokens.sum()), seconds, prompt_s))
        return out

    def reference(
        self, s: Setting, run: Run, ids: Tensor, mask: Tensor, *, generator, max_new: int, stop, **_: Any
    ):
        """The bench's own references, one batch: llama.cpp, transformers' lossless assisted generation
        (no registered method), or sampling from v with the dynamic verifier on our loop (a rollout);
        sampling as every decoder does (`sweep.point.sampling_kwargs`)."""
        c = self.config
        common = sampling_kwargs(
            self.pair.tokenizer, s.temperature, max_new, stop=stop, top_k=c.top_k, top_p=c.top_p
        )
        if s.engine == "llama.cpp":
            return self.llama_cpp.generate(
                ids, mask, s.temperature, max_new, self.eos, generator, run.forwards
            )
        if s.engine == "transformers":
            return transformers_generate(
                self.target, ids, mask, draft=self.draft, num_draft_tokens=s.num_draft_tokens, **common
            )
        return autoregressive_generate(
            self.target, ids, mask, draft=self.draft, verifier=self.rollout, generator=generator, **common
        )


def llama_cpp_gguf(option: str, target: nn.Module) -> str:
    """The GGUF file `--llama-cpp` names: a path, or "auto": the file the target was converted from
    (its directory's source.json, `models.gguf`)."""
    if option != "auto":
        if not Path(option).expanduser().is_file():
            raise ConfigError(f"--llama-cpp {option!r}: no such GGUF file")
        return str(Path(option).expanduser())
    source = gguf_source(getattr(target.config, "name_or_path", "") or "")
    if source is None or not Path(source["gguf"]).is_file():
        raise ConfigError(
            "--llama-cpp auto decodes the GGUF file the target was converted from, and this target was "
            "not converted from one (or the file is gone): give the GGUF file's path"
        )
    return source["gguf"]


def summarize(s: Setting, runs: list[Run]) -> dict[str, Any]:
    """One record: median tokens/s over the repeats, the other numbers pooled over them. Forward
    times are means per decoding step (`*_forward_ms`, prompt passes excluded) and per prompt pass
    (`*_prefill_ms`); c, the theory and the ratios between settings are `compare`'s."""
    seconds = sum(r.seconds for r in runs)
    pooled, f = Totals(), ForwardTimes()
    for r in runs:
        pooled.merge(r.totals)
        f.merge(r.forwards)
    fwd, pre_s, pre_calls = f.seconds, f.prefill_s, f.prefill_calls
    # the bounds' α: accepted / verified (Leviathan's), unknown where a decoder does not say (transformers):
    # no bound
    alpha, speculative = pooled.alpha, s.engine in ("diversed", "transformers") and pooled.alpha is not None
    tokens, rounds = pooled.new_tokens, pooled.rounds
    return {
        # engine, verifier, batch size, temperature, weight, N, implementation, bonus token, method
        **asdict(s),
        "sampler": s.sampler,  # which draws the seed gave (the law does not depend on it)
        "tokens_per_s": statistics.median(r.totals.new_tokens / r.seconds for r in runs),
        "tokens_per_s_runs": [r.totals.new_tokens / r.seconds for r in runs],
        "acceptance_rate": pooled.acceptance_rate if s.engine != "autoregressive" else None,
        "alpha": alpha,
        "tokens_per_target_call": tokens / rounds if rounds else None,
        "tokens_per_target_call_bound": tokens_per_call_bound(alpha, s.num_draft_tokens)
        if speculative
        else None,
        "draft_target_time_ratio": None,  # c and the theory need the autoregressive record: `compare`
        "theoretical_speedup": None,
        "mean_w": pooled.w_sum / pooled.w_count if pooled.w_count else None,
        "new_tokens": tokens / len(runs),
        "target_calls": f.calls["target"] / len(runs),
        "draft_calls": f.calls["draft"] / len(runs),
        "target_forward_ms": f.step_ms("target"),  # mean decoding step (prompt passes excluded)
        "draft_forward_ms": f.step_ms("draft"),
        "target_prefill_ms": f.prefill_ms("target"),  # mean prompt pass
        "draft_prefill_ms": f.prefill_ms("draft"),
        "target_prefill_calls": pre_calls["target"] / len(runs),
        "draft_prefill_calls": pre_calls["draft"] / len(runs),
        # the rest of the wall time is the engine's own work (sampling, verification, bookkeeping)
        "forward_time_share": (fwd["target"] + fwd["draft"]) / seconds,  # every forward, prompt passes too
        "prefill_time_share": (pre_s["target"] + pre_s["draft"]) / seconds,
        # new tokens over the wall time less every prompt pass: what the theory (decoding steps) prices
        "decode_tokens_per_s": tokens / max(seconds - pre_s["target"] - pre_s["draft"], 1e-9),
        "seconds": seconds / len(runs),
        "repeats": len(runs),
        "label": s.label,
        "units": [u for r in runs for u in r.units],  # (new tokens, seconds, prompt-pass seconds) per call
    }


def speedup_interval(
    units: Sequence[Sequence[float]], baseline: Sequence[Sequence[float]], decode: bool = False
) -> tuple[float, float, float]:
    """(ratio, low, high): the tokens per second of one setting over another's, pooled over their
    decode calls (`Run.units`: the same batches of the same prompts, call by call, in every setting
    of a batch size), and its 95 % interval: a paired BCa bootstrap resampling calls
    (`sweep.intervals.bootstrap_interval`), so prompt-to-prompt variation and the machine's noise
    during each call are in it. `decode`: each call's prompt-pass seconds taken out of its time.
    NaNs where the two did not make the same number of calls."""
    a, b = np.asarray(units, dtype=float).reshape(-1, 3), np.asarray(baseline, dtype=float).reshape(-1, 3)
    if len(a) != len(b) or not len(a):
        return math.nan, math.nan, math.nan
    sa, sb = (a[:, 1] - a[:, 2], b[:, 1] - b[:, 2]) if decode else (a[:, 1], b[:, 1])
    return bootstrap_interval(pooled_ratio_quotient, [a[:, 0], sa, b[:, 0], sb])


def compare(records: list[dict[str, Any]]) -> None:
    """Add what needs two settings: c and the theory, the ratios to transformers, over autoregressive
    decoding and over sampling from v.

    c (`draft_target_time_ratio`) is Leviathan et al.'s: the draft's mean decoding step over the
    target's one-token decoding step, both without prompt passes, the latter from the autoregressive
    record with the same forward path, batch size and temperature (our loop for our engine and for
    sampling from v, `generate` for transformers). Without that record (left out by `--only`) c, the
    theory and the speedups are None.
    """

    def find(**kw: Any) -> dict[str, Any] | None:
        return next((r for r in records if all(r[k] == v for k, v in kw.items())), None)

    for r in records:
        same = {"batch_size": r["batch_size"], "temperature": r["temperature"]}
        path = {"diversed": "loop", "transformers": "generate"}.get(r["engine"], r["implementation"])
        own = find(engine="autoregressive", verifier=None, implementation=path, **same)
        step = own["target_forward_ms"] if own else None  # the target's one-token decoding step
        if step and r["draft_forward_ms"]:
            r["draft_target_time_ratio"] = r["draft_forward_ms"] / step
        anchor = find(engine="llama.cpp", **same)
        if anchor and r["engine"] != "llama.cpp":  # ours (and transformers') over llama.cpp's AR
            r["ratio_to_llama_cpp"], r["ratio_to_llama_cpp_low"], r["ratio_to_llama_cpp_high"] = (
                speedup_interval(r["units"], anchor["units"])
            )
        if r["engine"] in ("autoregressive", "llama.cpp"):
            continue
        c, n, bound = r["draft_target_time_ratio"], r["num_draft_tokens"], r["tokens_per_target_call_bound"]
        if bound is not None and c is not None:  # speculative with a known α: bound / (N·c + 1)
            r["theoretical_speedup"] = theoretical_speedup(r["alpha"], n, c)
        if own and r["theoretical_speedup"]:
            # tokens per second over the autoregressive setting's, pooled over every call of every
            # repeat, with a paired bootstrap interval over the calls (`speedup_interval`)
            r["speedup"], r["speedup_low"], r["speedup_high"] = speedup_interval(r["units"], own["units"])
            # prompt passes left out of both: on long prompts (XSum) they are most of the wall time,
            # which the speedup above includes and the theory does not
            r["decode_speedup"], r["decode_speedup_low"], r["decode_speedup_high"] = speedup_interval(
                r["units"], own["units"], decode=True
            )
            r["speedup_fraction_of_theory"] = r["speedup"] / r["theoretical_speedup"]
        if r.get("speedup") and r["target_forward_ms"]:
            # The theory prices a verification forward (N + 1 tokens, right after the draft's calls)
            # like a one-token step. Where it costs more (compute-bound: CPU, large batches), a round
            # costs N·c + v one-token steps, v = our target decoding forward / the loop's, and the
            # bound at that cost is bound / (N·c + v); the fraction of it is what the engine's own
            # overhead leaves.
            v = r["verify_decode_time_ratio"] = r["target_forward_ms"] / step
            r["theoretical_speedup_at_verify_cost"] = theoretical_speedup(r["alpha"], n, c, v)
            r["speedup_fraction_at_verify_cost"] = r["speedup"] / r["theoretical_speedup_at_verify_cost"]
        if r["engine"] != "diversed":
            continue
        generate = find(engine="autoregressive", verifier=None, implementation="generate", **same)
        if generate:
            r["speedup_vs_generate"] = r["tokens_per_s"] / generate["tokens_per_s"]
        hf = find(engine="transformers", verifier=r["verifier"], **same)
        if hf:
            r["ratio_to_transformers"] = r["tokens_per_s"] / hf["tokens_per_s"]
        v_ar = find(engine="autoregressive", verifier=r["verifier"], **same)
        if v_ar and r["theoretical_speedup"]:
            # a token from v costs 1 + c target-forward times, a round N·c + 1
            r["speedup_over_v_sampling"] = r["tokens_per_s"] / v_ar["tokens_per_s"]
            r["theoretical_speedup_over_v_sampling"] = r["theoretical_speedup"] * (
                1.0 + r["draft_target_time_ratio"]
            )
        one = find(
            engine="diversed",
            verifier=r["verifier"],
            batch_size=1,
            temperature=r["temperature"],
            bonus_token=r["bonus_token"],
            first_token=r["first_token"],
        )
        if one and r["batch_size"] != 1:
            r["ratio_to_batch_1"] = r["tokens_per_s"] / one["tokens_per_s"]


def run_bench(
    config: BenchConfig,
    target: nn.Module | None = None,
    draft: nn.Module | None = None,
    prompts: Sequence[Sequence[int]] | None = None,
    *,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Time every setting `repeats` times, interleaved; return one record per setting. Without a pair,
    loads the configured one and the toy test prompts (or `config.task`'s prompts); with a pair,
    `prompts` (lists of token ids) must be given too."""
    threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    malloc = "keep" if keep_freed_memory(config.malloc) else "system"  # (process-wide, not undone)
    try:
        loaded = target is None or draft is None  # the configured pair, not models passed in
        target, draft, prompts, source, resources = bench_inputs(config, target, draft, prompts)
        gc = target.generation_config
        eos = eos_token_id if eos_token_id is not None else gc.eos_token_id
        eos = [] if config.ignore_eos else token_ids(eos)
        pad = pad_token_id if pad_token_id is not None else gc.pad_token_id
        pad = int(pad if pad is not None else (eos[0] if eos else 0))
        todo = settings(
            config.num_draft_tokens,
            config.batch_sizes,
            config.temperature,
            config.weight,
            config.bonus_token,
            config.first_token,
            llama_cpp=bool(config.llama_cpp),
            temperatures=config.temperatures,
            methods=config.methods,
        )
        if config.only:
            todo = [s for s in todo if any(o in s.label for o in config.only)]
        bench = Bench(config, target, draft, prompts, eos, pad, todo, resources)
        shared = described(bench, source, malloc, log, loaded=loaded)
        records = [summarize(s, r) | bench.decoded_with(s) for s, r in time_settings(bench, todo).items()]
        compare(records)
        for r in records:
            r.update(shared)
        return records
    finally:
        torch.set_num_threads(threads)


def bench_inputs(
    config: BenchConfig, target: nn.Module | None, draft: nn.Module | None, prompts: Any
) -> tuple[nn.Module, nn.Module, list[Sequence[int]], str, Resources]:
    """The pair, the first `num_prompts` prompts, where they come from and the checked path knobs of
    `--methods`: as given ("given"; the methods checked, `check_methods`), or the configured pair and
    the toy prompts or `config.task`'s (checked first: `check_config`)."""
    source = "given"
    if target is None or draft is None:
        resources = check_config(config)
        task = load_prompt_task(config) if prompts is None else None
        pair = load_bench_pair(config)
        target, draft = pair.target, pair.draft
        if prompts is None:
            prompts = task.encode(pair.tokenizer, task.examples)
            source = "toy" if config.task is None else f"{config.task} ({config.num_few_shot}-shot)"
    else:
        resources = check_methods(config)
    if prompts is None:
        raise ValueError("pass prompts (lists of token ids) along with the pair")
    return target, draft, list(prompts)[: config.num_prompts], source, resources


def described(
    bench: Bench, source: str, malloc: str, log: Callable[[str], None], *, loaded: bool = True
) -> dict[str, Any]:
    """What every record of this run shares (the machine, the prompts, the pair's dtype, kernels and
    quantization, threads, llama.cpp's build, malloc, the sampling truncation), logged first."""
    config, target, draft, prompts = bench.config, bench.target, bench.draft, bench.prompts
    env = machine()
    log(f"# {env}")
    weight = next(target.parameters())
    how = quantized(draft)  # what the draft is, however it was loaded
    how_target = quantized(target)  # and the target
    on = {"target": kernels(target), "draft": kernels(draft)}  # its CPU kernels, likewise
    chosen = numerics(config.dtype, config.device).get("numerics")  # "native": what it chose here
    said = "" if how == "none" else f", the draft's linear layers and head {how} at decoding steps"
    restricted = support(draft)  # a draft proposing from K ids only (decoding/draft_vocab.py)
    if restricted is not None:
        said += f", the draft's head restricted to {restricted.numel()} of {vocab_size(draft)} ids"
    if how_target != "none":
        said += (
            f", the target's {how_target} at every call, prompt passes included (each row on its own "
            "range; the loop's target too)"
        )
    log(
        f"# pair on {weight.device} in {str(weight.dtype).removeprefix('torch.')} "
        f"({chosen or 'as asked'}){said}; linear "
        f"layers on {on['target']} (target) / {on['draft']} (draft); torch threads: "
        f"{torch.get_num_threads()}"
    )
    stop = "exactly" if config.ignore_eos else "up to EOS, at most"
    mean_len = sum(len(p) for p in prompts) / max(len(prompts), 1)
    log(
        f"# {len(prompts)} {source} prompts of {mean_len:.0f} tokens on average, {stop} "
        f"{config.max_new_tokens} new tokens, N = {config.num_draft_tokens}, top_k = {config.top_k}, "
        f"top_p = {config.top_p:g}, {len(bench.points)} settings x {config.repeats} repeats "
        f"(+{config.warmup} warm-up)"
    )
    return {
        "machine": env,
        "prompts": source,
        # the pair and the prompts, as a sweep's settings name them (`scripts/bench_goals.py --quality`
        # matches a record with a sweep's points by them): the pair config (None for --target/--draft or
        # models passed in), each model's directory, the task (None: the toy prompts or prompts passed in)
        # (with --draft alone: "<pair>, draft <draft>", another pair than the config's)
        "pair": None
        if not loaded or config.target
        else ", draft ".join(filter(None, (config.pair, config.draft))),
        "models": {"target": model_path(target), "draft": model_path(draft)},
        "task": config.task if source != "given" else None,
        "num_few_shot": config.num_few_shot if source != "given" else None,
        "num_prompts": len(prompts),
        "max_new_tokens": config.max_new_tokens,
        "ignore_eos": config.ignore_eos,
        "seed": config.seed,
        "mean_prompt_tokens": mean_len,
        "dtype": str(weight.dtype).removeprefix("torch."),
        # the ids the draft can propose: K of a restricted head (decoding/draft_vocab.py), else None (all)
        "draft_vocab": None if restricted is None else int(restricted.numel()),
        "draft_quantize": how,
        "quantize_scheme": scheme(how),  # what int8 computes (its smoothing)
        "target_quantize": how_target,  # the target every setting of the run decodes, the loop's included
        "target_quantize_scheme": scheme(how_target, anchored=True),
        "cpu_kernels": on,
        "numerics": chosen or config.dtype,
        "threads": torch.get_num_threads(),
        "llama_cpp": None
        if bench.llama_cpp is None
        else {"gguf": bench.llama_cpp.path, "version": bench.llama_cpp.version},
        "malloc": malloc,
        "top_k": config.top_k,
        "top_p": config.top_p,
    }


def model_path(model: nn.Module) -> str | None:
    """The directory (or Hub id) a model was loaded from, as transformers keeps it; None if unknown."""
    return getattr(getattr(model, "config", None), "name_or_path", None) or None


def time_settings(bench: Bench, todo: list[Setting]) -> dict[Setting, list[Run]]:
    """Each setting's timed runs: `warmup` + `repeats` passes, repeat r of every setting before repeat
    r + 1, and within a repeat the settings taking turns chunk by chunk (seeded alike); the warm-up
    passes are left out."""
    config = bench.config
    runs: dict[Setting, list[Run]] = {s: [] for s in todo}
    try:
        for rep in range(config.warmup + config.repeats):
            this = {s: Run() for s in todo}
            for chunk in range(len(bench.chunks)):  # settings take turns, chunk by chunk
                for s in todo:
                    bench.run(s, chunk, config.seed + 1000 * rep + chunk, this[s])
            if rep >= config.warmup:
                for s in todo:
                    runs[s].append(this[s])
    finally:
        bench.meter.close()
    return runs


# ----------------------------------------------------------------------------- report


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


LEGEND = """\
c: the draft's mean decoding step over the target's one-token decoding step in the autoregressive setting
   with the same forward path, batch size and temperature (prompt passes excluded from both; `-`: no
   draft, or that setting did not run); theory: bound / (N·c + 1); frac: speedup / theory
speedup: tokens/s over the autoregressive setting's, wall time with prompt passes, pooled over every call of
   every repeat [95 % paired bootstrap interval over the calls]; dec: the same with every prompt pass left
   out of both times, the decoding the theory prices (long prompts: pre% large)
vs llama.cpp: tokens/s over llama.cpp's autoregressive decoding of the GGUF target at the same temperature
   (--llama-cpp), pooled and with its interval as speedup
v/d: our target's mean decoding forward (N + 1 tokens) over that one-token step; frac@v: speedup over
   the bound at that cost, bound / (N·c + v)
fwd%: share of wall time in forwards, prompt passes included; pre%: in prompt passes (each model's first
   forward per decode call; mean times per pass in --output: target_prefill_ms, draft_prefill_ms)"""


def _ci(r: dict[str, Any], key: str) -> str:
    """ "x [low, high]" of a ratio and its interval (`speedup_interval`), "-" where not measured."""
    x, low, high = r.get(key), r.get(f"{key}_low"), r.get(f"{key}_high")
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if low is None or math.isnan(low) or math.isnan(high):
        return f"{x:.2f}"
    return f"{x:.2f} [{low:.2f}, {high:.2f}]"


def table(records: list[dict[str, Any]]) -> str:
    """The records as a fixed-width text table, then its legend."""
    head = (
        f"{'setting':<56} {'tok/s':>8} {'vs HF':>6} {'vs llama.cpp':>18} {'alpha':>5} {'tok/call':>8} "
        f"{'bound':>5} {'c':>5} {'speedup':>18} {'dec':>18} {'theory':>6} {'frac':>5} {'vs v-AR':>7} "
        f"{'v/d':>5} {'frac@v':>6} {'fwd%':>4} {'pre%':>4}"
    )
    lines = [head, "-" * len(head)]
    for r in records:
        lines.append(
            f"{r['label']:<56} {r['tokens_per_s']:>8.1f} {_f(r.get('ratio_to_transformers')):>6} "
            f"{_ci(r, 'ratio_to_llama_cpp'):>18} "
            f"{_f(r.get('alpha')):>5} {_f(r['tokens_per_target_call']):>8} "
            f"{_f(r['tokens_per_target_call_bound']):>5} {_f(r['draft_target_time_ratio']):>5} "
            f"{_ci(r, 'speedup'):>18} {_ci(r, 'decode_speedup'):>18} "
            f"{_f(r.get('theoretical_speedup')):>6} "
            f"{_f(r.get('speedup_fraction_of_theory')):>5} {_f(r.get('speedup_over_v_sampling')):>7} "
            f"{_f(r.get('verify_decode_time_ratio')):>5} {_f(r.get('speedup_fraction_at_verify_cost')):>6} "
            f"{100 * r['forward_time_share']:>4.0f} {100 * r['prefill_time_share']:>4.0f}"
        )
    return "\n".join([*lines, "", LEGEND])


def parser() -> argparse.ArgumentParser:
    """`python -m diversed.bench`'s options, in groups (`--help` lists them so)."""
    p = argparse.ArgumentParser(prog="python -m diversed.bench", description=__doc__.splitlines()[0])
    d = BenchConfig()
    _pair_options(p.add_argument_group("pair"), d)
    _setting_options(p.add_argument_group("settings timed"), d)
    _prompt_options(p.add_argument_group("prompts"), d)
    _timing_options(p.add_argument_group("timing"), d)
    p.add_argument("--output", default=None, help="write the records to this JSON file")
    return p


def _pair_options(group: Any, d: BenchConfig) -> None:
    """Options of the pair: which, where, in what dtype and kernels (and llama.cpp's GGUF beside it)."""
    add = group.add_argument
    add(
        "--pair",
        default=d.pair,
        choices=("toy", "toy-tiny", *RANDOM_PAIRS, *configured_pairs()),
        help="toy: the pair shipped with the package; toy-tiny: built and cached on first use; "
        "random-llama-8b-1b: random weights with the "
        "shapes of Llama-3.1-8B / 3.2-1B (a GPU: --device cuda --dtype bfloat16); smollm2, gemma3_270m "
        "and the paper's pairs: as configs/pair/<name>.yaml",
    )
    add("--target", default=None, help="another pair: the target's directory (with --draft)")
    add(
        "--draft",
        default=None,
        help="another pair: the draft's directory (with --target); alone, --pair's config with this draft "
        "(a directory, a .gguf file or draft:<name> built by python -m diversed.drafts)",
    )
    add("--head", default=None, help="saved WeightHead directory (default: untrained, w = 0.5)")
    add("--device", default=d.device, help="where to load the pair: cpu, cuda, cuda:1...")
    add(
        "--dtype",
        default=d.dtype,
        help="the pair's dtype: float32, bfloat16, float16, or native (bf16 on GPUs and on CPUs with bf16 "
        "instructions, float32 on other CPUs; the choice is logged and recorded)",
    )
    add(
        "--draft-quantize",
        choices=("none", "int8"),
        default=d.draft_quantize,
        help="int8: the draft's linear layers and head int8 at decoding steps (CPU, float32 or bf16; as "
        "pair.draft_quantize); default: the pair config's own (none for --target/--draft)",
    )
    add(
        "--target-quantize",
        choices=("none", "int8"),
        default=d.target_quantize,
        help="int8: the target's too, each row on its own range (as pair.target_quantize): another target, "
        "which the autoregressive loop and every method run; default: the pair config's own (none)",
    )
    add(
        "--cpu-kernels",
        choices=CPU_KERNELS,
        default=d.cpu_kernels,
        help="auto: a large model's linear layers on oneDNN's packed layout (CPU; float32, or bf16 with bf16 "
        "instructions); blas: torch's "
        "F.linear; default: the pair config's own (auto)",
    )
    add(
        "--llama-cpp",
        default=None,
        metavar="GGUF",
        help="also time llama.cpp decoding this GGUF file autoregressively at batch 1 ('auto': the file "
        "the target was converted from); needs pip install 'diversed[llamacpp]'",
    )


def _setting_options(group: Any, d: BenchConfig) -> None:
    """Options of the settings timed: methods, N, w, batch sizes, temperatures and sampling."""
    add = group.add_argument
    add("-N", "--num-draft-tokens", type=int, default=d.num_draft_tokens)
    add("--batch-sizes", type=int, nargs="+", default=list(d.batch_sizes))
    add("--temperature", type=float, default=d.temperature, help="of the sampled settings")
    add(
        "--temperatures",
        type=float,
        nargs="+",
        default=[],
        help="the temperatures timed, 0 for greedy (instead of greedy and --temperature)",
    )
    add("--weight", type=float, default=d.weight, help="static target weight w, in (0, 1)")
    add("--bonus-token", choices=("ensemble", "target"), default=d.bonus_token)
    add(
        "--first-token",
        choices=("ensemble", "target"),
        default=d.first_token,
        help="our first new token: verified against v like the rest (as transformers) or the target's alone",
    )
    add("--top-k", type=int, default=d.top_k, help="sampled settings: top-k of p and q alike (0: none)")
    add("--top-p", type=float, default=d.top_p, help="sampled settings: top-p of p and q alike (1.0: none)")
    add(
        "--methods",
        nargs="+",
        default=list(d.methods),
        help="registered methods timed on our engine (a plugin's too, its module loaded by plugins=)",
    )
    add(
        "--knob",
        action="append",
        default=[],
        dest="knobs",
        metavar="FIELD=VALUE",
        help="a --methods method's knob value (repeatable); w is --weight and the head --head",
    )
    add(
        "--only",
        nargs="*",
        default=[],
        help="run only settings whose label contains one of these; c, the theory and the speedups need "
        "the autoregressive target setting with the same path, batch size and temperature ('target (loop)' "
        "for ours, 'target (generate)' for transformers'), else they are left out",
    )


def _prompt_options(group: Any, d: BenchConfig) -> None:
    """Options of the prompts and how far each is decoded."""
    add = group.add_argument
    add("--num-prompts", type=int, default=d.num_prompts)
    add("--max-new-tokens", type=int, default=d.max_new_tokens)
    add("--ignore-eos", action="store_true", help="generate exactly --max-new-tokens per row")
    add(
        "--task",
        default=None,
        help="prompts from this task (gsm8k, cnndm, xsum, mbpp, toy) instead of the toy prompts",
    )
    add(
        "--data-files",
        nargs="*",
        default=[],
        help="the task's local rows: a path, or split=path pairs (offline)",
    )
    add("--num-few-shot", type=int, default=d.num_few_shot, help="few-shot examples per task prompt")
    add("--seed", type=int, default=d.seed)


def _timing_options(group: Any, d: BenchConfig) -> None:
    """Options of how the settings are timed: repeats, warm-up, threads, memory."""
    add = group.add_argument
    add("--repeats", type=int, default=d.repeats)
    add("--warmup", type=int, default=d.warmup)
    add("--threads", type=int, default=d.threads, help="torch threads (0: leave the default)")
    add(
        "--malloc",
        choices=("keep", "system"),
        default=d.malloc,
        help="keep: glibc keeps freed memory for the next tensors (runtime.malloc); system: as it is",
    )


def run(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """`python -m diversed.bench`: the records (their table printed)."""
    args = vars(parse_args(parser(), argv))  # plugins=[...] loaded first (`sweep.plugins`)
    output = args.pop("output")
    config = BenchConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in args.items()})
    quiet()  # transformers' weight-loading bars and advice, as in the other entry points
    records = run_bench(config)
    print(table(records))
    if output:
        write_file(output, json.dumps(records, indent=1) + "\n")  # whole, and never through a link
    return records


def main(argv: list[str] | None = None) -> int:
    """The console script: exit status 0, or 2 with a user error's message (`errors.cli`)."""
    return cli(run, argv)


if __name__ == "__main__":
    sys.exit(main())
