"""The toy pair: a tiny target and draft trained from scratch on CPU, shipped like a Hub pair.

Both models are Llama models trained on the toy corpus (`toy_corpus.py`: two-digit additions
with free wording), each with its own house style for the wording, so p and q disagree there
(TV about 0.25 per slot) although every phrasing is plausible to both. At the answer digits the
target (4 layers x 128, weight decay 0.1, which makes it learn the carries in time) computes the
sum, and the draft (1 layer x 64) gets close but is mostly wrong (the shipped pair: 1.00 vs 0.05
exact match on additions, lossless acceptance 0.53 at T = 1, N = 5). Lossless verification
rejects draft tokens at both kinds of position; a context-dependent w can trust q at the wording
(w low: more acceptance, same reward) and p at the digits (w high: right answers).

Shipped. The pair of the default build config (seed 0) ships with the package in ``toy_pair/``
(``target/`` and ``draft/`` as `save_pretrained` writes them, the build's ``build.json``, and
``manifest.json``: the build config's key, the sha256 of every file, one digest over them, and the
machine, torch and CPU capability that built it). `load_toy_pair` loads it with no training and no
cache write, after checking every digest: an altered, missing or extra file is refused with the
fix. It is shipped, not built on first use, because a float-level difference between CPUs (kernels
chosen per instruction set) changes training from its first steps: two machines building the same
config get different models, and every number measured on them moves.

Rebuilt. `python -m diversed.toy` (`diversed/toy.py`) trains the default pair from scratch (2-5
minutes on 2 CPU cores) with `build` into ``$DIVERSED_CACHE/toy/<hash of the build config>`` (default
``~/.cache/diversed/toy/...``; a build found there is reused unless ``--force``), measures and prints
the quality gap, says whether the rebuild is identical to the shipped pair (`compare_with_shipped`:
file by file, and tensor by tensor where not), and never replaces the shipped pair unless asked
(`ship`, for a maintainer). Another build config (``--seed``, ``--tiny``, or a `ToyBuildConfig` passed
to `load_toy_pair`) is built on first use and cached there; built by the loader, its
report has no quality gap (``metrics`` None) until `python -m diversed.toy` measures it. One machine
gives the same weights for the same config; another machine may not.

It does not define the corpus or the tokenizer (`toy_corpus.py`), score completions (the toy
tasks) or measure the quality gap (`diversed/toy.py`, which decodes the toy tasks): models read no
task.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from diversed.errors import MissingFile, UserError
from diversed.files import cache
from diversed.models.pair import load_pair
from diversed.models.toy_corpus import build_tokenizer, corpus

FORMAT_VERSION = 3  # bump when the corpus, tokenizer or training code changes the artefacts (3: two skills)

# ----------------------------------------------------------------------------- build config


@dataclass(frozen=True)
class ModelSpec:
    """Size and training budget of one toy model."""

    layers: int
    hidden: int
    heads: int
    mlp: int
    steps: int
    lr: float
    weight_decay: float
    batch_size: int = 32


@dataclass(frozen=True)
class ToyBuildConfig:
    """Everything that determines the artefacts; its hash names the cache directory."""

    seed: int = 0
    target: ModelSpec = field(
        default_factory=lambda: ModelSpec(
            layers=4, hidden=128, heads=4, mlp=384, steps=1600, lr=2e-3, weight_decay=0.1
        )
    )
    draft: ModelSpec = field(
        default_factory=lambda: ModelSpec(
            layers=1, hidden=64, heads=2, mlp=128, steps=1000, lr=3e-3, weight_decay=0.01
        )
    )
    max_position_embeddings: int = 512
    n_eval: int = 500  # test problems per skill used for the accuracy / acceptance report
    num_draft_tokens: int = 5  # for the acceptance report
    skills: tuple[str, ...] = ("add", "count")  # what both models are trained on (toy_corpus.SKILLS)

    @classmethod
    def tiny(cls, seed: int = 0) -> ToyBuildConfig:
        """A few steps of tiny models on additions only: builds in seconds, for tests."""
        return cls(
            seed=seed,
            skills=("add",),
            target=ModelSpec(
                layers=1, hidden=32, heads=2, mlp=64, steps=3, lr=1e-3, weight_decay=0.1, batch_size=16
            ),
            draft=ModelSpec(
                layers=1, hidden=16, heads=2, mlp=32, steps=2, lr=1e-3, weight_decay=0.01, batch_size=16
            ),
            n_eval=8,
        )

    def key(self) -> str:
        blob = json.dumps({"version": FORMAT_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_root() -> Path:
    """``$DIVERSED_CACHE/toy``, else ``~/.cache/diversed/toy``."""
    return cache.cache_root() / "toy"  # the one DIVERSED_CACHE rule


def pair_dir(config: ToyBuildConfig | None = None, cache_dir: str | Path | None = None) -> Path:
    """Where the pair built from `config` lives (whether or not it is built yet)."""
    config = config or ToyBuildConfig()
    return (Path(cache_dir).expanduser() if cache_dir else cache_root()) / config.key()


# ----------------------------------------------------------------------------- models and training


def make_model(spec: ModelSpec, tokenizer, max_position_embeddings: int):
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden,
        intermediate_size=spec.mlp,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=16,
    )
    return model


def _batch(tokenizer, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """Right-padded bos + prompt + completion + eos; the loss is on completion and eos only."""
    rows, labels = [], []
    for prompt, completion in pairs:
        p = tokenizer(prompt)["input_ids"]  # bos + prompt
        c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(p + c)
        labels.append([-100] * len(p) + c)
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    return {
        "input_ids": torch.tensor([r + [pad] * (width - len(r)) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
        "labels": torch.tensor([r + [-100] * (width - len(r)) for r in labels]),
    }


def train_model(
    model,
    tokenizer,
    spec: ModelSpec,
    *,
    style: str,
    seed: int,
    progress: bool = True,
    skills: tuple[str, ...] = ("add",),
) -> list[float]:
    """AdamW with linear warmup and cosine decay on `spec.steps` batches of `style` wording."""
    data = corpus(spec.steps * spec.batch_size, style=style, seed=seed, skills=tuple(skills))
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.98), weight_decay=spec.weight_decay)
    warmup = max(1, spec.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, spec.steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(t * math.pi))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    losses = []
    bar = tqdm(range(spec.steps), desc=f"toy {style}", disable=not progress, file=sys.stderr, leave=False)
    for step in bar:
        batch = _batch(tokenizer, data[step * spec.batch_size : (step + 1) * spec.batch_size])
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return losses


# ----------------------------------------------------------------------------- build and cache


# One torch thread, always: the thread count changes the reduction order of some kernels and with
# it the trained draft (measured: 1 vs 2 threads give different draft weights), and these models
# are so small that a second thread barely helps on an idle machine (default build: 129 s on one
# thread of 2 cores) and makes a busy one many times slower.
BUILD_THREADS = 1


def build_machine() -> dict[str, Any]:
    """What a build ran on, as far as it changes the floats: torch, its CPU kernels' instruction set,
    the thread count of `build`, the CPU."""
    import transformers

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": BUILD_THREADS,
        "cpu": cpu,
        "machine": platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
    }


def build(
    config: ToyBuildConfig,
    out_dir: str | Path,
    *,
    progress: bool = True,
    measure: Callable[[Any, Any, Any, ToyBuildConfig], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Train the pair from scratch into `out_dir` (target/, draft/, build.json); returns the report.
    `measure(target, draft, tokenizer, config)`: the quality gap of the trained models, on the build's
    one thread, recorded as the report's `metrics` (`diversed.toy.measure`, its `quality_gap` with the
    config's settings: this layer reads no task); without it `metrics` is None."""
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        tokenizer = build_tokenizer(config.max_position_embeddings)
        models = {}
        losses = {}
        for offset, role in enumerate(("target", "draft")):
            spec = getattr(config, role)
            torch.manual_seed(config.seed * 1000 + offset)  # init and dropout, per role
            models[role] = make_model(spec, tokenizer, config.max_position_embeddings)
            losses[role] = train_model(
                models[role],
                tokenizer,
                spec,
                style=role,
                seed=config.seed,
                progress=progress,
                skills=config.skills,
            )
        train_s = time.perf_counter() - t0
        metrics = measure(models["target"], models["draft"], tokenizer, config) if measure else None
    finally:
        torch.set_num_threads(threads)
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Writing model shards" bars inside ours
    # The tokenizer's file records the backend's padding as a padded call leaves it (left, to the longest
    # row), which `save_pretrained` writes: set here so the files do not depend on what was called last.
    tokenizer.backend_tokenizer.enable_padding(
        direction="left", pad_id=tokenizer.pad_token_id, pad_token=tokenizer.pad_token
    )
    try:
        for role, model in models.items():
            model.save_pretrained(out_dir / role)
            tokenizer.save_pretrained(out_dir / role)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    report = {
        "config": asdict(config),
        "key": config.key(),
        "format_version": FORMAT_VERSION,
        "metrics": metrics,
        "final_loss": {role: sum(v[-20:]) / max(1, len(v[-20:])) for role, v in losses.items()},
        "params": {role: sum(p.numel() for p in m.parameters()) for role, m in models.items()},
        "train_seconds": round(train_s, 1),
        "build_seconds": round(time.perf_counter() - t0, 1),
        "built_on": build_machine(),
    }
    (out_dir / "build.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def is_built(path: str | Path) -> bool:
    path = Path(path)
    return (path / "build.json").is_file() and (path / "target").is_dir() and (path / "draft").is_dir()


def build_cached(
    config: ToyBuildConfig,
    *,
    cache_dir: str | Path | None = None,
    force: bool = False,
    progress: bool = True,
    measure: Callable[[Any, Any, Any, ToyBuildConfig], dict[str, Any]] | None = None,
) -> Path:
    """The cache directory holding a build of `config`, trained first if missing (or `force`);
    `measure` as in `build`."""
    path = pair_dir(config, cache_dir)
    if is_built(path) and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"building the toy pair into {path} (seed {config.seed})", file=sys.stderr)
    report = build(config, tmp, progress=progress, measure=measure)
    print(format_report(report), file=sys.stderr)
    if force:
        shutil.rmtree(path, ignore_errors=True)
    try:
        os.rename(tmp, path)  # atomic: a reader sees a whole pair or none
    except OSError:  # another process finished the same build first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def ensure_toy_pair(
    config: ToyBuildConfig | None = None,
    *,
    cache_dir: str | Path | None = None,
    force: bool = False,
    progress: bool = True,
    measure: Callable[[Any, Any, Any, ToyBuildConfig], dict[str, Any]] | None = None,
) -> Path:
    """The directory holding target/ and draft/ for `config`: the shipped pair, its digests
    checked, for the default config (`cache_dir` unused; `force`: a rebuild in the cache instead);
    else a cached build, trained first if missing (`measure` as in `build`)."""
    config = config or ToyBuildConfig()
    if config.key() == ToyBuildConfig().key() and not force:
        return verify_shipped()
    return build_cached(config, cache_dir=cache_dir, force=force, progress=progress, measure=measure)


# ----------------------------------------------------------------------------- the shipped pair


SHIPPED_DIR = Path(__file__).with_name("toy_pair")
MANIFEST = "manifest.json"
REPORT = "build.json"  # in the manifest, but not compared with a rebuild's: it holds the build's timings
SHIP_COMMAND = "python -m diversed.toy --force --ship"


class ShippedPairError(UserError, ValueError):
    """The shipped toy pair's files are not the ones its manifest records (or not the default
    config's pair); the message names the file and the fix."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_digests(path: str | Path) -> dict[str, str]:
    """sha256 of every file under `path` by its relative POSIX path, the manifest excepted."""
    path = Path(path)
    return {
        f.relative_to(path).as_posix(): _sha256(f)
        for f in sorted(path.rglob("*"))
        if f.is_file() and f.relative_to(path).as_posix() != MANIFEST
    }


def combined_digest(files: dict[str, str]) -> str:
    """One digest over a pair's files: the sha256 of the lines ``<sha256>  <path>`` sorted by path,
    each ending in a newline (what ``sha256sum`` prints, run from the pair's directory)."""
    return hashlib.sha256("".join(f"{files[k]}  {k}\n" for k in sorted(files)).encode()).hexdigest()


def shipped_manifest(shipped: str | Path | None = None) -> dict[str, Any]:
    path = Path(shipped or SHIPPED_DIR) / MANIFEST
    if not path.is_file():
        raise MissingFile(
            f"the shipped toy pair has no manifest ({path} is missing): reinstall diversed, or restore "
            f"the directory from git (git checkout -- diversed/models/toy_pair)"
        )
    return json.loads(path.read_text())


def verify_shipped(shipped: str | Path | None = None, config: ToyBuildConfig | None = None) -> Path:
    """The shipped pair's directory once every file matches its manifest's sha256, nothing is
    missing or added beside the models, and the manifest's build config is `config` (default: the
    default config's); else `ShippedPairError` naming the file and the fix."""
    shipped = Path(shipped or SHIPPED_DIR)
    manifest = shipped_manifest(shipped)
    restore = (
        "restore the shipped pair (git checkout -- diversed/models/toy_pair in a checkout, or "
        "reinstall diversed); a maintainer shipping a new pair rebuilds and writes it with "
        f"`{SHIP_COMMAND}`"
    )
    want, have = manifest["files"], file_digests(shipped)
    for name in sorted(want.keys() | have.keys()):
        if name not in have:
            raise ShippedPairError(f"the shipped toy pair's file {shipped / name} is missing: {restore}")
        if name not in want:
            if name.split("/")[0] in ("target", "draft"):  # the model loader would read it
                raise ShippedPairError(
                    f"the shipped toy pair has a file its manifest does not list, {shipped / name}: "
                    f"remove it, or {restore}"
                )
            continue
        if have[name] != want[name]:
            raise ShippedPairError(
                f"the shipped toy pair's file {shipped / name} was altered (sha256 {have[name][:16]}..., "
                f"the manifest {shipped / MANIFEST} records {want[name][:16]}...): {restore}"
            )
    if combined_digest(want) != manifest["digest"]:
        raise ShippedPairError(f"the shipped toy pair's manifest {shipped / MANIFEST} was altered: {restore}")
    key = (config or ToyBuildConfig()).key()
    if manifest["key"] != key:
        raise ShippedPairError(
            f"the shipped toy pair was built from build config {manifest['key']}, and the default build "
            f"config is now {key} (ToyBuildConfig or FORMAT_VERSION changed): rebuild and ship it with "
            f"`{SHIP_COMMAND}`, then commit diversed/models/toy_pair"
        )
    return shipped


def _tensor_diff(a: Path, b: Path) -> tuple[int, int, float]:
    """(tensors that differ, tensors, max abs diff over those of equal shape) of both models."""
    from safetensors.torch import load_file

    n = total = 0
    worst = 0.0
    for role in ("target", "draft"):
        x, y = (load_file(p / role / "model.safetensors") for p in (a, b))
        for k in x.keys() | y.keys():
            total += 1
            if k not in x or k not in y or x[k].shape != y[k].shape:
                n += 1
            elif not torch.equal(x[k], y[k]):
                n += 1
                worst = max(worst, (x[k].double() - y[k].double()).abs().max().item())
    return n, total, worst


def compare_with_shipped(path: str | Path, shipped: str | Path | None = None) -> str:
    """Whether the pair in `path` is the shipped one: every file's sha256 (the build report aside),
    and where they differ, how many tensors do and by how much."""
    path, shipped = Path(path), Path(shipped or SHIPPED_DIR)
    try:
        manifest = shipped_manifest(shipped)
    except MissingFile:
        return f"there is no shipped toy pair to compare with ({shipped / MANIFEST} is missing)"
    theirs = {k: v for k, v in manifest["files"].items() if k != REPORT}
    mine = {k: v for k, v in file_digests(path).items() if k != REPORT}
    differ = sorted(k for k in theirs.keys() | mine.keys() if theirs.get(k) != mine.get(k))
    if not differ:
        return f"the rebuilt pair is identical to the shipped pair ({len(theirs)} files by sha256; {shipped})"
    n, total, worst = _tensor_diff(shipped, path)
    machine = manifest.get("built_on", {})
    return (
        f"the rebuilt pair differs from the shipped pair ({n} of {total} tensors differ, max abs diff "
        f"{worst:.3g}; files: {', '.join(differ)}); the shipped pair is what the demo and README use "
        f"({shipped}; built with torch {machine.get('torch', '?')}, CPU capability "
        f"{machine.get('cpu_capability', '?')}; here: torch {torch.__version__}, "
        f"{torch.backends.cpu.get_cpu_capability()})"
    )


def ship(path: str | Path, shipped: str | Path | None = None) -> dict[str, Any]:
    """Write the pair built in `path` (target/, draft/, build.json) over the shipped directory with
    a new manifest; returns the manifest. For a maintainer: the shipped pair is what everyone loads."""
    path, shipped = Path(path), Path(shipped or SHIPPED_DIR)
    report = json.loads((path / REPORT).read_text())
    tmp = shipped.with_name(f".{shipped.name}.tmp-{os.getpid()}")
    old = shipped.with_name(f".{shipped.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for role in ("target", "draft"):
        shutil.copytree(path / role, tmp / role)
    shutil.copy(path / REPORT, tmp / REPORT)
    files = file_digests(tmp)
    manifest = {
        "key": report["key"],
        "format_version": report["format_version"],
        "seed": report["config"]["seed"],
        "files": files,
        "digest": combined_digest(files),
        # build.json records the machine since it was added; a build from before, shipped here, was
        # made on this machine unless its cache was copied
        "built_on": report.get("built_on") or {**build_machine(), "recorded": "when shipped"},
        "command": SHIP_COMMAND,
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if shipped.exists():
        os.rename(shipped, old)
    os.rename(tmp, shipped)
    shutil.rmtree(old, ignore_errors=True)
    return manifest


# ----------------------------------------------------------------------------- report and loaders


def format_report(report: dict[str, Any], *, cached: bool = False) -> str:
    """The build report; `cached`: the pair was found in the cache, not built now."""
    m = report["metrics"]
    how = (
        f"loaded from the cache (it was built in {report['build_seconds']:.0f}s)"
        if cached
        else (f"built in {report['build_seconds']:.0f}s")
    )
    head = (
        f"toy pair {report['key']}: {how} "
        f"(target {report['params']['target']:,} params, draft {report['params']['draft']:,})"
    )
    if m is None:  # built by the loader on first use: `python -m diversed.toy` measures it
        return head + "; quality gap not measured (python -m diversed.toy measures it)"
    return head + "".join(
        f"\n  {skill}: test exact match target {v['target_accuracy']:.3f}, "
        f"draft {v['draft_accuracy']:.3f}; lossless acceptance rate at T=1: {v['acceptance_rate']:.3f}"
        for skill, v in m.get("skills", {"add": m}).items()
    )


def load_toy_pair(
    *,
    seed: int = 0,
    cache_dir: str | None = None,
    name: str = "toy",
    dtype: str = "float32",
    device: str = "cpu",
    attn_implementation: str | None = None,
    config: ToyBuildConfig | None = None,
    forward: str = "auto",
    draft_quantize: str = "none",
    target_quantize: str = "none",
):
    """The toy pair through `diversed.models.pair.load_pair` like any pair: the shipped one, its
    digests checked, for the default config (seed 0; `cache_dir` unused); another config's from the
    cache, built first if missing."""
    config = config or ToyBuildConfig(seed=seed)
    path = ensure_toy_pair(config, cache_dir=cache_dir)
    return load_pair(
        str(path / "target"),
        str(path / "draft"),
        dtype=dtype,
        device=device,
        name=name,
        attn_implementation=attn_implementation,
        forward=forward,
        draft_quantize=draft_quantize,
        target_quantize=target_quantize,
    )


def toy_pair_files(
    *,
    seed: int = 0,
    cache_dir: str | None = None,
    name: str = "toy",
    config: ToyBuildConfig | None = None,
    **_: Any,
) -> tuple[dict[str, str], str]:
    """Where `load_toy_pair` with these arguments finds target and draft (checked or built first),
    for `pair.describe_pair`, which checks a pair's files before any weights are read."""
    path = ensure_toy_pair(config or ToyBuildConfig(seed=seed), cache_dir=cache_dir)
    return {"target": str(path / "target"), "draft": str(path / "draft")}, name


load_toy_pair.pair_files = toy_pair_files  # type: ignore[attr-defined]
