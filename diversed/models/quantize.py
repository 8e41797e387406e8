"""int8 weights for a draft on CPU: the pair option `draft_quantize` ("none" | "int8").

A draft's decoding step at batch 1 reads every weight once, so on a CPU its cost (and c, the draft
step over the target's) follows its bytes. `quantize_draft(model, "int8")` turns every plain
`nn.Linear` of the draft except its output head into torch's dynamic-quantized linear
(`torch.ao.nn.quantized.dynamic.Linear`: int8 weights per output channel, activations quantized per
call, fbgemm/x86 kernels; qnnpack on ARM). Measured on 2 cores for SmolLM2's first 15 layers'
projections at batch 1: fp32 16.5 ms, bf16 9.7, int8 3.4 (BENCHMARKS.md "An int8 draft"). torchao's
CPU int8 configs measured slower than fp32 here (36 and 53 ms), so torch's own kernels are used; torch
marks them deprecated, and the warnings they raise at conversion are silenced here, said once in the
log.

The output head keeps the model's dtype: the draft's logits over the vocabulary (its restricted head,
`draft_vocab.py`) are not rounded further. The engine's direct forward path calls the quantized
projections' kernel itself (`forward.py`); the hf path calls the modules.

What int8 changes, and so what a result records (`pair.draft_quantize` is in the pair's identity):
q itself (the rounding of weights and activations), and, since an activation's scale is taken over the
whole batch, a row's q depends on the other rows of its batch. Verification stays exact whatever q
is: lossless decoding still reproduces the target's law. It does not quantize a target, train a
quantized draft (distill refuses the option: it trains the float draft, which is quantized when loaded
for decoding), or run on a GPU (there, bf16 is the cheap dtype).
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from diversed.errors import ConfigError

log = logging.getLogger(__name__)
DRAFT_QUANTIZE = ("none", "int8")


def check_quantize(how: str, device: torch.device, dtype: object) -> None:
    """Refuse a `draft_quantize` that cannot run here, before any weights load."""
    if how not in DRAFT_QUANTIZE:
        raise ConfigError(f"pair.draft_quantize must be one of {DRAFT_QUANTIZE}, got {how!r}")
    if how == "none":
        return
    if device.type != "cpu":
        raise ConfigError(
            f"pair.draft_quantize={how} runs on CPU only (torch's dynamic int8 kernels), the pair is on "
            f"{device}: set pair.draft_quantize=none (on a GPU the cheap dtype is pair.dtype=bfloat16)"
        )
    if dtype != torch.float32:
        name = str(dtype).removeprefix("torch.")
        raise ConfigError(
            f"pair.draft_quantize={how} takes float32 activations, the pair's dtype is {name}: set "
            "pair.dtype=float32 (auto is float32 on CPU)"
        )
    if torch.backends.quantized.engine == "none":
        raise ConfigError(
            "pair.draft_quantize=int8: this torch build has no quantized engine "
            f"(supported: {torch.backends.quantized.supported_engines}); set pair.draft_quantize=none"
        )


def quantize_draft(model: nn.Module, how: str) -> nn.Module:
    """`model` with its linear layers (not its output head) int8, in place; as it is for "none"."""
    if how == "none":
        return model
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    head = model.get_output_embeddings()
    spec = {
        name: per_channel_dynamic_qconfig
        for name, m in model.named_modules()
        if type(m) is nn.Linear and m is not head
    }
    if not spec:
        raise ConfigError(
            f"pair.draft_quantize={how}: the draft {type(model).__name__} has no nn.Linear layers to quantize"
        )
    with warnings.catch_warnings():  # torch's deprecation notices for its quantized tensors, at every layer
        warnings.simplefilter("ignore")
        quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)
    log.info(
        "draft: %d linear layers int8 (torch dynamic quantization, %s kernels; the head stays %s)",
        len(spec),
        torch.backends.quantized.engine,
        str(model.get_input_embeddings().weight.dtype).removeprefix("torch."),
    )
    return model

