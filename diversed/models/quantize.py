"""int8 decoding steps for a draft on CPU: the pair option `draft_quantize` ("none" | "int8").

A draft's decoding step at batch 1 reads every weight once, so on a CPU its cost (and c, the draft
step over the target's) follows its bytes. `quantize_draft(model, "int8")` replaces every plain
`nn.Linear` of the draft except its output head by an `Int8Linear`: a call that feeds at most
`SHORT_ROWS` rows (decoding steps, and the few tokens a draft catches up on after a verification)
runs torch's dynamic-quantized kernel (fbgemm/x86; qnnpack on ARM) on int8 weights, one scale per
output channel, its input rounded to 8 bits on one scale per row (each token its own); a longer call
(a prompt pass) runs the float weights as they are. Why:
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

The output head keeps the model's dtype: the draft's logits over the vocabulary (its restricted
head, `draft_vocab.py`) are not rounded further. The engine's direct forward path applies an
`Int8Linear` through `Int8Linear.direct_projection` (no module call: 11 µs each, a fifth of an int8
projection of a small model); the hf path calls the module; both compute the same.

What int8 changes, and so what a result records (`pair.draft_quantize` is in the pair's identity):
q itself at decoding steps (a row's q does not depend on the other rows of its batch, padding included).
Verification stays exact whatever q is: lossless decoding still reproduces the
target's law. It does not quantize a target, train a quantized draft (distill refuses the option: it
trains the float draft, which is quantized when loaded for decoding), or run on a GPU (there, bf16 is
the cheap dtype).
"""

from __future__ import annotations

import functools
import logging
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from diversed.errors import ConfigError

log = logging.getLogger(__name__)
DRAFT_QUANTIZE = ("none", "int8")
SHORT_ROWS = 64  # a call feeding at most this many rows (batch × slots) runs int8; a longer one float


class Int8Linear(nn.Module):
    """y = x Wᵀ + b. Calls of at most `short` rows: W as int8 per output channel, W ≈ Ŵ = s_o · W8
    (s_o = max_i |W_oi| / 127, W8 = round(W / s_o)), each row x_r rounded on its own range
    (`int8_linear`: torch's `quantized.linear_dynamic`, its reduced range as torch's own dynamic
    linear uses); longer calls: the float W itself. `weight` and `bias` stay the float ones (frozen);
    the bias is added after the kernel."""

    # rounds its input: float paths that differ in ulps give outputs a rounding step apart
    # (decoding/forward.py checks its direct path against model(...) on unpadded rows for such models)
    rounds_inputs = True

    def __init__(self, linear: nn.Linear, short: int = SHORT_ROWS) -> None:
        super().__init__()
        self.weight, self.bias, self.short = linear.weight, linear.bias, int(short)
        w = linear.weight.detach().float()
        scale = (w.abs().amax(1) / 127).clamp_min(1e-12).double()
        with warnings.catch_warnings():  # torch's deprecation notice for its quantized tensors
            warnings.simplefilter("ignore")
            zero = torch.zeros_like(scale, dtype=torch.long)
            w8 = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(w8, None)  # (the bias after the rescaling)
            self.w_sum = w8.dequantize().sum(1)  # Σ_i Ŵ_oi, [out]: a row's middle through the weights

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    def forward(self, x: Tensor) -> Tensor:
        return int8_linear(x, self.packed, self.weight, self.bias, self.short, self.w_sum)

    def direct_projection(self):
        """The call itself as a function of x (what the direct forward path applies)."""
        return functools.partial(
            int8_linear,
            packed=self.packed,
            weight=self.weight,
            bias=self.bias,
            short=self.short,
            w_sum=self.w_sum,
        )

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 to {self.short} rows"


def int8_linear(
    x: Tensor, packed: object, weight: Tensor, bias: Tensor | None, short: int, w_sum: Tensor
) -> Tensor:
    """`Int8Linear`'s call. Where x holds at most `short` rows, torch's int8 kernel on the packed
    weights: one row (a decoding step at batch 1) as it is, the kernel rounding it on its own range;
    several rows each on its own range too, though the kernel takes one range per call: each row
    x_r = c_r + h_r·x'_r mapped onto [−1, 1] first (c_r, h_r its range's middle and half-width), so
        y_r = h_r · kernel(x'_r) + c_r · Σ_i Ŵ_oi  (+ b),   Ŵ the int8 weights dequantized (`w_sum`),
    which is Ŵ applied to x_r rounded to 127 levels over its own [min, max] (no other row's range in
    it). Longer calls (a prompt pass): x Wᵀ (+ b) with the float weights."""
    rows = x.numel() // x.shape[-1]
    if rows > short:
        return F.linear(x, weight, bias)
    if rows == 1:
        y = torch.ops.quantized.linear_dynamic(x, packed, True)
    else:
        lo, hi = torch.aminmax(x, dim=-1, keepdim=True)
        c, h = (hi + lo) / 2, ((hi - lo) / 2).clamp_min(torch.finfo(x.dtype).tiny)
        y = torch.ops.quantized.linear_dynamic((x - c) / h, packed, True).mul_(h).addcmul_(c, w_sum)
    return y if bias is None else y.add_(bias)


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
    if dtype != torch.float32:
        name = str(dtype).removeprefix("torch.")
        raise ConfigError(
            f"{setting}{how} takes float32 activations, the pair's dtype is {name}: set "
            "pair.dtype=float32 (auto is float32 on CPU)"
        )
    if torch.backends.quantized.engine == "none":
        raise ConfigError(
            f"{setting}{how}: this torch build has no quantized engine "
            f"(supported: {torch.backends.quantized.supported_engines}); set {setting}none"
        )


def quantize_draft(model: nn.Module, how: str) -> nn.Module:
    """`model` with its linear layers (not its output head) made `Int8Linear`, in place; as it is
    for "none"."""
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
    for parent, name, child in found:
        setattr(parent, name, Int8Linear(child))
    log.info(
        "draft: %d linear layers int8 for calls of up to %d rows, float for longer ones (torch's dynamic "
        "int8 kernel, %s; the head stays %s)",
        len(found),
        SHORT_ROWS,
        torch.backends.quantized.engine,
        str(model.get_input_embeddings().weight.dtype).removeprefix("torch."),
    )
    return model
