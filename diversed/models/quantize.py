"""int8 decoding steps for a draft on CPU: the pair option `draft_quantize` ("none" | "int8").

A draft's decoding step at batch 1 reads every weight once, so on a CPU its cost (and c, the draft
step over the target's) follows its bytes. `quantize_draft(model, "int8", tokenizer)` replaces every
plain `nn.Linear` of the draft, its output head included, by an `Int8Linear`: a call that feeds at
most `SHORT_ROWS` rows (decoding steps, and the few tokens a draft catches up on after a
verification) runs torch's dynamic-quantized kernel (fbgemm/x86; qnnpack on ARM) on int8 weights,
one scale per output channel, its input rounded to 8 bits on one scale per row (each token its
own); a longer call (a prompt pass) runs the float weights as they are. Why:
- Measured on 2 cores for SmolLM2's first 15 layers' projections at batch 1: fp32 16.5 ms, bf16 9.7,
  int8 3.4 (BENCHMARKS.md "An int8 draft"). torchao's CPU int8 configs measured slower than fp32 here
  (36 and 53 ms), so torch's own kernel is used (torch marks its quantized tensors deprecated; the
  warnings at conversion are silenced).
- One scale for a whole prompt pass ruins it: a few tokens carry activations 20–70× the median at
  the MLP's down projection (SmolLM2 at positions 0, 13, 101, 187...), and on their scale every
  other token keeps one or two levels. On 4 XSum prompts (300 tokens teacher-forced) the draft's law
  moved by a mean TV of 0.38 from the float draft's with every call int8, 0.015 with int8 weights
  alone; at one token per call (a decoding step at batch 1) the input's scale is that token's own.
  A prompt pass is compute-bound anyway, where int8 weights save little.
- One range per row, not per call: torch's kernel rounds its input on one range for the whole call,
  so with several rows (batch > 1, or the tokens a draft catches up on) each row is first mapped
  onto [−1, 1] and the output mapped back (`int8_linear`); one row goes to the kernel as it is. With
  one range per call a step's rows at batch 8 shared one rounding, set by the loudest of them: a
  row's q depended on which other rows were in its batch (padding included), and XSum's α measured
  at batch 8 paid for it.
- Smoothed (SmoothQuant, Xiao et al. 2023): within a token a few input channels are far louder than
  the rest, and on a row's one scale the quiet channels keep few levels. Each layer's input channel
  j is divided by s_j and the weights' column j multiplied by it, W x = (W diag(s)) (x / s), with
      s_j = max|x_j|^a / max_o |W_oj|^(1−a),   a = `SMOOTHING` = 0.5,
  so the input's and the weights' ranges share the outliers. max|x_j| is read from one float
  forward of the draft over `CALIBRATION` (a fixed passage of prose, a worked sum and code, in the
  pair's own tokenizer; ids spread over the vocabulary where no tokenizer is given): the same for
  every run, no task data. On SmolLM2's 15-layer draft (exact 1 − TV to the target at 16 held-out
  XSum / GSM8K train samples' completions) float 0.475 / 0.518, int8 unsmoothed 0.470 / 0.514,
  smoothed (head int8 too) 0.472 / 0.516; a = 0.3 measured worse (BENCHMARKS.md "The 17-layer draft
  in int8").
- The head too: SmolLM2's draft's 16,384-id head took 5.9 ms of float product per step and 0.7 ms in
  int8 (beside another job); its rounding costs the draft's 1 − TV about 0.001 (the same
  measurement). A restricted head (`draft_vocab.py`) keeps q = 0 exactly outside its support: only
  its K-row product is int8.

The engine's direct forward path applies an `Int8Linear` through `Int8Linear.direct_projection`
(no module call: 11 µs each, a fifth of an int8 projection of a small model); the hf path calls the
module; both compute the same.

What int8 changes, and so what a result records (`pair.draft_quantize` is in the pair's identity,
as `scheme("int8")`, which names the smoothing): q itself at decoding steps (a row's q does not
depend on the other rows of its batch, padding included). Verification stays exact whatever q is:
lossless decoding still reproduces the target's law. It does not quantize a target, train a
quantized draft (distill refuses the option: it trains the float draft, which is quantized when
loaded for decoding), or run on a GPU (there, bf16 is the cheap dtype). A bf16 model (`dtype: native` on
a CPU with bf16 instructions) keeps its bf16 float weights for long calls; its int8 products take
their rows cast to float32 and give them back in bf16.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from diversed.decoding.draft_vocab import DraftVocabHead
from diversed.decoding.inputs import device_of, ordinary_ids
from diversed.errors import ConfigError

log = logging.getLogger(__name__)
DRAFT_QUANTIZE = ("none", "int8")
SHORT_ROWS = 64  # a call feeding at most this many rows (batch × slots) runs int8; a longer one float
SMOOTHING = 0.5  # SmoothQuant's migration strength a (its paper's default; 0.3 measured worse)
CALIBRATION_TOKENS = 512  # at most this many ids of CALIBRATION (and no more than the model's positions)

# The calibration passage (written for this project): news prose, a worked word problem and code, the
# kinds of text the tasks read and write. Its input maxima set the smoothing; no task data is read.
CALIBRATION = """The city council voted on Tuesday to close the old bridge across the river for repairs, a \
decision that officials said would add about twenty minutes to many commuters' journeys until the work \
ends next spring. "We know this is inconvenient," the mayor told reporters, "but the engineers were clear \
that we could not wait another winter." Local businesses on both banks warned that trade could fall, and \
the council agreed to review the plans again in March.

Question: A baker makes 24 muffins in the morning and 3 times as many in the afternoon. She sells 70 of \
them and gives 8 to a neighbour. How many muffins are left?
Answer: In the afternoon she makes 24 * 3 = 72 muffins, so 24 + 72 = 96 in all. She sells or gives away \
70 + 8 = 78, so 96 - 78 = 18 muffins are left. The answer is 18.

def count_vowels(text: str) -> int:
    \"\"\"Return how many vowels the string contains.\"\"\"
    return sum(1 for ch in text.lower() if ch in "aeiou")

assert count_vowels("Hello, World!") == 3
"""


class Int8Linear(nn.Linear):
    """y = x Wᵀ + b. Calls of at most `short` rows: the smoothed weights W' = W diag(s) as int8 per
    output channel, W' ≈ Ŵ = s_o · W8 (s_o = max_i |W'_oi| / 127, W8 = round(W' / s_o)), each row's
    smoothed input x / s rounded on its own range (`int8_linear`: torch's
    `quantized.linear_dynamic`, its reduced range as torch's own dynamic linear uses); longer calls:
    the float W itself. s from `x_max`, the input's per-channel maxima (`smoothing`); none given:
    s = 1. `weight` and `bias` stay the float ones (frozen); the bias is added after the kernel. An
    `nn.Linear` to whoever asks (a model's output head must be one), whose call is this."""

    # rounds its input: float paths that differ in ulps give outputs a rounding step apart
    # (decoding/forward.py checks its direct path against model(...) on unpadded rows for such models)
    rounds_inputs = True

    def __init__(self, linear: nn.Linear, short: int = SHORT_ROWS, x_max: Tensor | None = None) -> None:
        nn.Module.__init__(self)  # nn.Linear's own would allocate new weights
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias, self.short = linear.weight, linear.bias, int(short)
        self.long_product = None  # longer calls' float product: F.linear, or what models/packed.py sets
        w = linear.weight.detach().float()
        self.inv_smooth = None  # s = 1
        if x_max is not None:
            smooth = smoothing(x_max.to(w.device), w)
            self.inv_smooth = 1 / smooth  # float32: the int8 product's input is (bf16 models: cast to it)
            w = w * smooth  # W diag(s)
        scale = (w.abs().amax(1) / 127).clamp_min(1e-12).double()
        with warnings.catch_warnings():  # torch's deprecation notice for its quantized tensors
            warnings.simplefilter("ignore")
            zero = torch.zeros_like(scale, dtype=torch.long)
            w8 = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(w8, None)  # (the bias after the rescaling)
            self.w_sum = w8.dequantize().sum(1)  # Σ_i Ŵ_oi, [out]: a row's middle through the weights

    def forward(self, x: Tensor) -> Tensor:
        return int8_linear(
            x, self.packed, self.weight, self.bias, self.short, self.w_sum, self.inv_smooth, self.long_product
        )

    def direct_projection(self):
        """The call itself as a function of x (what the direct forward path applies)."""
        return functools.partial(
            int8_linear,
            packed=self.packed,
            weight=self.weight,
            bias=self.bias,
            short=self.short,
            w_sum=self.w_sum,
            inv_smooth=self.inv_smooth,
            long=self.long_product,
        )

    def extra_repr(self) -> str:
        smoothed = ", smoothed" if self.inv_smooth is not None else ""
        shape = f"in_features={self.in_features}, out_features={self.out_features}"
        return f"{shape}, int8 to {self.short} rows{smoothed}"


def smoothing(x_max: Tensor, weight: Tensor, strength: float = SMOOTHING) -> Tensor:
    """SmoothQuant's per-input-channel factors s_j = max|x_j|^a / max_o |W_oj|^(1−a) (a = `strength`),
    [in]. Maxima under 1 % of their median over channels count as that: a channel the calibration
    left quiet must not get a vanishing s (its input divided by s would set the row's range)."""
    x = x_max.float()
    w = weight.detach().float().abs().amax(0)
    x = torch.maximum(x, 0.01 * x.median()).clamp_min(1e-5)
    w = torch.maximum(w, 0.01 * w.median()).clamp_min(1e-5)
    return x.pow(strength) / w.pow(1 - strength)


def int8_linear(
    x: Tensor,
    packed: object,
    weight: Tensor,
    bias: Tensor | None,
    short: int,
    w_sum: Tensor,
    inv_smooth: Tensor | None = None,
    long: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """`Int8Linear`'s call. Where x holds at most `short` rows, x / s (`inv_smooth`, the smoothing;
    None: s = 1) through torch's int8 kernel on the packed (smoothed) weights: one row (a decoding
    step at batch 1) as it is, the kernel rounding it on its own range;
    several rows each on its own range too, though the kernel takes one range per call: each row
    x_r = c_r + h_r·x'_r mapped onto [−1, 1] first (c_r, h_r its range's middle and half-width), so
        y_r = h_r · kernel(x'_r) + c_r · Σ_i Ŵ_oi  (+ b),   Ŵ the int8 weights dequantized (`w_sum`),
    which is Ŵ applied to x_r rounded to 127 levels over its own [min, max] (no other row's range in
    it). Longer calls (a prompt pass): x Wᵀ (+ b) with the float weights, by `long` where given (the
    same product on oneDNN's packed copy, models/packed.py), else `F.linear`."""
    rows = x.numel() // x.shape[-1]
    if rows > short:
        return F.linear(x, weight, bias) if long is None else long(x)
    dtype, x = x.dtype, x.float()  # the kernel takes float32 (a bf16 model's rows cast to it and back)
    if inv_smooth is not None:
        x = x * inv_smooth
    if rows == 1:
        y = torch.ops.quantized.linear_dynamic(x, packed, True)
    else:
        lo, hi = torch.aminmax(x, dim=-1, keepdim=True)
        c, h = (hi + lo) / 2, ((hi - lo) / 2).clamp_min(torch.finfo(x.dtype).tiny)
        y = torch.ops.quantized.linear_dynamic((x - c) / h, packed, True).mul_(h).addcmul_(c, w_sum)
    return (y if bias is None else y.add_(bias)).to(dtype)


def quantized(model: nn.Module) -> str:
    """What `quantize_draft` made of `model`: "int8" if it has `Int8Linear` layers, else "none"."""
    return "int8" if any(isinstance(m, Int8Linear) for m in model.modules()) else "none"


def check_quantize(
    how: str, device: torch.device, dtype: object, setting: str = "pair.draft_quantize="
) -> None:
    """Refuse a `draft_quantize` that cannot run here, before any weights load; `setting` is how the
    messages name it with its value (a CLI's "--draft-quantize ")."""
    if how not in DRAFT_QUANTIZE:
        raise ConfigError(f"{setting.rstrip('= ')} must be one of {DRAFT_QUANTIZE}, got {how!r}")
    if how == "none":
        return
    if device.type != "cpu":
        raise ConfigError(
            f"{setting}{how} runs on CPU only (torch's dynamic int8 kernels), the pair is on "
            f"{device}: set {setting}none (on a GPU the cheap dtype is pair.dtype=bfloat16)"
        )
    if dtype not in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        raise ConfigError(
            f"{setting}{how} takes float32 or bfloat16 models, the pair's dtype is {name}: set "
            "pair.dtype=float32 (auto is float32 on CPU) or native"
        )
    if torch.backends.quantized.engine == "none":
        raise ConfigError(
            f"{setting}{how}: this torch build has no quantized engine "
            f"(supported: {torch.backends.quantized.supported_engines}); set {setting}none"
        )


def scheme(how: str) -> str:
    """What a `draft_quantize` setting computes, as results record it (the pair's identity): "none",
    or the int8 scheme with its smoothing (runs from before the smoothing said "int8")."""
    return how if how == "none" else f"{how}, SmoothQuant a={SMOOTHING} on the fixed passage, head {how}"


def calibration_ids(model: nn.Module, tokenizer: Any | None) -> Tensor:
    """[1, n] ids the smoothing's maxima are read on: `CALIBRATION` in `tokenizer` (its special
    tokens as it adds them), else 64 ids spread over the vocabulary; at most `CALIBRATION_TOKENS` and
    the model's positions."""
    positions = getattr(model.config, "max_position_embeddings", None) or CALIBRATION_TOKENS
    limit = min(CALIBRATION_TOKENS, positions)
    if tokenizer is not None:
        ids = torch.as_tensor(tokenizer(CALIBRATION).input_ids, dtype=torch.long)
    else:
        ids = ordinary_ids(model.get_input_embeddings().weight.shape[0], 64)
    return ids[:limit].view(1, -1)


@torch.no_grad()
def input_maxima(model: nn.Module, layers: list[nn.Module], ids: Tensor) -> dict[nn.Module, Tensor]:
    """max over positions of |x_j|, per input channel, of each of `layers`' inputs in one float
    forward of `model` over `ids` (layers it did not call are left out)."""
    seen: dict[nn.Module, Tensor] = {}

    def hook(module: nn.Module, args: tuple) -> None:
        x = args[0].detach()
        m = x.reshape(-1, x.shape[-1]).abs().amax(0).float()
        seen[module] = m if module not in seen else torch.maximum(seen[module], m)

    handles = [layer.register_forward_pre_hook(hook) for layer in layers]
    try:
        model(input_ids=ids.to(device_of(model)), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def quantize_draft(model: nn.Module, how: str, tokenizer: Any | None = None) -> nn.Module:
    """`model` with its linear layers and its output head made `Int8Linear` (a restricted head:
    its K-row product), smoothed on `calibration_ids(model, tokenizer)`, in place; as it is for
    "none"."""
    if how == "none":
        return model
    head = model.get_output_embeddings()
    found = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear and child is not head
    ]
    if not found:
        raise ConfigError(
            f"pair.draft_quantize={how}: the draft {type(model).__name__} has no nn.Linear layers to quantize"
        )
    heads = [head] if type(head) in (nn.Linear, DraftVocabHead) else []
    ids = calibration_ids(model, tokenizer)
    x_max = input_maxima(model, [child for _, _, child in found] + heads, ids)
    for parent, name, child in found:
        setattr(parent, name, Int8Linear(child, x_max=x_max.get(child)))
    if isinstance(head, DraftVocabHead):
        head.project = Int8Linear(head, x_max=x_max.get(head))  # its K rows; the scatter stays
    elif heads:
        model.set_output_embeddings(Int8Linear(head, x_max=x_max.get(head)))
    log.info(
        "draft: %d linear layers and %s int8 for calls of up to %d rows, float for longer ones (torch's "
        "dynamic int8 kernel, %s), smoothed (SmoothQuant a=%s) on %d calibration ids of %s",
        len(found),
        "its head" if heads else "not its head",
        SHORT_ROWS,
        torch.backends.quantized.engine,
        SMOOTHING,
        ids.shape[1],
        "the fixed passage" if tokenizer is not None else "ids spread over the vocabulary",
    )
    return model
