"""How the engine calls a model: one forward over a range of KV-cache slots.

The engine keeps one slot layout for both models (slot s holds the token `ids[:, s]` at position
`pos[:, s]`, `mask[:, s]` says whether it is text), so a forward is "feed slots [length, end)
and return the logits and final hidden states of the last `keep`" (or the hidden states of more
slots than logits, `states`; `SlotModel.head` turns them into logits later, a few rows at a time,
where logits for every slot would not fit). `SlotModel` does that in one of two ways (the
forward path), chosen once per model by `plan`:

- hf: `model(...)` with the 2D slot mask and a transformers `DynamicCache`, for any causal LM
  (for one with sliding-window layers, such as Gemma-3, a cache of full layers and 4D masks whose
  windows count positions, not slots: `slot_masks`; holes left by rejected drafts would otherwise
  shrink a row's window, and transformers' sliding cache cannot give rejected drafts back);
- direct: for the Llama family (Llama, Mistral, Qwen2, Qwen3) with full attention in every layer,
  the decoder maths written out on the model's own weights (small models on CPU: copies of them
  laid out for BLAS), with a preallocated KV buffer that is written in place, cropped by moving a
  length and shrunk with one `index_select` when rows leave. On a small model `model(...)` spends
  more time in module calls, cache bookkeeping and mask building than in arithmetic (measured in
  BENCHMARKS.md). The direct way is used only if `_direct_plan` finds it gives the same logits and
  hidden states as `model(...)` on a ragged batch with a hole, to a tolerance relative to their scale
  (a model's int8 layers, models/quantize.py, computing their float product while it checks).

Which path a model takes is asked with `use_forward(model, "auto" | "hf" | "direct")` (the pair
option `forward`, see `pair.py`): "auto" takes the direct path on CPU only (on an H200 at Llama
8B/1B shapes in bf16 it ran 2.25x as fast as `model(...)` at batch 1, as close to float32, but the
engine's exactness checks have not run on it there: BENCHMARKS.md "GPU") and not under autocast
(it runs in the weights' dtype: slower there), "hf" always `model(...)`, "direct" the direct path
(under autocast too, checked at half precision's tolerance) or a ValueError saying why not. The
choice and its reason are logged once per model and again when they change (INFO; WARNING when the
direct path raised or disagreed with `model(...)`), and `forward_path(model)` tells it afterwards.

It does not sample, verify or know about tokenizers; it does not train (everything runs under
the caller's no-grad/inference mode) and it does not support sliding windows in the direct way.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules import module as torch_module
from transformers import DynamicCache

from diversed.decoding.inputs import ordinary_ids

if TYPE_CHECKING:
    from diversed.decoding.prompt_cache import PromptCache

log = logging.getLogger(__name__)
FORWARD_PATHS = ("auto", "hf", "direct")

# Architectures whose decoder layer is exactly: x + attn(rms_norm(x)), x + mlp(rms_norm(x)), with
# rotary q/k (Qwen3: an RMS norm over the head dim first) and a gated MLP.
DIRECT_TYPES = ("llama", "mistral", "qwen2", "qwen3")


Projection = tuple[Tensor, Tensor | None] | Callable[[Tensor], Tensor]


class _Layer(NamedTuple):
    """One decoder layer's tensors (plain tensors: a module call costs more than a tiny matmul).
    Linear weights are kept transposed, [in, out] (see `_weight_t`), so a projection of the 2D
    hidden states [tokens, in] is one `mm` / `addmm` (see `_linear`)."""

    ln1: tuple[Tensor, float]  # RMS norm weight and eps
    q: Projection  # linear weightᵀ and bias, or a callable (`_projection`)
    k: Projection
    v: Projection
    o: Projection
    q_norm: tuple[Tensor, float] | None  # Qwen3
    k_norm: tuple[Tensor, float] | None
    ln2: tuple[Tensor, float]
    gate: Projection
    up: Projection
    down: Projection
    act: Callable[[Tensor], Tensor]

    @classmethod
    def of(cls, layer: nn.Module, copy: bool) -> _Layer:
        attn, mlp = layer.self_attn, layer.mlp
        lin = lambda m: _projection(m, copy)  # noqa: E731
        norm = lambda m: None if m is None else (m.weight, m.variance_epsilon)  # noqa: E731
        act = (
            F.silu
            if isinstance(mlp.act_fn, nn.SiLU) or type(mlp.act_fn).__name__ == "SiLUActivation"
            else mlp.act_fn
        )
        return cls(
            norm(layer.input_layernorm),
            lin(attn.q_proj),
            lin(attn.k_proj),
            lin(attn.v_proj),
            lin(attn.o_proj),
            norm(getattr(attn, "q_norm", None)),
            norm(getattr(attn, "k_norm", None)),
            norm(layer.post_attention_layernorm),
            lin(mlp.gate_proj),
            lin(mlp.up_proj),
            lin(mlp.down_proj),
            act,
        )


# On CPU, BLAS multiplies small matrices faster when the weight is stored [in, out] than through a
# transposed view of the [out, in] tensor (toy pair: 4–12 % per forward, BENCHMARKS.md round 4);
# for large matrices there is no consistent difference and a copy would double their memory. So
# models up to this size keep [in, out] copies of their linear weights on CPU, views otherwise.
CPU_COPY_BYTES = 64 * 2**20


def _cache_name(model: nn.Module) -> str:
    """The KV-cache argument's name: transformers 5.x renamed `past_key_values` to `cache` (the old
    name warns on every call until 5.40); earlier releases know only the old one. A wrapper (peft's
    LoRA) passes it on to the model it wraps, whose name counts."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def _weight_t(weight: Tensor, copy: bool) -> Tensor:
    """Wᵀ as [in, out]: a contiguous copy, or a view of the model's own tensor (always current)."""
    return weight.t().contiguous() if copy else weight.t()


def _projection(module: nn.Module, copy: bool) -> Projection:
    """How the direct path applies one linear layer: a plain `nn.Linear` as (Wᵀ, b) (`_linear`); a
    module that offers `direct_projection()` (the int8 linear of `models/quantize.py`) as the function
    it returns, which computes what its forward does without a module call (~11 µs each, a fifth of
    an int8 projection of a small model); anything else (an adapter, a hooked layer) as the module."""
    hooked = module._forward_hooks or module._forward_pre_hooks
    if type(module) is nn.Linear and not hooked:
        return _weight_t(module.weight, copy), module.bias
    if hasattr(module, "direct_projection") and not hooked:
        return module.direct_projection()
    return module


def _linear(x: Tensor, linear: Projection, residual: Tensor | None = None) -> Tensor:
    """[residual +] x Wᵀ [+ b] for 2D x, as one BLAS call where it can be: F.linear on the 3D
    states goes through linear -> matmul -> reshape -> mm, four dispatches for one small product.
    With both a residual and a bias, residual + (x Wᵀ + b), in the order HF adds them. A callable
    projection (`_projection`) is applied, then the residual added."""
    if callable(linear):
        out = linear(x)
        return out if residual is None else residual + out
    weight_t, bias = linear
    if bias is None:
        return torch.mm(x, weight_t) if residual is None else torch.addmm(residual, x, weight_t)
    out = torch.addmm(bias, x, weight_t)
    return out if residual is None else residual + out


def _rms_norm(x: Tensor, norm: tuple[Tensor, float]) -> Tensor:
    """w · x / sqrt(mean(x²) + eps), computed in float32 and cast back before the weight (as HF)."""
    weight, eps = norm
    if x.dtype == torch.float32:
        return F.rms_norm(x, x.shape[-1:], weight, eps)
    return weight * F.rms_norm(x.float(), x.shape[-1:], None, eps).to(x.dtype)


def _rotate(x: Tensor, cos: Tensor, sin_signed: Tensor) -> Tensor:
    """Rotary embedding x·cos + rotate_half(x)·sin, rotate_half([a, b]) = [−b, a]; written as
    x·cos + [b, a]·[−sin₁, sin₂] (one roll instead of chunk, neg and cat; the same products)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin_signed


def sliding_window(model: nn.Module) -> tuple[int | None, bool]:
    """(window, mixed): the sliding window of a model with sliding-window attention layers, and
    whether it also has full-attention ones (Gemma-3: 5 sliding to 1 full); (None, False) without."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    window, types = getattr(text, "sliding_window", None), getattr(text, "layer_types", None)
    if not window or getattr(text, "use_sliding_window", True) is False:
        return None, False
    if types is None:
        return int(window), False
    return (int(window), len(set(types)) > 1) if "sliding_attention" in types else (None, False)


def slot_masks(
    model: nn.Module, mask: Tensor, pos: Tensor, start: int, end: int
) -> Tensor | dict[str, Tensor]:
    """The `attention_mask` of a sliding-window `model(...)` fed slots [start, end): additive 4D
    masks [B, 1, end − start, end], slot j seeing slot i if i <= j and i holds text and, in sliding
    layers, pos_j − pos_i < window (a dict per layer type where full and sliding layers mix).
    Windows count POSITIONS, so holes that rejected drafts leave in a row do not shrink them
    (transformers' masks count slots; left padding alone moves nothing apart)."""
    window, mixed = sliding_window(model)
    slots = torch.arange(end, device=mask.device)
    seen = (slots[None, :] <= slots[start:end, None]) & mask[:, None, :end].bool()  # [B, q, kv]
    near = seen & ((pos[:, start:end, None] - pos[:, None, :end]) < window)
    full, sliding = (
        torch.zeros(m.shape, dtype=model.dtype, device=mask.device).masked_fill_(
            ~m, torch.finfo(model.dtype).min
        )[:, None]
        for m in (seen, near)
    )
    return {"full_attention": full, "sliding_attention": sliding} if mixed else sliding


class Plan:
    """How one model is called, worked out once per model (again if `_plan_key` changes): general
    or direct, and what the direct way needs."""

    def __init__(self, model: nn.Module, direct: bool) -> None:
        self.key = _plan_key(model)
        self.keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.direct = direct
        self.path = "direct" if direct else "hf"
        self.reason = ""  # why this path (set by `plan`)
        self.window = sliding_window(model)[0]
        attn = getattr(model.config, "_attn_implementation", None) or ""
        if self.window and attn.startswith("flash"):
            raise ValueError(
                f"{_name(model)} has sliding-window layers and {attn}, which takes no 4D masks: "
                "set pair.attn_implementation=sdpa (or eager)"
            )
        if not direct:
            return
        # Looked up once: attribute access on HF modules and configs is slow next to a tiny layer.
        config, base = model.config, model.base_model
        self.embed, self.rope = base.embed_tokens, base.rotary_emb
        self.norm = (base.norm.weight, base.norm.variance_epsilon)
        # Plain embedding and LM head as tensors (a module call costs more than the lookup or the
        # product here); subclasses (quantized layers, adapters) and hooked ones (the bench times
        # forwards with hooks on them) are called as modules.
        head = model.get_output_embeddings()
        params = list(model.parameters())
        size = sum(p.numel() * p.element_size() for p in params)
        # Copies go stale when a weight changes in place: `_plan_key` sees that through version
        # counters, which inference tensors (a model built under inference_mode) do not keep.
        copy = self.embed.weight.device.type == "cpu" and size <= CPU_COPY_BYTES
        copy = copy and not any(p.is_inference() for p in params)
        plain = lambda m, kind: type(m) is kind and not (m._forward_hooks or m._forward_pre_hooks)  # noqa: E731
        self.embed_weight = self.embed.weight if plain(self.embed, nn.Embedding) else None
        self.head = (_weight_t(head.weight, copy), head.bias) if plain(head, nn.Linear) else head
        self.layers = [_Layer.of(layer, copy) for layer in list(base.layers)[: config.num_hidden_layers]]
        attn = base.layers[0].self_attn
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.dtype, self.device = self.embed.weight.dtype, self.embed.weight.device
        self.zero = torch.zeros((), dtype=self.dtype, device=self.device)
        self.min = torch.full((), torch.finfo(self.dtype).min, dtype=self.dtype, device=self.device)
        self.causal = torch.ones(0, 0, dtype=torch.bool, device=self.device)  # grown on demand
        rope_type = getattr(self.rope, "rope_type", None)  # tables unless the rotary rescales with length
        self.table = isinstance(rope_type, str) and "dynamic" not in rope_type and rope_type != "longrope"
        self.cos = self.sin = torch.zeros(0, device=self.device)
        half = self.head_dim // 2
        self.sign = torch.cat([-torch.ones(half), torch.ones(self.head_dim - half)]).to(
            self.device, self.dtype
        )

    def new_cache(self, batch: int, slots: int) -> Tensor:
        """[layers, 2 (k, v), batch, kv heads, slots, head dim], zeros (never-written slots are
        masked, and 0 · garbage could be NaN)."""
        shape = (len(self.layers), 2, batch, self.kv_heads, slots, self.head_dim)
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    def run(
        self,
        ids: Tensor,
        mask: Tensor,
        pos: Tensor,
        start: int,
        end: int,
        keep: int,
        kv: Tensor,
        states: int = 0,
    ):
        """Slots [start, end) through the decoder (k, v written into `kv` at [start, end)); logits
        of the last `keep` slots, final hidden states of the last max(keep, `states`)."""
        b, s = ids.shape
        h = self.embed(ids) if self.embed_weight is None else F.embedding(ids, self.embed_weight)
        h = h.view(b * s, -1)  # 2D hidden states: every projection is one mm
        cos, sin = (t.unsqueeze(1) for t in self.rotary(h, pos, end))  # [b, 1, s, head dim]
        mask = self.additive_mask(mask, start, end)
        groups = self.heads // self.kv_heads
        # grouped-query attention, each kv head serving `groups` query heads (as HF's repeat_kv): the
        # groups folded into the query axis while that is the smaller copy (the mask's rows, once per
        # call, against every layer's keys and values `groups` times over)
        fold = groups > 1 and groups * s <= 2 * self.heads * self.head_dim
        if fold and s > 1:  # row g·s + i of a folded head is query i of its g-th group
            mask = mask[:, :, None].expand(b, 1, groups, s, end).reshape(b, 1, groups * s, end)
        for layer, (k_cache, v_cache) in zip(self.layers, kv, strict=True):
            x = _rms_norm(h, layer.ln1)
            q = _linear(x, layer.q).view(b, s, -1, self.head_dim)
            k = _linear(x, layer.k).view(b, s, -1, self.head_dim)
            if layer.q_norm is not None:  # Qwen3: RMS norm of each head before the rotation
                q, k = _rms_norm(q, layer.q_norm), _rms_norm(k, layer.k_norm)
            q, k = _rotate(torch.cat([q, k], 2).transpose(1, 2), cos, sin).split(
                (self.heads, self.kv_heads), 1
            )
            k_cache[:, :, start:end] = k
            v_cache[:, :, start:end] = _linear(x, layer.v).view(b, s, -1, self.head_dim).transpose(1, 2)
            keys, values = k_cache[:, :, :end], v_cache[:, :, :end]
            if fold:  # [b, heads, s, d] as [b, kv heads, groups·s, d]: no copy of the cache
                q = q.reshape(b, self.kv_heads, groups * s, self.head_dim)
            elif groups > 1:  # each kv head's keys and values copied `groups` times
                keys, values = (
                    t[:, :, None]
                    .expand(b, self.kv_heads, groups, end, self.head_dim)
                    .reshape(b, self.heads, end, -1)
                    for t in (keys, values)
                )
            # softmax(q kᵀ · scaling + mask) v
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling)
            if fold:
                o = o.reshape(b, self.heads, s, self.head_dim)
            h = _linear(o.transpose(1, 2).reshape(b * s, -1), layer.o, residual=h)
            x = _rms_norm(h, layer.ln2)
            h = _linear(
                layer.act(_linear(x, layer.gate)) * _linear(x, layer.up), layer.down, residual=h
            )  # gated MLP
        h = _rms_norm(h.view(b, s, -1)[:, -max(keep, states) :], self.norm)  # a norm per slot
        return self.logits(h[:, h.shape[1] - keep :]), h

    def logits(self, h: Tensor) -> Tensor:
        """The LM head on final hidden states [b, n, H] -> [b, n, V]."""
        if isinstance(self.head, nn.Module):
            return self.head(h)
        b, n = h.shape[:2]
        return _linear(h.reshape(b * n, -1), self.head).view(b, n, -1)

    def rotary(self, h: Tensor, pos: Tensor, end: int) -> tuple[Tensor, Tensor]:
        """cos and sin with its first half negated (see `_rotate`) at each slot's position."""
        if not self.table:
            cos, sin = self.rope(h, position_ids=pos)
            return cos, sin * self.sign
        if self.cos.shape[0] < end:  # a position never exceeds its slot index
            n = max(end, 2 * self.cos.shape[0])
            cos, sin = self.rope(h[:1, :1], position_ids=torch.arange(n, device=h.device)[None])
            self.cos, self.sin = cos[0], sin[0] * self.sign
        return self.cos[pos], self.sin[pos]

    def additive_mask(self, mask: Tensor, start: int, end: int) -> Tensor:
        """[b, 1, end − start, end]: slot i reads slot j <= i if j holds text (0), else min."""
        allowed = mask[:, None, None, :end].bool()
        if end - start > 1:  # a single new slot reads every earlier slot that holds text
            if self.causal.shape[0] < end:
                n = max(end, 2 * self.causal.shape[0])
                self.causal = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril_()
            allowed = allowed & self.causal[start:end, :end]
        return torch.where(allowed, self.zero, self.min)


_plans: weakref.WeakKeyDictionary[nn.Module, Plan] = weakref.WeakKeyDictionary()
_requested: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
_told: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()  # the path last logged


def use_forward(model: nn.Module, path: str = "auto") -> None:
    """Ask for `model`'s forward path: "auto" (direct on CPU when the check passes, else hf),
    "hf" (always `model(...)`) or "direct" (the direct path, or a ValueError at the first call)."""
    if path not in FORWARD_PATHS:
        raise ValueError(f"forward must be one of {FORWARD_PATHS}, got {path!r}")
    if _requested.get(model, "auto") != path:
        _requested[model] = path
        _plans.pop(model, None)


def forward_path(model: nn.Module) -> str:
    """The path the engine takes for `model` ("direct" or "hf"), planning it if need be."""
    return plan(model).path


def _plan_key(model: nn.Module) -> tuple:
    """What the plan depends on: device, dtype, attention implementation, the hooks on the modules
    and the global ones (a hook the direct way would skip), which tensors are the weights (a
    parameter replaced) and their version counters (a weight updated in place: the plan may hold
    copies, see `_weight_t`; an edit through `.data` bypasses the counter and is not seen).
    One walk over the module tree (`model.modules()` and `model.parameters()` each walk it with
    generators and sets: 0.3 ms on the toy target, against 0.1 ms here), once per generation."""
    weight = model.get_input_embeddings().weight
    # hooks registered for every module (`torch.nn.modules.module.register_module_forward_hook`) too
    hooks = len(torch_module._global_forward_hooks) + len(torch_module._global_forward_pre_hooks)
    tensors, stack = [], [model]
    while stack:
        m = stack.pop()
        hooks += len(m._forward_hooks) + len(m._forward_pre_hooks)
        params = [p for p in m._parameters.values() if p is not None]
        tensors += [(p.data_ptr(), -1 if p.is_inference() else p._version) for p in params]
        stack += [c for c in m._modules.values() if c is not None]
    attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return weight.device, _compute_dtype(weight), attn, hooks, hash(tuple(tensors))


def _compute_dtype(weight: Tensor) -> torch.dtype:
    """The dtype the matmuls run in: the weights', or autocast's where it is on (Lightning's
    bf16-mixed: fp32 weights, bf16 products), so that a plan made under autocast (the hf path) is
    made again without it, and the other way round."""
    kind = weight.device.type
    try:
        if weight.dtype == torch.float32 and torch.is_autocast_enabled(kind):
            return torch.get_autocast_dtype(kind)
    except RuntimeError:  # a device autocast does not know (meta)
        pass
    return weight.dtype


def plan(model: nn.Module) -> Plan:
    """The model's plan, chosen (and logged) once and cached (weakly) per model."""
    found = _plans.get(model)
    if found is None or found.key != _plan_key(model):
        found = _plans[model] = _choose(model)
    return found


def _name(model: nn.Module) -> str:
    return getattr(getattr(model, "config", None), "name_or_path", None) or type(model).__name__


def _choose(model: nn.Module) -> Plan:
    """The plan `use_forward` asked for, with its reason logged."""
    want = _requested.get(model, "auto")
    device = next(model.parameters()).device
    chosen, level = None, logging.INFO
    if want == "hf":
        reason = "asked for (forward=hf)"
    elif want == "auto" and device.type != "cpu":
        reason = (
            f"forward=auto takes the direct path on CPU only (not yet checked for exactness on "
            f"{device.type}; forward=direct asks for it)"
        )
    elif want == "auto" and (weight := model.get_input_embeddings().weight).dtype != _compute_dtype(weight):
        # The direct path's cache is in the weights' dtype, converted at every layer and step: measured
        # 1.6–1.9× the time of model(...) sampling 16 XSum prompts from SmolLM2 under bf16 autocast on CPU.
        reason = "forward=auto does not take the direct path under autocast (it runs in the weights' dtype)"
    else:
        chosen, reason, surprise = _direct_plan(model)
        if chosen is None and want == "direct":
            raise ValueError(
                f"forward=direct was asked for {_name(model)}, but {reason}; use forward=auto or hf"
            )
        level = logging.WARNING if surprise else logging.INFO
    chosen = chosen or Plan(model, direct=False)
    chosen.reason = reason
    # once per model at INFO, and again when the path or its level changes; a model checked again as its
    # weights change (distill trains the draft) with the same outcome says so at DEBUG only
    said = f"{chosen.path}: {logging.getLevelName(level)}"
    if _told.get(model) == said and level == logging.INFO:
        level = logging.DEBUG
    _told[model] = said
    log.log(level, "%s: %s forward path: %s", _name(model), chosen.path, reason)
    return chosen


class SlotModel:
    """One model, its KV cache over the slot layout, and the forward on a slot range."""

    def __init__(self, model: nn.Module, vocab: int, hidden: bool, how: Plan | None = None) -> None:
        self.model, self.vocab, self.hidden = model, vocab, hidden
        self.plan = how or plan(model)
        # Sliding-window models (Gemma-3, Mistral, ...) get a cache of full layers and masks of our
        # own (`slot_masks`): transformers' sliding layers keep only the last window − 1 SLOTS, too
        # few once rows have holes, and cannot give back states for rejected drafts.
        self.cache: DynamicCache | Tensor | None = None
        if not self.plan.direct:
            self.cache = DynamicCache() if self.plan.window else DynamicCache(config=model.config)
        self.length, self.calls = 0, 0  # slots in the cache, forward calls (the caller counts them)
        # each call's row maxima, on the device: finite or no distribution (stats)
        self.maxima: list[Tensor] = []

    def forward(self, ids: Tensor, mask: Tensor, pos: Tensor, end: int, keep: int = 1, states: int = 0):
        """Feed slots [self.length, end); return float32 logits of the last `keep` slots and final
        hidden states (after the final norm) of the last `keep` if the model was made with `hidden`,
        or of the last `states` (at most the slots fed) whenever `states` > 0, on either path. The
        logits are `head` of those states (the same computation; the direct path shares the norm)."""
        start, how = self.length, self.plan
        if how.direct:
            if self.cache is None or self.cache.shape[4] < end:  # grow by doubling; keep what is there
                grown = how.new_cache(
                    ids.shape[0], max(end, 2 * (0 if self.cache is None else self.cache.shape[4]))
                )
                if self.cache is not None:
                    grown[:, :, :, :, :start] = self.cache[:, :, :, :, :start]
                self.cache = grown
            logits, hidden = how.run(
                ids[:, start:end], mask, pos[:, start:end], start, end, keep, self.cache, states
            )
            hidden = hidden[:, hidden.shape[1] - (states or keep) :]
        else:
            attention = slot_masks(self.model, mask, pos, start, end) if how.window else mask[:, :end]
            # `states`: the base model's output (its final hidden states at every fed slot) caught
            # by a hook held for this call only (output_hidden_states would leave output-capture
            # hooks on every layer, which slow each later call)
            caught: list[Tensor] = []
            catch = (
                self.model.base_model.register_forward_hook(
                    lambda module, args, output: caught.append(
                        getattr(output, "last_hidden_state", output[0])
                    )
                )
                if states
                else None
            )
            try:
                out = self.model(
                    input_ids=ids[:, start:end],
                    attention_mask=attention,
                    position_ids=pos[:, start:end],
                    **{_cache_name(self.model): self.cache},
                    use_cache=True,
                    output_hidden_states=self.hidden,
                    **({"logits_to_keep": keep} if how.keep else {}),
                )
            finally:
                if catch is not None:
                    catch.remove()
            logits = out.logits[:, -keep:]
            hidden = out.hidden_states[-1][:, -keep:] if self.hidden else None
            if states:
                hidden = caught[-1][:, -states:]
        self.length, logits = end, logits[..., : self.vocab].float()
        self.maxima.append(
            logits.amax(-1)
        )  # NaN, +inf or −inf (all −inf): no distribution (one op, read at the end)
        return logits, (hidden if self.hidden or states else None)

    def prefill(self, ids: Tensor, mask: Tensor, pos: Tensor, end: int, prompt_cache: PromptCache) -> None:
        """Read slots [0, `end`) (a prompt but its last token) in a call of their own, into an empty
        cache; their KV is copied from `prompt_cache` when this model already read these slots, and kept
        there otherwise. Nothing is returned or counted as a call (no token comes of it), so a hit
        and a miss leave this model in the same state."""
        if self.length or end <= 0:
            raise ValueError(f"prefill reads a prompt into an empty cache (length {self.length}, end {end})")
        key = (self.plan.path, *prompt_cache.key(self.model, ids[:, :end], mask[:, :end], pos[:, :end]))
        kept = prompt_cache.get(key)
        if kept is not None:
            self.cache, self.length = kept, end
            return
        start = time.perf_counter()
        self.forward(ids, mask, pos, end, keep=1)
        prompt_cache.seconds += time.perf_counter() - start  # host time (on a GPU, launches: no sync here)
        self.maxima.pop()  # that logit row is no token's law (a hit never sees it)
        prompt_cache.put(key, self.cache, self.model)

    def head(self, hidden: Tensor) -> Tensor:
        """float32 logits [b, n, V] of final hidden states [b, n, H] as `forward` returns them: the
        LM head (the direct path's own copy; on the hf path the model's output embeddings, with
        Gemma's final soft cap where the config sets one). A model whose causal-LM forward does
        more than that to its logits is not covered: compare with `forward`'s logits first."""
        if self.plan.direct:
            logits = self.plan.logits(hidden)
        else:
            logits = self.model.get_output_embeddings()(hidden)
            config = self.model.config
            text = config.get_text_config() if hasattr(config, "get_text_config") else config
            if cap := getattr(text, "final_logit_softcapping", None):
                logits = torch.tanh(logits / cap) * cap
        return logits[..., : self.vocab].float()

    def crop(self, length: int) -> None:
        """Forget slots from `length` on (the direct cache just overwrites them later)."""
        if length < self.length and not self.plan.direct:
            self.cache.crop(length - self.length)
        self.length = min(self.length, length)

    def select(self, rows: Tensor) -> None:
        """Keep only these batch rows."""
        if not self.plan.direct:
            self.cache.batch_select_indices(rows)
        elif self.cache is not None:
            self.cache = self.cache.index_select(2, rows)


@torch.no_grad()
def _direct_plan(model: nn.Module) -> tuple[Plan | None, str, bool]:
    """(the direct plan, why, whether that is a surprise): the plan if the direct way may run
    `model` (a known architecture, SDPA or eager attention, no sliding windows, and the same
    outputs as `model(...)` on a ragged batch with a hole), else None and the reason; a surprise
    is a known architecture whose direct forward raised or disagreed. The plan returned is the
    one checked, so it is built only once."""
    if (why := _not_direct(model)) is not None:
        return None, why, False
    device = next(model.parameters()).device
    ids, mask, pos = _check_batch(model, device)
    # Layers that round their inputs (the int8 layers of models/quantize.py) compute their float product
    # while the check runs: rounding to 8 bits turns the ulps by which model(...) and the direct way
    # reach a value by float sums in other orders into whole rounding steps that grow over the layers
    # (Qwen2.5-Coder-1.5B in int8: 0.4 of the values' scale), so two correct ways would disagree. What
    # the check tests is the decoder's maths around the projections; an int8 projection is one
    # function on both ways (`direct_projection`, the module's own call).
    rounding = [m for m in model.modules() if getattr(m, "rounds_inputs", False)]
    try:
        with contextlib.ExitStack() as floats:
            for m in rounding:
                floats.enter_context(m.float_calls())
            direct, pairs = _both_ways(model, ids, mask, pos)
    except Exception as e:  # any surprise in the model's internals: the general way, and say why
        return None, f"the direct forward raised {type(e).__name__}: {e}", True
    # Reassociated sums move float results by ulps that grow with depth and the values' scale: each gap
    # is measured against the reference's largest finite value (at least 1). fp32: 5e-5 of it (SmolLM2
    # 135M, 30 layers: 1.2e-5 measured). Half: 0.1 of it. bf16 keeps 8 bits: on SmolLM2 in bf16 the two
    # ways differ by 0.02–0.04 of the scale, and each differs from the fp32 result by as much (0.03–0.09:
    # rounding, not a fault). A real difference (a hook shifting a layer, a wrong rotary) moves the
    # values by about their own scale; −inf logits (a restricted draft vocabulary) agree with −inf, NaN never.
    tol = 5e-5 if _compute_dtype(model.get_input_embeddings().weight) == torch.float32 else 0.1
    gaps = [
        (
            float(torch.where(a == b, 0.0, a - b).abs().max()),
            max(1.0, float(b.nan_to_num(0, 0, 0).abs().max())),
        )
        for a, b in ((x.float(), y.float()) for x, y in pairs)
    ]
    gap, rel = max(g for g, _ in gaps), max(g / scale for g, scale in gaps)
    if not rel <= tol:  # NaN fails too
        return (
            None,
            (
                f"the direct forward differs from model(...) by up to {gap:.3g} ({rel:.2g} of the values' "
                f"scale, tolerance {tol:g})"
            ),
            True,
        )
    kind = model.config.model_type
    floats = f" with its {len(rounding)} int8 layers in float" if rounding else ""
    return (
        direct.plan,
        (
            f"{kind} on {device.type}, checked against model(...){floats}: largest gap {gap:.2g}, "
            f"{rel:.2g} of the values' scale (tolerance {tol:g})"
        ),
        False,
    )


def _not_direct(model: nn.Module) -> str | None:
    """Why the direct way cannot run `model` from its config and modules alone, or None where it may
    (then `_both_ways` checks it)."""
    config = getattr(model, "config", None)
    base = getattr(model, "base_model", None)
    kind, attn = getattr(config, "model_type", None), getattr(config, "_attn_implementation", None)
    if kind not in DIRECT_TYPES:
        return f"model type {kind!r} is not one of {DIRECT_TYPES}"
    if attn not in ("sdpa", "eager"):
        return f"attention implementation {attn!r} is not sdpa or eager"
    if getattr(config, "sliding_window", None) is not None or any(
        t != "full_attention" for t in getattr(config, "layer_types", None) or ()
    ):
        return "it has sliding-window layers"
    if not all(hasattr(base, a) for a in ("embed_tokens", "rotary_emb", "layers", "norm")) or not isinstance(
        model.get_output_embeddings(), nn.Linear
    ):
        return "its modules are not laid out as the Llama family's"
    return None


def _check_batch(model: nn.Module, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """The batch both ways decode to compare: (ids, mask, pos) of two rows of six slots."""
    vocab = model.get_input_embeddings().weight.shape[0]
    # Ordinary tokens, spread over the vocabulary: on control tokens, in half precision, SmolLM2's
    # model(...) itself moves 43 from its fp32 result, the direct way 19.
    ids = ordinary_ids(vocab, 12, device).view(2, 6)
    mask = torch.ones(2, 6, dtype=torch.long, device=device)
    mask[0, :2] = 0  # left padding
    mask[1, 4] = 0  # a hole, as a rejected draft leaves
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    return ids, mask, pos


def _both_ways(model: nn.Module, ids: Tensor, mask: Tensor, pos: Tensor) -> tuple[SlotModel, list]:
    """The direct way's `SlotModel`, and (general, direct) pairs of logits and final hidden states over
    two calls on the batch: the prompt's first half, then the rest."""
    config, base = model.config, model.base_model
    vocab = model.get_input_embeddings().weight.shape[0]
    # The general way: logits from model(...), final hidden states from the base model (asking
    # model(...) for hidden states would leave output-capture hooks on every layer, which slow
    # each later call).
    general, cache = SlotModel(model, vocab, False, Plan(model, False)), DynamicCache(config=config)
    direct = SlotModel(model, vocab, True, Plan(model, True))
    pairs = []
    for start, end, keep in ((0, 3, 1), (3, 6, 3)):
        logits, _ = general.forward(ids, mask, pos, end, keep)
        hidden = base(
            input_ids=ids[:, start:end],
            attention_mask=mask[:, :end],
            position_ids=pos[:, start:end],
            **{_cache_name(base): cache},
            use_cache=True,
        ).last_hidden_state[:, -keep:]
        pairs += list(zip((logits, hidden), direct.forward(ids, mask, pos, end, keep), strict=True))
    return direct, pairs
