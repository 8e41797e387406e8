"""Linear layers on oneDNN's packed weight layout (CPU): the pair option `cpu_kernels` ("auto" | "blas").

A decoding step at batch 1 reads every weight once, so its cost follows bytes read per second; a
verification pass over N + 1 tokens reads the same bytes and should cost about as much. torch's
`F.linear` on CPU does neither on the machines measured here. On Qwen2.5-Coder-1.5B, one token
against 6 after a 128-token prompt, 2 threads (BENCHMARKS.md, "The Qwen pair on CPU"):
- an AMD EPYC with AVX-512 and bf16 instructions: float32 through `F.linear` (MKL) 240 / 563 ms at
  1 thread; on oneDNN's packed layout 83 / 103 ms; bf16 through `F.linear` 137 / 127 ms, packed
  52 / 61 ms (the prompt pass 0.59 s against 1.09 s in float32);
- one [1536 → 8960] projection on the same machine: float32 `F.linear` 2.0 ms for one row and
  4.7–5.0 ms for 6, packed 0.81 / 0.78 ms with 2 threads.
The packed layout is the one torch's own compiler freezes weights into
(`torch.ops.mkldnn._reorder_linear_weight`, applied by `torch.ops.mkldnn._linear_pointwise`).

`pack_linears(model)` makes every plain `nn.Linear` of a large CPU model in float32 (or bf16 where
the CPU has bf16 instructions, `cpu_has_bf16`), its output head included, a `PackedLinear`, and
gives a draft's int8 layer (models/quantize.py) the same packed copy for its float product on long
calls (an int8 target has none: every call of it is int8): the same y = x Wᵀ + b for every call
(prompt passes too), equal to `F.linear` up to the summation order, a few ulps. "auto" packs models
larger than the direct forward path's copy limit (64 MiB: smaller ones take its [in, out] copies,
measured faster for tiny products) on a CPU where torch has oneDNN (`torch.backends.mkldnn`);
"blas" keeps `F.linear`.

The packed copy is kept beside the model's own weight (which stays its parameter: tied embeddings,
checkpoints and the checks that read it see it unchanged), so a packed model holds its linear
weights twice in memory. It does not quantize (models/quantize.py does, for a draft or a target), does not
apply on a GPU or to bf16 on a CPU without bf16 instructions (emulated there: slower than float32).
A layer that trains (distill trains the pair's draft) is not left stale: under grad mode a weight
that requires grad goes through torch's own `F.linear`, and the packed copy is made again whenever
the weight's version counter has moved (an optimizer step, `load_state_dict`).
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from diversed.decoding.forward import CPU_COPY_BYTES
from diversed.errors import ConfigError
from diversed.models.quantize import Int8Linear

log = logging.getLogger(__name__)
CPU_KERNELS = ("auto", "blas")


class PackedLinear(nn.Linear):
    """y = x Wᵀ + b with W in oneDNN's packed layout (`packed_linear`). `weight` and `bias` stay
    the model's own; an `nn.Linear` to whoever asks (a model's output head must be one). The packed
    copy follows the weight: made again when the weight's version counter moves (an optimizer step,
    `load_state_dict`), and a call that autograd records (grad mode on and the weight or the input
    requiring grad: training) is `F.linear` on the weight itself."""

    def __init__(self, linear: nn.Linear) -> None:
        nn.Module.__init__(self)  # nn.Linear's own would allocate new weights
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self._version: int | None = -1
        self.packed = self.current()

    def current(self) -> Tensor:
        """The packed copy of the weight as it is now."""
        try:
            version = self.weight._version
        except RuntimeError:  # an inference tensor keeps no version counter (and cannot change)
            version = None
        if version != self._version:
            self.packed, self._version = pack_weight(self.weight), version
        return self.packed

    def forward(self, x: Tensor) -> Tensor:
        training = torch.is_grad_enabled() and (self.weight.requires_grad or x.requires_grad)
        if training or x.device.type != "cpu":  # (a packed model moved to a GPU: torch's own product)
            return F.linear(x, self.weight, self.bias)
        return packed_linear(x, self.current(), self.bias)

    def direct_projection(self):
        """The call itself as a function of x (what the engine's direct forward path applies; the
        path plans again when a weight's version moves, and so takes the new copy)."""
        return functools.partial(packed_linear, packed=self.current(), bias=self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN packed"


def pack_weight(weight: Tensor) -> Tensor:
    """W [out, in] reordered once into oneDNN's blocked layout (what `packed_linear` multiplies by)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def packed_linear(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """x Wᵀ + b for x [..., in] with W packed by oneDNN (`_reorder_linear_weight`)."""
    b = None if bias is None else bias.detach()
    return torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")


def check_kernels(how: str, setting: str = "pair.cpu_kernels=") -> None:
    """Refuse an unknown `cpu_kernels` before any weights load."""
    if how not in CPU_KERNELS:
        raise ConfigError(f"{setting.rstrip('= ')} must be one of {CPU_KERNELS}, got {how!r}")


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (x86 AVX512-BF16 or AMX tiles, as torch reads
    them). Without them torch emulates bf16 through fp32: measured on an AVX2 machine, a bf16 forward
    over 6 tokens cost 5 one-token steps and sampling ran 4.5x slower than on a machine with them."""
    cpu = getattr(torch, "cpu", None)
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in probes)


def packs(how: str, device: torch.device, dtype: object, nbytes: int) -> bool:
    """Whether `cpu_kernels=how` packs a model of `nbytes` in `dtype` on `device` here: float32, or
    bf16 where the CPU has bf16 instructions (`cpu_has_bf16`), on a CPU with oneDNN, larger
    than `CPU_COPY_BYTES` (smaller models take the direct forward path's [in, out] copies for BLAS,
    measured faster for tiny products: decoding/forward.py)."""
    check_kernels(how)
    native = dtype == torch.float32 or (dtype == torch.bfloat16 and cpu_has_bf16())
    return (
        how == "auto"
        and device.type == "cpu"
        and native
        and nbytes > CPU_COPY_BYTES
        and torch.backends.mkldnn.is_available()
    )


def kernels(model: nn.Module) -> str:
    """What a model's float linear products run on, as results record it: "onednn-packed" or "blas";
    "none (int8)" where every linear layer is int8 for every call (an int8 target, quantize.py)."""
    packed = any(
        isinstance(m, PackedLinear) or getattr(m, "long_product", None) is not None for m in model.modules()
    )
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if linears and all(isinstance(m, Int8Linear) and not m.long_calls for m in linears):
        return "none (int8)"
    return "onednn-packed" if packed else "blas"


def pack_linears(model: nn.Module, how: str = "auto") -> nn.Module:
    """`model` with every plain `nn.Linear` (its output head included, a tied one too: the packed
    copy is the head's own) made a `PackedLinear`, in place, where `packs(how, ...)`; else as it is.
    Int8 layers keep their int8 product and get a packed one for their long calls; other replaced
    layers (adapters) are left alone."""
    weight = next(model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if not packs(how, weight.device, weight.dtype, nbytes):
        return model

    found = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear
    ]
    for parent, name, child in found:
        setattr(parent, name, PackedLinear(child))
    int8 = [m for m in model.modules() if isinstance(m, Int8Linear) and m.long_calls]
    for m in int8:  # an int8 layer's float product for long calls (a draft's prompt pass), packed too
        m.long_product = functools.partial(packed_linear, packed=pack_weight(m.weight), bias=m.bias)
    log.info(
        "%d linear layers on oneDNN's packed layout (and the float product of %d int8 ones)",
        len(found),
        len(int8),
    )
    return model
