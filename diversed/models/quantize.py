"""int8 decoding steps on CPU for a draft or a target: the pair options `draft_quantize` and
`target_quantize` ("none" | "int8").

A decoding step at batch 1 reads every weight once, so on a CPU its cost (and c, the draft step over
the target's) follows its bytes. `quantize_member(model, "int8", tokenizer)` replaces every
plain `nn.Linear` of the model, its output head included, by an `Int8Linear`: a call that feeds at
most `SHORT_ROWS` rows (decoding steps, and the few tokens a draft catches up on after a
verification) runs torch's dynamic-quantized kernel (fbgemm/x86; qnnpack on ARM) on int8 weights,
one scale per output channel, its input rounded to 8 bits on one scale per row (each token its
own); a draft's longer call (a prompt pass) runs the float weights as they are (a target's is int8
too: below). Why:
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

A target's layers are anchored (`quantize_member(..., anchored=True)`, what `target_quantize` makes):
lossless decoding reproduces the law of the target it runs, so the autoregressive loop (one row a
call), a verification (N + 1 rows a call, times the batch) and a prompt pass must compute a row alike.
Every call, whatever its rows (a prompt pass too: no float product is kept or packed for it), maps each
row onto [−1, 1] (clamped) and feeds the kernel two more rows, all −1 and all +1: the call's range is
then exactly [−1, 1] whatever the other rows are, so each row's rounding and product are its own, bit
for bit (tests/test_quantize.py). One scale per row, not per call, is also what keeps a prompt pass
in int8 sound (the loud tokens above set only their own row's rounding). What still differs between
two calls is the float part, attention over another number of query rows, by ulps, and rounding to 8
bits can turn those into a rounding step at the next layer: lossless decoding on an int8 target
reproduces its law to that precision, not bit for bit (as a bf16 model's does, where every value
keeps 8 significant bits: forward.py's tolerance comment). A draft keeps one row as it is and float
prompt passes (its q needs no such exactness; its numbers stay as they were recorded).

The engine's direct forward path applies an `Int8Linear` through `Int8Linear.direct_projection`
(no module call: 11 µs each, a fifth of an int8 projection of a small model); the hf path calls the
module; both compute the same. Whether the direct path computes the model's maths is checked with
the int8 layers in float (`Int8Linear.float_calls`): rounding to 8 bits would turn the ulps by which
two correct ways differ into whole rounding steps.

What int8 changes, and so what a result records (`pair.draft_quantize` is in the pair's identity,
as `scheme("int8")`, which names the smoothing): q itself at decoding steps (a row's q does not
depend on the other rows of its batch, padding included). Verification stays exact whatever q is:
lossless decoding still reproduces the target's law. An int8 target (`pair.target_quantize`, in the
pair's identity as `scheme("int8", anchored=True)`) is another target: p itself changes, for the
autoregressive baseline and every method alike (the bench and a sweep run one target for all), and a
result on it is not a result on the float target. It does not train a quantized draft (distill
refuses the option: it trains the float draft, which is quantized when loaded for decoding), distil
from an int8 target (refused too: distill teaches the float target's law), or run on a GPU (there,
bf16 is the cheap dtype). A bf16 draft (`dtype: native` on a CPU with bf16 instructions) keeps its
bf16 float weights for long calls; int8 products take their rows cast to float32 and give them back in
bf16. An int8 layer keeps its float weight as the module's parameter (the direct path's check reads
it through `float_calls`), so an int8 target holds its float32 weights beside its int8 ones.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from diversed.decoding.draft_vocab import DraftVocabHead
from diversed.decoding.inputs import device_of, ordinary_ids
from diversed.errors import ConfigError

log = logging.getLogger(__name__)
DRAFT_QUANTIZE = ("none", "int8")
SHORT_ROWS = 64  # a draft's call feeding at most this many rows (batch × slots) runs int8; a longer one float
EVERY_CALL = sys.maxsize  # an anchored (target's) layer's `short`: every call int8
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
    s = 1. `anchored`: every call int8 (`short` ignored), each row's product independent of the
    call's other rows bit for bit (`int8_linear`; a target's layers). `weight` and `bias` stay the
    float ones (frozen); the bias is added after the kernel. An `nn.Linear` to whoever asks (a
    model's output head must be one), whose call is this."""

    # rounds its input: float paths that differ in ulps give outputs a rounding step apart, so
    # decoding/forward.py checks its direct path against model(...) with such layers in float (`float_calls`)
    rounds_inputs = True

    def __init__(
        self, linear: nn.Linear, short: int = SHORT_ROWS, x_max: Tensor | None = None, anchored: bool = False
    ) -> None:
        nn.Module.__init__(self)  # nn.Linear's own would allocate new weights
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.anchored = bool(anchored)  # every call's range exactly [−1, 1], every call int8 (a target's)
        self.weight, self.bias = linear.weight, linear.bias
        self.short = EVERY_CALL if self.anchored else int(short)
        self.anchors = None  # an anchored layer's two anchor rows (all −1, all +1), made once
        if self.anchored:
            ends = torch.tensor([[-1.0], [1.0]], device=linear.weight.device)
            self.anchors = ends.expand(2, self.in_features).contiguous()
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
        return self.product(x)

    def product(self, x: Tensor) -> Tensor:
        """The call without a module call (`direct_projection`), on the layer's settings as they are
        at the call (`float_calls` switches them)."""
        return int8_linear(
            x,
            self.packed,
            self.weight,
            self.bias,
            self.short,
            self.w_sum,
            self.inv_smooth,
            self.long_product,
            self.anchors,
        )

    def direct_projection(self) -> Callable[[Tensor], Tensor]:
        """The call itself as a function of x (what the direct forward path applies)."""
        return self.product

    @contextlib.contextmanager
    def float_calls(self) -> Iterator[None]:
        """Every call the float product x Wᵀ + b while inside, whatever its rows: how the direct path's
        check compares two ways of computing the model's maths without rounding (forward.py)."""
        short, self.short = self.short, 0
        try:
            yield
        finally:
            self.short = short

    def extra_repr(self) -> str:
        smoothed = ", smoothed" if self.inv_smooth is not None else ""
        shape = f"in_features={self.in_features}, out_features={self.out_features}"
        if self.anchored:
            return f"{shape}, int8 for every call{smoothed}, anchored"
        return f"{shape}, int8 to {self.short} rows{smoothed}"

    @property
    def long_calls(self) -> bool:
        """Whether some calls (over `short` rows: a prompt pass) take the float product."""
        return self.short != EVERY_CALL


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
    anchors: Tensor | None = None,
) -> Tensor:
    """`Int8Linear`'s call. Where x holds at most `short` rows, x / s (`inv_smooth`, the smoothing;
    None: s = 1) through torch's int8 kernel on the packed (smoothed) weights: one row (a decoding
    step at batch 1) as it is, the kernel rounding it on its own range;
    several rows each on its own range too, though the kernel takes one range per call: each row
    x_r = c_r + h_r·x'_r mapped onto [−1, 1] first (c_r, h_r its range's middle and half-width), so
        y_r = h_r · kernel(x'_r) + c_r · Σ_i Ŵ_oi  (+ b),   Ŵ the int8 weights dequantized (`w_sum`),
    which is Ŵ applied to x_r rounded to 127 levels over its own [min, max] (no other row's range in
    it, up to the ulps by which x'_r's ends miss ±1). `anchors` given (an anchored layer's two rows, all
    −1 and all +1, float32 [2, in]): every call so, one row too, x'_r clamped to [−1, 1] and the
    anchors fed with them (their outputs dropped), so
    the kernel's range is exactly [−1, 1] and a row's output is the same bits in any call. Longer
    calls (a prompt pass; an anchored layer's `short` has none) and calls without rows: x Wᵀ (+ b) with
    the float weights, by `long` where given (the same product on oneDNN's packed copy,
    models/packed.py), else `F.linear`."""
    rows = x.numel() // x.shape[-1]
    if rows == 0 or rows > short:
        return F.linear(x, weight, bias) if long is None else long(x)
    dtype, x = x.dtype, x.float()  # the kernel takes float32 (a bf16 model's rows cast to it and back)
    if inv_smooth is not None:
        x = x * inv_smooth
    if rows == 1 and anchors is None:
        y = torch.ops.quantized.linear_dynamic(x, packed, True)
    else:
        lo, hi = torch.aminmax(x, dim=-1, keepdim=True)
        c, h = (hi + lo) / 2, ((hi - lo) / 2).clamp_min(torch.finfo(x.dtype).tiny)
        z = (x - c) / h
        if anchors is not None:  # the rows clamped to [−1, 1], the anchors setting the range
            flat = z.reshape(rows, -1).clamp_(-1, 1)
            y = torch.ops.quantized.linear_dynamic(torch.cat((flat, anchors)), packed, True)[:rows]
            y = y.view(*z.shape[:-1], -1)
        else:
            y = torch.ops.quantized.linear_dynamic(z, packed, True)
        y = y.mul_(h).addcmul_(c, w_sum)
    return (y if bias is None else y.add_(bias)).to(dtype)


def quantized(model: nn.Module) -> str:
    """What `quantize_member` made of `model`: "int8" if it has `Int8Linear` layers, else "none"."""
    return "int8" if any(isinstance(m, Int8Linear) for m in model.modules()) else "none"


def check_quantize(
    how: str, device: torch.device, dtype: object, setting: str = "pair.draft_quantize="
) -> None:
    """Refuse a `draft_quantize` or `target_quantize` that cannot run here, before any weights load;
    `setting` is how the messages name it with its value (a CLI's "--draft-quantize ")."""
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


def scheme(how: str, anchored: bool = False) -> str:
    """What a `draft_quantize` (or, `anchored`, a `target_quantize`) setting computes, as results
    record it (the pair's identity): "none", or the int8 scheme with its smoothing (runs from before
    the smoothing said "int8")."""
    if how == "none":
        return how
    rows = ", every call, each row anchored on [-1, 1]" if anchored else ""
    return f"{how}, SmoothQuant a={SMOOTHING} on the fixed passage, head {how}{rows}"


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


def quantize_member(
    model: nn.Module, how: str, tokenizer: Any | None = None, *, anchored: bool = False
) -> nn.Module:
    """`model` with its linear layers and its output head made `Int8Linear` (a restricted head:
    its K-row product), smoothed on `calibration_ids(model, tokenizer)`, in place; as it is for
    "none". `anchored` (a target): every call int8, every row's product independent of its call
    (`int8_linear`)."""
    if how == "none":
        return model
    role, setting = ("target", "target_quantize") if anchored else ("draft", "draft_quantize")
    head = model.get_output_embeddings()
    found = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear and child is not head
    ]
    if not found:
        raise ConfigError(
            f"pair.{setting}={how}: the {role} {type(model).__name__} has no nn.Linear layers to quantize"
        )
    heads = [head] if type(head) in (nn.Linear, DraftVocabHead) else []
    ids = calibration_ids(model, tokenizer)
    x_max = input_maxima(model, [child for _, _, child in found] + heads, ids)
    for parent, name, child in found:
        setattr(parent, name, Int8Linear(child, x_max=x_max.get(child), anchored=anchored))
    if isinstance(head, DraftVocabHead):  # its K rows; the scatter stays
        head.project = Int8Linear(head, x_max=x_max.get(head), anchored=anchored)
    elif heads:
        model.set_output_embeddings(Int8Linear(head, x_max=x_max.get(head), anchored=anchored))
    log.info(
        "%s: %d linear layers and %s int8 %s (torch's "
        "dynamic int8 kernel, %s), smoothed (SmoothQuant a=%s) on %d calibration ids of %s%s",
        role,
        len(found),
        "its head" if heads else "not its head",
        "for every call" if anchored else f"for calls of up to {SHORT_ROWS} rows, float for longer ones",
        torch.backends.quantized.engine,
        SMOOTHING,
        ids.shape[1],
        "the fixed passage" if tokenizer is not None else "ids spread over the vocabulary",
        ", every row anchored on [-1, 1]" if anchored else "",
    )
    return model
