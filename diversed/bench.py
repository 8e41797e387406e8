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
- our engine, lossless, static and dynamic, at every batch size (and, at batch 1, static with
  transformers' bonus token, the same algorithm as transformers' static ensemble).

Per setting it reports the median tokens/s over the repeats (new tokens up to and including EOS
over wall time, prompt processing included), our ratio to transformers on the same setting, the
acceptance rate α, tokens per target call against the bound (1 − α^(N+1)) / (1 − α), and the
speedup over autoregressive decoding with the same forward path, at the same batch size and
temperature, against (1 − α^(N+1)) / ((1 − α)(N·c + 1)), c the measured draft/target forward-time
ratio (hooks on the embeddings and the LM head of both models). That theory prices a verification
forward over N + 1 tokens like a one-token forward; the report also gives our mean target forward
time over the autoregressive loop's (`v/d`; prompt reading is in both), the fraction of the bound
at that cost (`frac@v`: what is left is the engine's own overhead) and the share of wall time
spent in model forwards (`fwd%`). `--output FILE.json` writes one record per setting.

The pair is the toy pair, a saved one (`--target/--draft`), or `--pair random-llama-8b-1b`:
random weights with the shapes of Llama-3.1-8B / 3.2-1B, for timing real sizes on a GPU without
downloads. Prompts are the toy test prompts ("Q: 37+48=") unless `--task gsm8k` (cnndm, xsum,
mbpp) takes the first `--num-prompts` of that task in its own prompt format (`--data-files`
offline, `--num-few-shot`): realistic prompt lengths for a real pair. Every setting decodes to EOS
or `--max-new-tokens` alike; the bench does not stop at a task's stop sequences.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from diversed.engine import _as_id_list, left_pad, shared_vocab_size, speculative_generate
from diversed.forward import SlotModel
from diversed.heads import WeightHead
from diversed.verify import (
    DynamicEnsemble,
    Lossless,
    StaticEnsemble,
    Verifier,
    hidden_size,
    mix,
    probs_from_logits,
    sample,
)

# ----------------------------------------------------------------------------- the bounds


def tokens_per_call_bound(alpha: float, n: int) -> float:
    """Expected tokens per target call, n drafts each accepted with probability α: (1 − α^(n+1)) / (1 − α)."""
    if alpha >= 1.0:
        return float(n + 1)
    return (1.0 - alpha ** (n + 1)) / (1.0 - alpha)


def theoretical_speedup(alpha: float, n: int, c: float) -> float:
    """Speedup over autoregressive decoding: (1 − α^(n+1)) / ((1 − α)(n·c + 1)), c = draft/target time."""
    return tokens_per_call_bound(alpha, n) / (n * c + 1.0)


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Setting:
    engine: str  # "diversed", "transformers" or "autoregressive"
    verifier: str | None  # "lossless", "static", "dynamic", or None (the target alone)
    batch_size: int
    temperature: float  # 0 = greedy
    weight: float | None = None  # static target weight w
    num_draft_tokens: int | None = None
    implementation: str | None = None  # autoregressive: "generate" (transformers) or "loop" (ours)
    bonus_token: str | None = None  # diversed: "ensemble" or "target"

    @property
    def label(self) -> str:
        mode = "greedy" if self.temperature == 0 else f"T={self.temperature:g}"
        if self.engine == "autoregressive":
            what = (
                f"target ({self.implementation})"
                if self.verifier is None
                else f"from v ({self.verifier}, loop)"
            )
        else:
            what = self.verifier + (f" w={self.weight:g}" if self.verifier == "static" else "")
            if self.engine == "diversed" and self.verifier != "lossless" and self.bonus_token == "target":
                what += " target-bonus"
        name = {
            "diversed": "diversed",
            "transformers": "transformers assisted",
            "autoregressive": "autoregressive",
        }
        return f"{name[self.engine]} {what}, {mode}, batch {self.batch_size}"


def settings(
    n: int, batch_sizes: Sequence[int], temperature: float, weight: float, bonus: str
) -> list[Setting]:
    """Every setting the benchmark times (transformers' assisted generation is batch-1 only)."""
    out: list[Setting] = []
    for t in (0.0, temperature):
        for b in batch_sizes:
            out.append(Setting("autoregressive", None, b, t, implementation="generate"))
            out.append(Setting("autoregressive", None, b, t, implementation="loop"))
        if 1 in batch_sizes:
            out.append(Setting("transformers", "lossless", 1, t, 1.0, n))
            out.append(Setting("transformers", "static", 1, t, weight, n))
            if bonus != "target":  # transformers' own algorithm: the bonus token drawn from p
                out.append(Setting("diversed", "static", 1, t, weight, n, bonus_token="target"))
        for b in batch_sizes:
            out.append(Setting("diversed", "lossless", b, t, 1.0, n, bonus_token=bonus))
            out.append(Setting("diversed", "static", b, t, weight, n, bonus_token=bonus))
            out.append(Setting("diversed", "dynamic", b, t, None, n, bonus_token=bonus))
    for b in batch_sizes:  # training rollouts: sampling from v with the dynamic verifier
        out.append(Setting("autoregressive", "dynamic", b, temperature, implementation="loop"))
    return out


# ----------------------------------------------------------------------------- measurement


@dataclass
class Run:
    """One timed pass of a setting over all prompts."""

    seconds: float = 0.0
    new_tokens: int = 0
    rounds: int = 0  # target calls a sequence took part in (verification rounds, or decoding steps)
    proposed: int = 0
    accepted: int = 0
    w_sum: float = 0.0  # Σ w over emitted tokens (dynamic verifier)
    w_count: int = 0
    calls: dict[str, int] = field(default_factory=lambda: {"target": 0, "draft": 0})
    forward_s: dict[str, float] = field(default_factory=lambda: {"target": 0.0, "draft": 0.0})


class CallMeter:
    """Counts forward calls of the target and the draft and the time from embedding to logits.

    The hooks sit on the input embeddings (start) and the output embeddings (stop) rather than on
    the model, so that they see every forward however it is made (`generate`, `model(...)`, or the
    engine running the decoder layers itself).
    """

    def __init__(self, models: dict[str, nn.Module]) -> None:
        self.run: Run | None = None
        self._t0: dict[str, Any] = {}
        # On a GPU the hooks record CUDA events (a host clock would time the kernel launches); their
        # times are read after the setting's final synchronize, in `flush`.
        self.cuda = next(next(iter(models.values())).parameters()).device.type == "cuda"
        self.pending: list[tuple[str, Any, Any]] = []
        self.handles = []
        for name, model in models.items():
            self.handles.append(model.get_input_embeddings().register_forward_pre_hook(self._start(name)))
            self.handles.append(model.get_output_embeddings().register_forward_hook(self._stop(name)))

    def _start(self, name: str) -> Callable:
        def hook(module, args):
            self._t0[name] = _event() if self.cuda else time.perf_counter()

        return hook

    def _stop(self, name: str) -> Callable:
        def hook(module, args, output):
            if self.run is not None:
                self.run.calls[name] += 1
                if self.cuda:
                    self.pending.append((name, self._t0[name], _event()))
                else:
                    self.run.forward_s[name] += time.perf_counter() - self._t0[name]

        return hook

    def flush(self, run: Run) -> None:
        """Add the recorded GPU forward times to `run` (after a synchronize)."""
        for name, start, stop in self.pending:
            run.forward_s[name] += start.elapsed_time(stop) / 1e3
        self.pending.clear()

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _event():
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _clock(device: torch.device) -> float:
    """Wall clock after the device's queued work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def count_new_tokens(new: Tensor, eos: Sequence[int]) -> Tensor:
    """Tokens per row up to and including the first EOS (all of them if none)."""
    if not eos or new.shape[1] == 0:
        return torch.full((new.shape[0],), new.shape[1], dtype=torch.long)
    is_eos = torch.isin(new, torch.tensor(list(eos), device=new.device)).cpu()
    return torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, new.shape[1])


# ----------------------------------------------------------------------------- baselines


@torch.inference_mode()
def autoregressive(
    target: nn.Module,
    draft: nn.Module | None,
    input_ids: Tensor,
    attention_mask: Tensor,
    verifier: Verifier | None = None,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    eos_token_id: Sequence[int] = (),
    pad_token_id: int = 0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Token-by-token decoding through the engine's own model calls (same caches, same forward path).

    Without a verifier: from p, the target alone. With one: from v = w·p + (1 − w)·q, one target and
    one draft forward per token, which is what a training rollout costs without speculation.
    Temperature 0 is greedy. Returns [B, max_new] new tokens, pad after a row's EOS; the batch runs
    until every row is done (one host sync per step, as `generate`).
    """
    B, P = input_ids.shape
    device = input_ids.device
    hidden = verifier is not None and verifier.needs_hidden
    vocab = (
        shared_vocab_size(target, draft)
        if verifier is not None
        else target.get_output_embeddings().weight.shape[0]
    )
    models = [SlotModel(target, vocab, hidden)] + (
        [SlotModel(draft, vocab, hidden)] if verifier is not None else []
    )
    # Slots: the prompt, then one per new token (plain decoding leaves no holes).
    ids = torch.cat([input_ids, input_ids.new_full((B, max_new_tokens), int(pad_token_id))], 1)
    mask = torch.cat([attention_mask.long(), attention_mask.new_ones(B, max_new_tokens).long()], 1)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    eos = torch.tensor(list(eos_token_id), dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    tau = temperature if temperature > 0 else 1.0
    for step in range(max_new_tokens):
        outs = [m.forward(ids, mask, pos, P + step, keep=1) for m in models]
        logits_p = outs[0][0][:, -1]
        if verifier is None and temperature == 0:
            x = logits_p.argmax(-1)  # as `generate`: argmax of the logits
        else:
            v = probs_from_logits(logits_p, tau)  # p
            if verifier is not None:
                (_, h_t), (logits_q, h_d) = outs
                q = probs_from_logits(logits_q[:, -1], tau)
                v = mix(v, q, verifier.weights(v.unsqueeze(1), q.unsqueeze(1), h_d, h_t).squeeze(1))
            x = v.argmax(-1) if temperature == 0 else sample(v, generator)
        ids[:, P + step] = torch.where(done, int(pad_token_id), x)
        done |= torch.isin(x, eos)
        if bool(done.all()):
            break
    return ids[:, P:]


@contextmanager
def assistant_config(draft: nn.Module, n: int):
    """The draft's generation_config for transformers' assisted generation: always N drafts."""
    gc = draft.generation_config
    keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    saved = {k: getattr(gc, k, None) for k in keys}
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = (
        n,
        "constant",
        0.0,
    )
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(gc, k, v)


# ----------------------------------------------------------------------------- running


@dataclass
class BenchConfig:
    pair: str = "toy"  # "toy", "toy-tiny" or a RANDOM_PAIRS name; ignored when target and draft are given
    target: str | None = None  # local directories (or cached Hub ids) of another pair
    draft: str | None = None
    num_draft_tokens: int = 5
    batch_sizes: tuple[int, ...] = (1, 8)
    temperature: float = 1.0  # of the sampled settings (the others are greedy)
    weight: float = 0.5  # static target weight w (transformers needs 0 < w < 1)
    head: str | None = None  # saved WeightHead for the dynamic verifier (default: untrained, w = 0.5)
    num_prompts: int = 32
    max_new_tokens: int = 32
    ignore_eos: bool = False  # generate exactly max_new_tokens per row (steady-state decoding)
    repeats: int = 5
    warmup: int = 1
    threads: int = 1  # torch threads; 0 leaves the default
    seed: int = 0
    bonus_token: str = "ensemble"
    only: tuple[str, ...] = ()  # run only settings whose label contains one of these
    device: str = "cpu"  # where --pair / --target / --draft are loaded ("cuda" on a GPU)
    dtype: str = "float32"  # their dtype ("bfloat16" on a GPU)
    task: str | None = None  # prompts from this task (its prompt format) instead of the toy prompts
    data_files: tuple[str, ...] = ()  # the task's local rows: a path, or split=path pairs
    num_few_shot: int = 0  # few-shot examples in each task prompt (needs the train split)


def load_pair(config: BenchConfig):
    """(target, draft, tokenizer) of the configured pair, in `config.dtype` on `config.device`."""
    dtype = getattr(torch, config.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"--dtype must be a torch dtype name such as float32 or bfloat16, got {config.dtype!r}")
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {config.device} asked for, but torch sees no GPU here; use --device cpu")
    if config.target or config.draft:
        if not (config.target and config.draft):
            raise ValueError("give both --target and --draft, or neither (then --pair is used)")
        from diversed.pair import load_pair as load

        pair = load(config.target, config.draft, dtype=config.dtype, device=config.device)
    elif config.pair in ("toy", "toy-tiny"):
        from diversed.toy import ToyBuildConfig, load_toy_pair

        pair = load_toy_pair(config=ToyBuildConfig.tiny() if config.pair == "toy-tiny" else None)
        pair.target.to(config.device, dtype)
        pair.draft.to(config.device, dtype)
    elif config.pair in RANDOM_PAIRS:
        target, draft = (RANDOM_SHAPES[name] for name in RANDOM_PAIRS[config.pair])
        return random_pair(target, draft, dtype, torch.device(config.device), config.seed)
    else:
        raise ValueError(
            f"--pair must be one of {['toy', 'toy-tiny', *RANDOM_PAIRS]} (or give --target and --draft), "
            f"got {config.pair!r}"
        )
    return pair.target, pair.draft, pair.tokenizer


# Random-initialised models with the shapes of public checkpoints (the values of their config.json),
# to time real sizes where no weights can be downloaded: their outputs mean nothing, α is what two
# independent random models give, and the toy tokenizer encodes the prompts (ids below its size).
_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}  # fmt: skip
RANDOM_SHAPES: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False,
                         rope_parameters={**_LLAMA3_ROPE, "factor": 8.0}),
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         rope_parameters={**_LLAMA3_ROPE, "factor": 32.0}),
}  # fmt: skip
RANDOM_PAIRS = {"random-llama-8b-1b": ("llama-3.1-8b", "llama-3.2-1b")}  # --pair name: (target, draft)


def random_pair(
    target: dict[str, Any], draft: dict[str, Any], dtype: torch.dtype, device: torch.device, seed: int = 0
):
    """(target, draft, toy tokenizer): Llama models of these shapes, random-initialised (seeded)
    directly on `device` in `dtype`. Refuses, before allocating, if they do not fit in free memory."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    from diversed.toy import build_tokenizer

    tokenizer = build_tokenizer()
    special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    configs = [
        LlamaConfig(**shape, max_position_embeddings=131072, rms_norm_eps=1e-5, **special) for shape in (target, draft)
    ]
    with torch.device("meta"):  # sizes without allocating
        sizes = [sum(p.numel() for p in AutoModelForCausalLM.from_config(c).parameters()) for c in configs]
    need, free = sum(sizes) * dtype.itemsize, free_memory(device)
    if need > 0.9 * free:
        raise ValueError(
            f"the random pair ({sizes[0] / 1e9:.2f}B + {sizes[1] / 1e9:.2f}B parameters) needs "
            f"{need / 2**30:.1f} GiB in {str(dtype).removeprefix('torch.')} on {device}, {free / 2**30:.1f} GiB "
            f"free: use a GPU (--device cuda) and --dtype bfloat16"
        )
    models = []
    for c in configs:
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(c, dtype=dtype).eval().requires_grad_(False)
        generation = model.generation_config
        generation.eos_token_id, generation.pad_token_id = c.eos_token_id, c.pad_token_id
        models.append(model)
    return models[0], models[1], tokenizer


def free_memory(device: torch.device) -> float:
    """Bytes free on a GPU, or available RAM (MemAvailable) for the CPU; inf where unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return float("inf")


def toy_prompts(tokenizer, n: int, seed: int = 0) -> list[list[int]]:
    """Token ids of the first `n` toy test prompts ("Q: 37+48=")."""
    from diversed.toy import examples

    return [tokenizer(e["prompt"])["input_ids"] for e in examples("test", seed)[:n]]


def load_prompt_task(config: BenchConfig):
    """The task whose first `num_prompts` examples give the prompts (None for the toy prompts);
    loaded before the pair, so a bad name or missing file fails before any model is read."""
    if config.task is None:
        return None
    from diversed.tasks import TASKS, load_task

    if config.task not in TASKS:
        raise ValueError(f"--task must be one of {sorted(TASKS)}, got {config.task!r}")
    files: Any = list(config.data_files) or None
    if files and all("=" in f for f in files):  # split=path pairs, e.g. test=... train=...
        files = dict(f.split("=", 1) for f in files)
    elif files and any("=" in f for f in files):
        raise ValueError("--data-files takes paths, or split=path pairs, not a mix of both")
    # MBPP asks for a code-execution opt-in when built; the bench only encodes its prompts.
    extra = {"allow_code_execution": True} if config.task == "mbpp" else {}
    return load_task(
        config.task, data_files=files, n_examples=config.num_prompts, seed=config.seed,
        num_few_shot=config.num_few_shot, **extra,
    )  # fmt: skip


def make_batches(
    prompts: Sequence[Sequence[int]], batch_size: int, pad: int, device: torch.device
) -> list[tuple[Tensor, Tensor]]:
    """Left-padded (input_ids, attention_mask) batches, in order, on `device`."""
    return [left_pad(prompts[i : i + batch_size], pad, device) for i in range(0, len(prompts), batch_size)]


class Bench:
    """The pair, the prompts cut into chunks, and the verifiers; `run` times one setting on one chunk.

    A chunk holds max(batch sizes) prompts, batched at every batch size, so that the settings can
    take turns chunk by chunk: a busy second on the machine then slows every setting alike.
    """

    def __init__(self, config: BenchConfig, target, draft, prompts, eos: list[int], pad: int) -> None:
        self.config, self.target, self.draft, self.eos, self.pad = config, target, draft, eos, pad
        size = max(config.batch_sizes)
        self.device = next(target.parameters()).device  # batches, generators and clocks follow the pair
        self.chunks = [
            {b: make_batches(prompts[i : i + size], b, pad, self.device) for b in config.batch_sizes}
            for i in range(0, len(prompts), size)
        ]
        sizes = {"draft_hidden_size": hidden_size(draft), "target_hidden_size": hidden_size(target)}
        head = (
            WeightHead.from_pretrained(config.head, **sizes) if config.head else WeightHead(*sizes.values())
        )
        self.verifiers: dict[str, Verifier] = {
            "lossless": Lossless(),
            "static": StaticEnsemble(config.weight),
            "dynamic": DynamicEnsemble(head.eval().requires_grad_(False)),
        }
        self.meter = CallMeter({"target": target, "draft": draft})

    def run(self, s: Setting, chunk: int, seed: int, run: Run) -> None:
        """Generate from the prompts of `chunk` in batches of `s.batch_size`, adding to `run`."""
        gen = torch.Generator(self.device).manual_seed(seed)
        torch.manual_seed(seed)  # transformers samples from the global generator
        sampling = s.temperature > 0
        common = {
            "max_new_tokens": self.config.max_new_tokens,
            "pad_token_id": self.pad,
            "eos_token_id": self.eos,
        }
        calls = dict(run.calls)
        self.meter.run = run
        try:
            for ids, mask in self.chunks[chunk][s.batch_size]:
                t0 = _clock(self.device)
                if s.engine == "diversed":
                    st = speculative_generate(
                        self.target, self.draft, ids, mask, verifier=self.verifiers[s.verifier],
                        num_draft_tokens=s.num_draft_tokens, do_sample=sampling, temperature=s.temperature or 1.0,
                        generator=gen, bonus_token=s.bonus_token, **common,
                    ).stats  # fmt: skip
                    run.seconds += _clock(self.device) - t0
                    run.new_tokens += int(st.new_tokens.sum())
                    run.rounds += int(st.rounds.sum())
                    run.proposed += int(st.proposed.sum())
                    run.accepted += int(st.accepted.sum())
                    run.w_sum += float(st.w_sum.sum())
                    run.w_count += int(st.w_count.sum())
                    continue
                if s.implementation == "loop":
                    verifier = self.verifiers[s.verifier] if s.verifier else None
                    new = autoregressive(self.target, self.draft, ids, mask, verifier, temperature=s.temperature,
                                         generator=gen, **common)  # fmt: skip
                else:
                    kwargs: dict[str, Any] = {"do_sample": sampling}
                    if sampling:
                        kwargs |= {"temperature": s.temperature, "top_k": 0, "top_p": 1.0}
                    if s.engine == "transformers":
                        kwargs["assistant_model"] = self.draft
                        if s.verifier == "static":
                            kwargs["assistant_ensemble_weight"] = s.weight
                    with assistant_config(self.draft, s.num_draft_tokens or 1), torch.inference_mode():
                        out = self.target.generate(ids, attention_mask=mask, **kwargs, **common)
                    new = out[:, ids.shape[1] :]
                run.seconds += _clock(self.device) - t0
                n_new = int(count_new_tokens(new, self.eos).sum())
                run.new_tokens += n_new
                if s.engine == "autoregressive":
                    run.rounds += n_new  # one token per target call and sequence
                else:
                    # Batch 1: every assisted round is one target call (the first also reads the
                    # prompt) and one draft call per proposed token; a round emits its accepted
                    # drafts and one token, so accepted = new − rounds (exact unless EOS cuts a round).
                    rounds = run.calls["target"] - calls["target"]
                    run.rounds += rounds
                    run.proposed += run.calls["draft"] - calls["draft"]
                    run.accepted += max(0, n_new - rounds)
                    calls = dict(run.calls)
        finally:
            self.meter.run = None
            _clock(self.device)
            self.meter.flush(run)


def summarize(s: Setting, runs: list[Run]) -> dict[str, Any]:
    """One record: median tokens/s over the repeats, the other numbers pooled over them."""

    def total(f: Callable[[Run], float]) -> float:
        return sum(f(r) for r in runs)

    calls = {m: total(lambda r, m=m: r.calls[m]) for m in ("target", "draft")}
    fwd = {m: total(lambda r, m=m: r.forward_s[m]) for m in ("target", "draft")}
    speculative = s.engine in ("diversed", "transformers")
    alpha = total(lambda r: r.accepted) / max(1, total(lambda r: r.proposed)) if speculative else None
    tokens, rounds = total(lambda r: r.new_tokens), total(lambda r: r.rounds)
    ms = {m: 1e3 * fwd[m] / calls[m] if calls[m] else None for m in ("target", "draft")}
    c = ms["draft"] / ms["target"] if ms["draft"] and ms["target"] else None
    record = {
        "engine": s.engine,
        "verifier": s.verifier,
        "weight": s.weight,
        "num_draft_tokens": s.num_draft_tokens,
        "batch_size": s.batch_size,
        "temperature": s.temperature,
        "implementation": s.implementation,
        "bonus_token": s.bonus_token,
        "tokens_per_s": statistics.median(r.new_tokens / r.seconds for r in runs),
        "tokens_per_s_runs": [r.new_tokens / r.seconds for r in runs],
        "acceptance_rate": alpha,
        "tokens_per_target_call": tokens / rounds if rounds else None,
        "tokens_per_target_call_bound": tokens_per_call_bound(alpha, s.num_draft_tokens)
        if speculative
        else None,
        "draft_target_time_ratio": c,
        "theoretical_speedup": theoretical_speedup(alpha, s.num_draft_tokens, c)
        if speculative and c
        else None,
        "mean_w": total(lambda r: r.w_sum) / total(lambda r: r.w_count)
        if total(lambda r: r.w_count)
        else None,
        "new_tokens": tokens / len(runs),
        "target_calls": calls["target"] / len(runs),
        "draft_calls": calls["draft"] / len(runs),
        "target_forward_ms": ms["target"],
        "draft_forward_ms": ms["draft"],
        # the rest of the wall time is the engine's own work (sampling, verification, bookkeeping)
        "forward_time_share": (fwd["target"] + fwd["draft"]) / total(lambda r: r.seconds),
        "seconds": total(lambda r: r.seconds) / len(runs),
        "repeats": len(runs),
        "label": s.label,
    }
    return record


def compare(records: list[dict[str, Any]]) -> None:
    """Add the ratios between settings: to transformers, over autoregressive, over sampling from v."""

    def find(**kw: Any) -> dict[str, Any] | None:
        return next((r for r in records if all(r[k] == v for k, v in kw.items())), None)

    for r in records:
        if r["engine"] == "autoregressive":
            continue
        same = {"batch_size": r["batch_size"], "temperature": r["temperature"]}
        # Over autoregressive decoding with the same forward path (`generate` for transformers, our
        # loop for our engine): the theory's c is measured on those same calls.
        own = find(
            engine="autoregressive",
            verifier=None,
            implementation="loop" if r["engine"] == "diversed" else "generate",
            **same,
        )
        if own and r["theoretical_speedup"]:
            r["speedup"] = r["tokens_per_s"] / own["tokens_per_s"]
            r["speedup_fraction_of_theory"] = r["speedup"] / r["theoretical_speedup"]
            # The theory prices a verification forward (N + 1 tokens, right after the draft's calls)
            # like one decoding step of the loop. Where it costs more (compute-bound: CPU, large
            # batches), the bound at the measured cost is theory / (our target forward time / the
            # loop's); the fraction of that bound is what the engine's own overhead leaves.
            r["verify_decode_time_ratio"] = r["target_forward_ms"] / own["target_forward_ms"]
            r["theoretical_speedup_at_verify_cost"] = r["theoretical_speedup"] / r["verify_decode_time_ratio"]
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
        one = find(engine="diversed", verifier=r["verifier"], batch_size=1, temperature=r["temperature"],
                   bonus_token=r["bonus_token"])  # fmt: skip
        if one and r["batch_size"] != 1:
            r["ratio_to_batch_1"] = r["tokens_per_s"] / one["tokens_per_s"]


def machine() -> str:
    """CPU, threads, versions and load: what a timing needs next to it."""
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (
        f"{cpu}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads{gpu}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, load average {load}"
    )


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
    """Time every setting `repeats` times, interleaved; return one record per setting.

    Without a pair, loads the configured one and the toy test prompts (or `config.task`'s prompts);
    with a pair, `prompts` (lists of token ids) must be given too.
    """
    threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        source = "given"
        if target is None or draft is None:
            task = load_prompt_task(config) if prompts is None else None
            target, draft, tokenizer = load_pair(config)
            if prompts is None and task is None:
                prompts, source = toy_prompts(tokenizer, config.num_prompts, config.seed), "toy"
            elif prompts is None:
                prompts, source = task.encode(tokenizer, task.examples), f"{config.task} ({config.num_few_shot}-shot)"
        if prompts is None:
            raise ValueError("pass prompts (lists of token ids) along with the pair")
        prompts = list(prompts)[: config.num_prompts]
        gc = target.generation_config
        eos = eos_token_id if eos_token_id is not None else gc.eos_token_id
        eos = [] if config.ignore_eos else _as_id_list(eos)
        pad = pad_token_id if pad_token_id is not None else gc.pad_token_id
        pad = int(pad if pad is not None else (eos[0] if eos else 0))
        bench = Bench(config, target, draft, prompts, eos, pad)
        todo = settings(
            config.num_draft_tokens, config.batch_sizes, config.temperature, config.weight, config.bonus_token
        )
        if config.only:
            todo = [s for s in todo if any(o in s.label for o in config.only)]
        log(f"# {machine()}")
        weight = next(target.parameters())
        log(f"# pair on {weight.device} in {str(weight.dtype).removeprefix('torch.')}")
        stop = "exactly" if config.ignore_eos else "up to EOS, at most"
        mean_len = sum(len(p) for p in prompts) / max(len(prompts), 1)
        log(f"# {len(prompts)} {source} prompts of {mean_len:.0f} tokens on average, {stop} "
            f"{config.max_new_tokens} new tokens, N = {config.num_draft_tokens}, "
            f"{len(todo)} settings x {config.repeats} repeats (+{config.warmup} warm-up)")  # fmt: skip
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
        records = [summarize(s, r) for s, r in runs.items()]
        compare(records)
        env = machine()
        for r in records:
            r["machine"], r["prompts"], r["mean_prompt_tokens"] = env, source, mean_len
        return records
    finally:
        torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- report


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def table(records: list[dict[str, Any]]) -> str:
    """The records as a fixed-width text table."""
    head = (f"{'setting':<56} {'tok/s':>8} {'vs HF':>6} {'alpha':>5} {'tok/call':>8} {'bound':>5} {'c':>5} "
            f"{'speedup':>7} {'theory':>6} {'frac':>5} {'vs v-AR':>7} {'v/d':>5} {'frac@v':>6} {'fwd%':>4}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in records:
        lines.append(
            f"{r['label']:<56} {r['tokens_per_s']:>8.1f} {_f(r.get('ratio_to_transformers')):>6} "
            f"{_f(r['acceptance_rate']):>5} {_f(r['tokens_per_target_call']):>8} "
            f"{_f(r['tokens_per_target_call_bound']):>5} {_f(r['draft_target_time_ratio']):>5} "
            f"{_f(r.get('speedup')):>7} {_f(r.get('theoretical_speedup')):>6} "
            f"{_f(r.get('speedup_fraction_of_theory')):>5} {_f(r.get('speedup_over_v_sampling')):>7} "
            f"{_f(r.get('verify_decode_time_ratio')):>5} {_f(r.get('speedup_fraction_at_verify_cost')):>6} "
            f"{100 * r['forward_time_share']:>4.0f}"
        )
    return "\n".join(lines)


def goals(records: list[dict[str, Any]], temperature: float) -> str:
    """The issue's goals, each as measured against its target."""
    rows = []
    ours = [r for r in records if r["engine"] == "diversed"]
    for r in ours:
        if r.get("ratio_to_transformers") is not None:
            rows.append(("tok/s vs transformers", r["label"], r["ratio_to_transformers"], 2.0, ""))
    for r in ours:
        if r.get("ratio_to_batch_1") is not None:
            rows.append(("tok/s vs our batch 1", r["label"], r["ratio_to_batch_1"], 3.0, ""))
    for r in ours:
        if r.get("speedup_fraction_of_theory") is not None:
            note = (f"speedup {r['speedup']:.2f} of {r['theoretical_speedup']:.2f}; a verify forward costs "
                    f"{r['verify_decode_time_ratio']:.2f} decode forwards: {r['speedup_fraction_at_verify_cost']:.2f} "
                    f"of the bound at that cost")  # fmt: skip
            rows.append(("speedup / theory", r["label"], r["speedup_fraction_of_theory"], 0.8, note))
    for r in ours:
        if r.get("speedup_over_v_sampling") is not None and r["temperature"] == temperature:
            note = f"bound {r['theoretical_speedup_over_v_sampling']:.2f}"
            rows.append(("rollouts vs sampling v", r["label"], r["speedup_over_v_sampling"], 2.0, note))
    return "\n".join(
        f"{'ok  ' if value >= goal else 'MISS'} {what:<23} {label:<56} {value:5.2f} (goal {goal:g}) {note}"
        for what, label, value, goal, note in rows
    )


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m diversed.bench", description=__doc__.splitlines()[0])
    d = BenchConfig()
    parser.add_argument(
        "--pair", default=d.pair, choices=("toy", "toy-tiny", *RANDOM_PAIRS),
        help="toy pairs are built and cached on first use; random-llama-8b-1b: random weights with the shapes "
        "of Llama-3.1-8B / 3.2-1B (a GPU: --device cuda --dtype bfloat16)",
    )
    parser.add_argument("--target", default=None, help="another pair: the target's directory (with --draft)")
    parser.add_argument("--draft", default=None, help="another pair: the draft's directory (with --target)")
    parser.add_argument("-N", "--num-draft-tokens", type=int, default=d.num_draft_tokens)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(d.batch_sizes))
    parser.add_argument("--temperature", type=float, default=d.temperature, help="of the sampled settings")
    parser.add_argument("--weight", type=float, default=d.weight, help="static target weight w, in (0, 1)")
    parser.add_argument(
        "--head", default=None, help="saved WeightHead directory (default: untrained, w = 0.5)"
    )
    parser.add_argument("--num-prompts", type=int, default=d.num_prompts)
    parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    parser.add_argument("--ignore-eos", action="store_true", help="generate exactly --max-new-tokens per row")
    parser.add_argument("--repeats", type=int, default=d.repeats)
    parser.add_argument("--warmup", type=int, default=d.warmup)
    parser.add_argument("--threads", type=int, default=d.threads, help="torch threads (0: leave the default)")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--bonus-token", choices=("ensemble", "target"), default=d.bonus_token)
    parser.add_argument(
        "--only", nargs="*", default=[], help="run only settings whose label contains one of these"
    )
    parser.add_argument("--device", default=d.device, help="where to load the pair: cpu, cuda, cuda:1...")
    parser.add_argument("--dtype", default=d.dtype, help="the pair's dtype: float32, bfloat16, float16")
    parser.add_argument(
        "--task", default=None, help="prompts from this task (gsm8k, cnndm, xsum, mbpp, toy) instead of the toy prompts"
    )
    parser.add_argument(
        "--data-files", nargs="*", default=[], help="the task's local rows: a path, or split=path pairs (offline)"
    )
    parser.add_argument("--num-few-shot", type=int, default=d.num_few_shot, help="few-shot examples per task prompt")
    parser.add_argument("--output", default=None, help="write the records to this JSON file")
    args = parser.parse_args(argv)
    config = BenchConfig(
        pair=args.pair, target=args.target, draft=args.draft, num_draft_tokens=args.num_draft_tokens,
        batch_sizes=tuple(args.batch_sizes), temperature=args.temperature, weight=args.weight, head=args.head,
        num_prompts=args.num_prompts, max_new_tokens=args.max_new_tokens, ignore_eos=args.ignore_eos, repeats=args.repeats,
        warmup=args.warmup, threads=args.threads, seed=args.seed, bonus_token=args.bonus_token,
        only=tuple(args.only), device=args.device, dtype=args.dtype, task=args.task,
        data_files=tuple(args.data_files), num_few_shot=args.num_few_shot,
    )  # fmt: skip
    records = run_bench(config)
    print(table(records))
    print()
    print(goals(records, config.temperature))
    if args.output:
        Path(args.output).write_text(json.dumps(records, indent=1) + "\n")
    return records


if __name__ == "__main__":
    main()
