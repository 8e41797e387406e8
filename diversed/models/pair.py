"""Load a target/draft pair (Hub ids, local directories, GGUF files) with one shared tokenizer.

`load_pair` is what every `configs/pair/*.yaml` instantiates. It loads both models frozen in eval
mode, checks that target and draft tokenize identically (a directory without tokenizer files is
refused as such, `load_tokenizer`), and gives the tokenizer left padding and a pad token. A name
that is not a local directory is looked up in the local Hugging Face cache; if it is not there and
the Hub cannot be reached (HF_HUB_OFFLINE=1, or huggingface.co:443 does not answer within 3 s) it
fails at once with a message saying how to point the config at local copies, instead of waiting on
retries (the rule and the probe are `hub.py`'s). `random_pair` builds random-initialised models with
the shapes of public checkpoints (no download), for timing real sizes. The forward path the engine
takes for both models is the pair option `forward` (see `forward.py`). A member named as a `.gguf`
file, `shipped:<name>` or `draft:<name>` is made a local directory first by `gguf.resolve_model`.
`describe_pair` reads what a pair's files say without its weights (`PairCard`); `hidden_size(model)`
is a loaded model's last hidden width (`text_config`: the text part of a multimodal config).
`PairSettings` is the `pair:` settings' schema (checked before anything loads, `config/schema.py`); a
pair's default name is `files/provenance.pair_name` (pure string logic: a Hydra resolver too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, field_validator

from diversed.config.schema import Settings
from diversed.decoding import draft_vocab
from diversed.decoding.forward import FORWARD_PATHS, use_forward
from diversed.decoding.inputs import shared_vocab
from diversed.errors import ConfigError, MissingFile, UserError
from diversed.files.provenance import model_digest, pair_name
from diversed.models import hub
from diversed.models.gguf import gguf_source, resolve_model
from diversed.models.packed import check_kernels, cpu_has_bf16, pack_linears
from diversed.models.quantize import check_quantize, quantize_member, scheme
from diversed.models.toy_corpus import build_tokenizer
from diversed.moved import current_name

# ----------------------------------------------------------------------------- the pair


@dataclass
class Pair:
    """A frozen target p, a frozen draft q and their shared tokenizer."""

    target: Any
    draft: Any
    tokenizer: Any
    name: str
    target_name: str
    draft_name: str
    forward: str = "auto"  # the engine's forward path asked for both models (forward.use_forward)
    identity: dict[str, Any] = field(default_factory=dict)  # who the models are (its card's), where described
    draft_quantize: str = "none"  # the draft's linear layers: "none" or "int8" (quantize.py)
    cpu_kernels: str = "auto"  # float linear layers on CPU: "auto" (oneDNN packed) or "blas" (packed.py)
    target_quantize: str = "none"  # the target's linear layers: "none" or "int8", rows anchored (quantize.py)

    @property
    def device(self) -> torch.device:
        return next(self.target.parameters()).device


class PairSettings(Settings):
    """The `pair:` settings every entry point takes besides the members themselves (a pair config's
    `_target_` takes those): dtype, device, forward path, int8 draft or target, CPU kernels."""

    dtype: Literal["auto", "native", "config", "float32", "bfloat16", "float16"] = "auto"
    device: str = "auto"
    forward: Literal["auto", "hf", "direct"] = "auto"
    draft_quantize: Literal["none", "int8"] = Field(
        "none",
        description="int8: the draft's linear layers in int8 (CPU, float32 or bf16; models/quantize.py)",
    )
    target_quantize: Literal["none", "int8"] = Field(
        "none",
        description="int8: the target's linear layers in int8 at decoding steps, each row on its own range "
        "(CPU, float32 or bf16; models/quantize.py): another target, for every method and the baseline alike",
    )
    cpu_kernels: Literal["auto", "blas"] = Field(
        "auto",
        description="auto: a large model's linear layers on oneDNN's packed layout on CPU (float32, or bf16 "
        "where the CPU has bf16 instructions); blas: torch's F.linear (models/packed.py)",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        kind = device.split(":")[0]
        if kind not in ("auto", "cpu", "cuda", "mps"):
            raise ValueError("use auto, cpu, cuda, cuda:N or mps")
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError("torch sees no GPU on this machine; use pair.device=cpu (or auto)")
        if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError("MPS is not available on this machine; use pair.device=cpu (or auto)")
        return device


# ----------------------------------------------------------------------------- offline fail-fast


class HubUnavailableError(UserError, OSError):
    """A model id is neither a local directory nor cached, and the Hub cannot be reached."""


def in_hf_cache(repo_id: str, revision: str | None = None) -> bool:
    """Whether the local Hugging Face cache holds `repo_id`'s config.json."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)
    except Exception:  # an id that is not a valid repo name, an unreadable cache, ...
        return False


def resolve(name: str, role: str, *, revision: str | None = None, probe=None) -> dict[str, Any]:
    """Extra `from_pretrained` kwargs for `name`, or HubUnavailableError right away.

    `probe` returns None when the Hub is reachable, else a reason (default: `hub.probe`); the
    environment's offline rule (`hub.offline_reason`) is asked first.
    """
    if Path(name).expanduser().is_dir():
        return {}
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path, not an "org/name" id
        raise MissingFile(f"the {role} model directory {name!r} does not exist")
    cached = in_hf_cache(name, revision)
    reason = hub.unreachable_reason(probe)
    if reason is None:
        return {}
    if cached:  # offline but cached: load from the cache without touching the network
        return {"local_files_only": True}
    hint = name.rsplit("/", 1)[-1]
    raise HubUnavailableError(
        f"cannot load the {role} model {name!r}: it is not a local directory, not in the Hugging Face "
        f"cache, and the Hub is unreachable ({reason}). Download it where there is network "
        f"(`hf download {name} --local-dir /path/to/{hint}`), copy it here and point the pair at the "
        f"local copy, e.g. `pair.{role}=/path/to/{hint}` (and `pair.tokenizer=...` if set), or set "
        "HF_HOME to a populated Hugging Face cache."
    )


# ----------------------------------------------------------------------------- tokenizers


def check_tokenizers(a: Any, b: Any, name_a: str = "target", name_b: str = "draft") -> None:
    """ConfigError unless `a` and `b` have the same vocabulary and special tokens."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        only_a = sorted(set(va) - set(vb))[:5]
        only_b = sorted(set(vb) - set(va))[:5]
        moved = sorted(t for t in set(va) & set(vb) if va[t] != vb[t])[:5]
        raise ConfigError(
            f"tokenizers of {name_a} and {name_b} differ: {len(va)} vs {len(vb)} tokens; "
            f"only in {name_a}: {only_a}, only in {name_b}: {only_b}, different ids: {moved}. "
            "Speculative decoding needs a draft that shares the target's tokenizer."
        )
    for attr in ("bos_token_id", "eos_token_id", "unk_token_id"):
        if getattr(a, attr, None) != getattr(b, attr, None):
            raise ConfigError(
                f"tokenizers of {name_a} and {name_b} differ in {attr}: "
                f"{getattr(a, attr, None)} vs {getattr(b, attr, None)}"
            )


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
)


def load_tokenizer(name: str, role: str, **kwargs: Any) -> Any:
    """`AutoTokenizer.from_pretrained(name, **kwargs)`; a local directory without tokenizer files is
    refused first, saying so (transformers fails on one obscurely, or makes a one-token tokenizer)."""
    from transformers import AutoTokenizer

    local = Path(name).expanduser()
    if local.is_dir() and not any((local / f).is_file() for f in TOKENIZER_FILES):
        raise MissingFile(
            f"the {role} directory {name!r} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}). "
            "A pair decodes with one tokenizer and checks that its models share it: copy the tokenizer the "
            "model was trained with into the directory, e.g. the target's for a draft cut or distilled "
            f"from it (`AutoTokenizer.from_pretrained(<target>).save_pretrained({name!r})`), "
            f"or point pair.{role} at a directory that has one."
        )
    return AutoTokenizer.from_pretrained(name, **kwargs)


def _prepare_tokenizer(tokenizer: Any) -> Any:
    tokenizer.padding_side = "left"  # the engine takes left-padded prompts
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# ----------------------------------------------------------------------------- loading


def _device(device: str) -> torch.device:
    if device == "auto":
        if torch.cuda.is_available():  # this process's GPU (LOCAL_RANK under torchrun / DDP)
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", torch.cuda.current_device())))
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(device)


def native_dtype(device: torch.device) -> torch.dtype:
    """`dtype: native`: bf16 on accelerators and on CPUs with bf16 instructions (`cpu_has_bf16`),
    fp32 on other CPUs, where fp32 is the faster and the exact choice."""
    if device.type in ("cuda", "mps"):
        return torch.bfloat16
    return torch.bfloat16 if cpu_has_bf16() else torch.float32


def numerics(dtype: str, device: str = "auto") -> dict[str, Any]:
    """What a pair's `dtype` setting computes in on this machine, for its records: the dtype, and for
    `native` the CPU capability it was chosen from (`torch.backends.cpu.get_cpu_capability()`)."""
    dev = _device(str(device))
    if dtype != "native":
        return {"dtype": dtype}
    chosen = str(native_dtype(dev)).removeprefix("torch.")
    found = "accelerator" if dev.type != "cpu" else torch.backends.cpu.get_cpu_capability()
    bf16 = "" if dev.type != "cpu" else ", bf16 instructions" if cpu_has_bf16() else ", no bf16 instructions"
    return {"dtype": chosen, "numerics": f"native: {chosen} ({found}{bf16})"}


def _dtype(dtype: str | torch.dtype, device: torch.device) -> str | torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":  # bf16 on accelerators, fp32 on CPU
        return torch.bfloat16 if device.type in ("cuda", "mps") else torch.float32
    if dtype == "native":  # bf16 where the hardware computes it, fp32 on CPUs without bf16 instructions
        return native_dtype(device)
    return getattr(torch, dtype) if dtype != "config" else "auto"


def load_pair(
    target: str,
    draft: str,
    *,
    dtype: str = "auto",
    device: str = "auto",
    tokenizer: str | None = None,
    name: str | None = None,
    attn_implementation: str | None = None,
    revision: str | None = None,
    forward: str = "auto",
    draft_quantize: str = "none",
    cpu_kernels: str = "auto",
    target_quantize: str = "none",
    probe=None,
) -> Pair:
    """Load target and draft (Hub ids or local paths), frozen, on `device`, with one tokenizer.

    `dtype`: "auto" (bf16 on GPU, fp32 on CPU), "native" (bf16 on GPU and on CPUs with bf16
    instructions, fp32 on others: `native_dtype`), "config" (the checkpoint's), or a torch dtype
    name. `tokenizer`: where to load the shared tokenizer from (default: the target's).
    `forward`: the engine's forward path for both models, "auto" | "hf" | "direct" (see forward.py).
    `draft_quantize`: "int8" makes the draft's linear layers and head int8 (CPU, float32 or bf16; see
    quantize.py); `target_quantize`: "int8" the target's, each row on its own range (the int8 target
    is what every method and the autoregressive baseline then run). `cpu_kernels`: "auto" runs the
    other linear layers of a large model on CPU (float32, or bf16 where the CPU has bf16
    instructions) on oneDNN's packed layout, "blas" on torch's `F.linear` (see packed.py).
    """
    if forward not in FORWARD_PATHS:
        raise ConfigError(f"pair.forward must be one of {FORWARD_PATHS}, got {forward!r}")
    dev = _device(device)
    check_quantize(draft_quantize, dev, _dtype(dtype, dev))  # before anything is read
    check_quantize(target_quantize, dev, _dtype(dtype, dev), "pair.target_quantize=")
    check_kernels(cpu_kernels)
    given = {"target": str(target), "draft": str(draft)}
    names, extra = _resolved(target, draft, tokenizer, revision, probe)
    tok = _shared_tokenizer(names, extra, revision)
    kwargs: dict[str, Any] = {"dtype": _dtype(dtype, dev), "revision": revision}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    quantize = {"target": target_quantize, "draft": draft_quantize}
    models = {
        role: load_member(
            role, names[role], dev, tok, {**kwargs, **extra[role]}, forward, quantize[role], cpu_kernels
        )
        for role in ("target", "draft")
    }
    return Pair(
        target=models["target"],
        draft=models["draft"],
        tokenizer=_prepare_tokenizer(tok),
        name=name or pair_name(given["target"], given["draft"]),
        target_name=given["target"],
        draft_name=given["draft"],
        forward=forward,
        draft_quantize=draft_quantize,
        cpu_kernels=cpu_kernels,
        target_quantize=target_quantize,
    )


def _resolved(target: str, draft: str, tokenizer: str | None, revision: str | None, probe):
    """({role: local directory or Hub id}, {role: its `from_pretrained` arguments}) for the target,
    the draft and a tokenizer of its own if given: GGUF files, shipped models and the project's built
    drafts become local directories (`gguf.resolve_model`), each then `resolve`d with one network
    probe for the whole pair."""
    probe_result: list[str | None] = []

    def probe_once() -> str | None:  # one network probe for the whole pair
        if not probe_result:
            probe_result.append((probe or hub.probe)())
        return probe_result[0]

    names = {"target": resolve_model(target, "target"), "draft": resolve_model(draft, "draft")}
    if tokenizer is not None:
        names["tokenizer"] = resolve_model(tokenizer, "tokenizer")
    extra = {role: resolve(str(n), role, revision=revision, probe=probe_once) for role, n in names.items()}
    return names, extra


def _shared_tokenizer(names: dict[str, str], extra: dict[str, dict], revision: str | None) -> Any:
    """The pair's one tokenizer (the `tokenizer` member's, else the target's), checked against the
    target's and the draft's."""
    target, draft = names["target"], names["draft"]
    tok_target = load_tokenizer(target, "target", revision=revision, **extra["target"])
    tok_draft = load_tokenizer(draft, "draft", revision=revision, **extra["draft"])
    check_tokenizers(tok_target, tok_draft, f"target {target!r}", f"draft {draft!r}")
    if "tokenizer" not in names:
        return tok_target
    tok = load_tokenizer(names["tokenizer"], "tokenizer", revision=revision, **extra["tokenizer"])
    check_tokenizers(tok, tok_target, f"tokenizer {names['tokenizer']!r}", f"target {target!r}")
    return tok


def load_member(role: str, path: str, dev, tok, kwargs: dict, forward: str, quantize: str, kernels: str):
    """One member loaded with `from_pretrained(path, **kwargs)`, frozen on `dev`: a restricted
    vocabulary's head given back, quantized as `quantize` (its role's setting) asks, the linear layers
    packed, the forward path set (`ready_member`). A fine-tuned draft a sweep loads
    (`sweep/point.load_drafts`) is loaded by it too: it costs what the pair's draft does."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if Path(path).is_dir():  # a draft with a restricted vocabulary (draft_vocab.py) gets its head back
        draft_vocab.attach(model, path)
    model = model.to(dev)
    model.eval().requires_grad_(False)
    return ready_member(model, role == "draft", tok, forward, quantize, kernels)


def ready_member(model: Any, is_draft: bool, tok: Any, forward: str, quantize: str, kernels: str) -> Any:
    """A loaded, frozen member made ready for the engine: quantized as `quantize` asks (`quantize.py`;
    a target's rows anchored), the linear layers packed (`packed.py`), the forward path set
    (`forward.py`)."""
    quantize_member(model, quantize, tok, anchored=not is_draft)
    pack_linears(model, kernels)  # (after int8: what is left float)
    use_forward(model, forward)
    return model


# ----------------------------------------------------------------------------- a model's sizes


def text_config(config: Any) -> Any:
    """The text part of a model's config: a multimodal config's `get_text_config()`, else the config."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def hidden_size(model: Any) -> int | None:
    """The last hidden state's width of an HF model (its text config's `hidden_size`); None for a
    model without a config."""
    config = getattr(model, "config", None)
    return None if config is None else getattr(text_config(config), "hidden_size", None)


# ----------------------------------------------------------------------------- before loading


@dataclass
class PairCard:
    """What a pair's files say before any weights are read: who the models are (for keying
    results), the shared tokenizer, vocabulary and context sizes, and the hidden sizes."""

    name: str
    identity: dict[str, Any]  # per role: path and weight digest, or Hub id, revision and commit; dtype...
    tokenizer: Any
    vocab: dict[str, int]  # output-embedding rows of target and draft, and tokens of the tokenizer
    positions: int | None  # the shorter context of the two models (max_position_embeddings)
    hidden: dict[str, int | None]  # last hidden size of target and draft


def describe_pair(cfg: Any) -> PairCard | None:
    """The card of a pair config (`configs/pair/*.yaml`) from its files, weights unread; None for a
    loader this does not know (a loader function with a `pair_files(**cfg)` attribute returning
    ({"target": dir, "draft": dir}, name) is known). Raises what loading would (offline, missing
    directory, different tokenizers or vocabularies), before any weights are read."""
    cfg = dict(cfg)
    loader = current_name(str(cfg.get("_target_")))  # configs from before the subpackages: the old name
    common = {k: cfg.get(k, "auto") for k in ("dtype", "device", "forward")}
    common.update(numerics(str(common["dtype"]), str(common["device"])))  # `native` as chosen here, recorded
    common["draft_quantize"] = scheme(cfg.get("draft_quantize", "none"))  # what it computes
    if (target_quantize := cfg.get("target_quantize", "none")) != "none":  # (absent: keys as before it)
        common["target_quantize"] = scheme(target_quantize, anchored=True)
    if loader == "diversed.models.pair.random_pair":
        from transformers import LlamaConfig

        pair = cfg.get("pair", "random-llama-8b-1b")
        if pair not in RANDOM_PAIRS:
            raise ConfigError(f"pair.pair must be one of {sorted(RANDOM_PAIRS)}, got {pair!r}")
        configs = {
            role: LlamaConfig(**RANDOM_SHAPES[shape])
            for role, shape in zip(("target", "draft"), RANDOM_PAIRS[pair], strict=True)
        }
        tok = build_tokenizer()
        identity = {"random": pair, "seed": cfg.get("seed", 0)}
        name = cfg.get("name") or pair
    else:
        if loader == "diversed.models.pair.load_pair":
            names = {"target": str(cfg["target"]), "draft": str(cfg["draft"])}
            name = cfg.get("name") or pair_name(names["target"], names["draft"])
        else:  # another loader (the toy pair's) says where its files are through `loader.pair_files`
            from hydra.utils import get_method

            try:
                files = getattr(get_method(loader), "pair_files", None)
            except Exception:
                files = None
            if files is None:
                return None
            names, name = files(**{k: v for k, v in cfg.items() if not str(k).startswith("_")})
        configs, tok, identity = _read_files(names, cfg.get("tokenizer"), cfg.get("revision"))
    text = {role: text_config(c) for role, c in configs.items()}
    vocab = {role: int(t.vocab_size) for role, t in text.items()}
    shared = shared_vocab(vocab["target"], vocab["draft"])
    if len(tok) > shared:
        raise ConfigError(
            f"the tokenizer has {len(tok)} tokens but the models' output embeddings only {shared} rows "
            f"(target {vocab['target']}, draft {vocab['draft']}): ids past {shared - 1} have no logits; "
            "use the models' own tokenizer"
        )
    positions = [getattr(t, "max_position_embeddings", None) for t in text.values()]
    known = [p for p in positions if p]
    return PairCard(
        name=name,
        identity={**identity, **common},
        tokenizer=_prepare_tokenizer(tok),
        vocab={**vocab, "tokenizer": len(tok)},
        positions=min(known) if known else None,
        hidden={role: getattr(t, "hidden_size", None) for role, t in text.items()},
    )


def _read_files(names: dict[str, str], tokenizer: str | None, revision: str | None):
    """Configs, the checked tokenizer and the identity of each model, from config and tokenizer
    files only."""
    from transformers import AutoConfig

    names = {role: resolve_model(n, role) for role, n in names.items()}
    tokenizer = None if tokenizer is None else resolve_model(tokenizer, "tokenizer")
    result: list[str | None] = []

    def probe_once() -> str | None:
        if not result:
            result.append(hub.probe())
        return result[0]

    roles = {**names, **({"tokenizer": tokenizer} if tokenizer else {})}
    extra = {role: resolve(n, role, revision=revision, probe=probe_once) for role, n in roles.items()}
    configs = {
        role: AutoConfig.from_pretrained(names[role], revision=revision, **extra[role]) for role in names
    }
    toks = {role: load_tokenizer(n, role, revision=revision, **extra[role]) for role, n in roles.items()}
    check_tokenizers(
        toks["target"], toks["draft"], f"target {names['target']!r}", f"draft {names['draft']!r}"
    )
    identity = {}
    for role, n in names.items():
        local = Path(n).expanduser()
        if local.is_dir():
            identity[role] = {"path": str(local.resolve()), "weights": model_digest(local)}
            if (source := gguf_source(local)) is not None:  # converted from a GGUF file: name it
                identity[role]["gguf"] = {"file": source["file"], "sha256": source["sha256"]}
        else:
            identity[role] = {"id": n, "revision": revision, "commit": _hub_commit(n, revision, extra[role])}
    return configs, toks.get("tokenizer", toks["target"]), identity


def _hub_commit(repo_id: str, revision: str | None, extra: dict[str, Any]) -> str | None:
    """The commit a Hub id resolves to: from the cache offline, from the Hub otherwise."""
    try:
        if extra.get("local_files_only"):
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
            return Path(found).parent.name if isinstance(found, str) else None
        from huggingface_hub import HfApi

        return HfApi().model_info(repo_id, revision=revision, timeout=10).sha
    except Exception:  # a private or vanished repo: loading will say why
        return None


# ----------------------------------------------------------------------------- random pairs

# Random-initialised models with the shapes of public checkpoints (the values of their config.json),
# to time real sizes where no weights can be downloaded: their outputs mean nothing, α is what two
# independent random models give, and the toy tokenizer encodes the prompts (ids below its size).
_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
RANDOM_SHAPES: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=False,
        rope_parameters={**_LLAMA3_ROPE, "factor": 8.0},
    ),
    "llama-3.2-1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        vocab_size=128256,
        tie_word_embeddings=True,
        rope_parameters={**_LLAMA3_ROPE, "factor": 32.0},
    ),
}
RANDOM_PAIRS = {"random-llama-8b-1b": ("llama-3.1-8b", "llama-3.2-1b")}  # pair name: (target, draft) shapes


def random_pair(
    pair: str = "random-llama-8b-1b",
    *,
    dtype: str = "auto",
    device: str = "auto",
    seed: int = 0,
    forward: str = "auto",
    name: str | None = None,
    draft_quantize: str = "none",
    cpu_kernels: str = "auto",
    target_quantize: str = "none",
) -> Pair:
    """A pair of `RANDOM_PAIRS` shapes, random-initialised (seeded) directly on `device` in `dtype`,
    with the toy tokenizer. Refuses, before allocating, if the models do not fit in free memory."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    if pair not in RANDOM_PAIRS:
        raise ConfigError(f"random pair must be one of {sorted(RANDOM_PAIRS)}, got {pair!r}")
    if forward not in FORWARD_PATHS:
        raise ConfigError(f"pair.forward must be one of {FORWARD_PATHS}, got {forward!r}")
    dev = _device(device)
    torch_dtype = _dtype(dtype, dev)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(f"a random pair needs a torch dtype name (float32, bfloat16...), got {dtype!r}")
    check_quantize(draft_quantize, dev, torch_dtype)
    check_quantize(target_quantize, dev, torch_dtype, "pair.target_quantize=")
    check_kernels(cpu_kernels)
    tokenizer = _prepare_tokenizer(build_tokenizer())
    special = dict(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    configs = [
        LlamaConfig(**RANDOM_SHAPES[shape], max_position_embeddings=131072, rms_norm_eps=1e-5, **special)
        for shape in RANDOM_PAIRS[pair]
    ]
    _check_fits(configs, torch_dtype, dev)
    models = []
    for c in configs:
        torch.manual_seed(seed)
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(c, dtype=torch_dtype).eval().requires_grad_(False)
        generation = model.generation_config
        generation.eos_token_id, generation.pad_token_id = c.eos_token_id, c.pad_token_id
        quantize = draft_quantize if models else target_quantize
        models.append(ready_member(model, bool(models), tokenizer, forward, quantize, cpu_kernels))
    target, draft = RANDOM_PAIRS[pair]
    return Pair(
        models[0],
        models[1],
        tokenizer,
        name or pair,
        f"random:{target}",
        f"random:{draft}",
        forward,
        draft_quantize=draft_quantize,
        cpu_kernels=cpu_kernels,
        target_quantize=target_quantize,
    )


def _check_fits(configs: list, dtype: torch.dtype, dev: torch.device) -> None:
    """A ConfigError, before anything is allocated, where models of `configs` in `dtype` would take more
    than 90 % of `dev`'s free memory."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):  # sizes without allocating
        sizes = [sum(p.numel() for p in AutoModelForCausalLM.from_config(c).parameters()) for c in configs]
    need, free = sum(sizes) * dtype.itemsize, free_memory(dev)
    if need > 0.9 * free:
        raise ConfigError(
            f"the random pair ({sizes[0] / 1e9:.2f}B + {sizes[1] / 1e9:.2f}B parameters) needs "
            f"{need / 2**30:.1f} GiB in {str(dtype).removeprefix('torch.')} on {dev}, "
            f"{free / 2**30:.1f} GiB free: use a GPU (--device cuda) and --dtype bfloat16"
        )


def free_memory(device: torch.device) -> float:
    """Bytes free on a GPU, or available RAM (MemAvailable) for the CPU; inf where unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return float("inf")
