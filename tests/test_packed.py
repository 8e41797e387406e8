"""Linear layers on oneDNN's packed layout (`pair.cpu_kernels=auto`, models/packed.py): the same
product as `F.linear` up to summation order, every linear layer of a large float model packed (the head
too, an int8 draft's long calls too), lossless decoding with a packed target still exactly the target's
`generate`, and nothing packed where it would not pay (small models, GPUs, emulated bf16, "blas")."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from test_forward import VOCAB, assert_exact, tiny
from tiny_models import ragged_prompts
from torch import nn

import diversed.models.packed as packed_module
from diversed.errors import ConfigError
from diversed.models.packed import PackedLinear, check_kernels, kernels, pack_linears, packs
from diversed.models.quantize import SHORT_ROWS, Int8Linear, check_quantize, quantize_member

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")


@pytest.fixture
def pack_small(monkeypatch):
    """Every model counts as large (the tiny test models are far below the 64 MiB threshold)."""
    monkeypatch.setattr(packed_module, "CPU_COPY_BYTES", 0)


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_layer_computes_the_linear_product(bias):
    torch.manual_seed(0)
    linear = nn.Linear(48, 80, bias=bias).requires_grad_(False)
    layer = PackedLinear(linear)
    assert isinstance(layer, nn.Linear) and layer.weight is linear.weight  # the model's own weight kept
    for shape in [(1, 48), (6, 48), (3, 5, 48), (130, 48)]:  # a step, a verification pass, batches, a prompt
        x = torch.randn(shape)
        torch.testing.assert_close(layer(x), linear(x), rtol=1e-5, atol=1e-5)
        assert torch.equal(layer.direct_projection()(x), layer(x))
    assert "packed" in repr(layer)


@needs_onednn
def test_every_linear_of_a_large_model_is_packed_and_its_logits_stay(pack_small):
    model = tiny(transformers.Qwen2Config, 2, 3)  # q/k/v biases, an untied head
    ids, mask = ragged_prompts(vocab=VOCAB)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).logits
        pack_linears(model)
        got = model(input_ids=ids, attention_mask=mask).logits
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is PackedLinear for m in linears)
    assert type(model.get_output_embeddings()) is PackedLinear
    assert kernels(model) == "onednn-packed"
    torch.testing.assert_close(got[mask.bool()], ref[mask.bool()], rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize("n", [1, 4])
def test_lossless_greedy_with_a_packed_target_is_its_generate(pack_small, n):
    target = pack_linears(tiny(transformers.LlamaConfig, 3, 0))
    draft = pack_linears(tiny(transformers.LlamaConfig, 1, 1))
    assert kernels(target) == kernels(draft) == "onednn-packed"
    assert_exact(target, draft, n, 24)


@needs_onednn
def test_an_int8_draft_keeps_int8_steps_and_packs_its_long_calls(pack_small):
    draft = quantize_member(tiny(transformers.LlamaConfig, 2, 1), "int8")
    assert kernels(draft) == "blas"
    layer = next(m for m in draft.modules() if isinstance(m, Int8Linear))
    x_long, x_short = torch.randn(SHORT_ROWS + 1, layer.in_features), torch.randn(2, layer.in_features)
    before_short = layer(x_short)
    pack_linears(draft)
    assert all(type(m) is Int8Linear for m in draft.modules() if isinstance(m, nn.Linear))  # still int8
    assert kernels(draft) == "onednn-packed"
    assert torch.equal(layer(x_short), before_short)  # decoding steps: the same int8 product
    torch.testing.assert_close(layer(x_long), nn.functional.linear(x_long, layer.weight, layer.bias))
    assert torch.equal(layer.direct_projection()(x_long), layer(x_long))


def test_nothing_is_packed_where_it_would_not_pay(monkeypatch):
    cpu, big = torch.device("cpu"), 2**30
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr("diversed.models.packed.cpu_has_bf16", lambda: False)
    assert packs("auto", cpu, torch.float32, big)
    assert not packs("blas", cpu, torch.float32, big)  # asked not to
    assert not packs("auto", cpu, torch.float32, 1000)  # a small model: the direct path's copies
    assert not packs("auto", torch.device("cuda"), torch.float32, big)
    assert not packs("auto", cpu, torch.bfloat16, big)  # bf16 emulated by this CPU
    assert not packs("auto", cpu, torch.float16, big)
    monkeypatch.setattr("diversed.models.packed.cpu_has_bf16", lambda: True)
    assert packs("auto", cpu, torch.bfloat16, big)  # bf16 instructions: bf16 packed
    model = tiny(transformers.LlamaConfig, 1, 0)  # the real threshold: a tiny model stays as it is
    assert pack_linears(model) is model and kernels(model) == "blas"
    assert all(type(m) is nn.Linear for m in model.modules() if isinstance(m, nn.Linear))


def test_an_unknown_kernel_setting_is_refused():
    check_kernels("auto")
    with pytest.raises(ConfigError, match=r"cpu_kernels must be one of \('auto', 'blas'\), got 'mkl'"):
        check_kernels("mkl")
    with pytest.raises(ConfigError, match="--cpu-kernels must be one of"):
        check_kernels("mkl", "--cpu-kernels ")


def test_an_int8_draft_of_a_bf16_model_computes_in_float32_and_answers_in_bf16():
    check_quantize("int8", torch.device("cpu"), torch.bfloat16)  # allowed now
    with pytest.raises(ConfigError, match="float32 or bfloat16"):
        check_quantize("int8", torch.device("cpu"), torch.float16)
    torch.manual_seed(0)
    linear = nn.Linear(32, 48).requires_grad_(False)
    x_max = torch.rand(32) * 4
    f32, b16 = Int8Linear(linear, x_max=x_max), Int8Linear(copy.deepcopy(linear).bfloat16(), x_max=x_max)
    x = torch.randn(3, 32)
    got = b16(x.bfloat16())
    assert got.dtype == torch.bfloat16
    # the same int8 product on the bf16-rounded input, rounded to bf16 at the end
    torch.testing.assert_close(got.float(), f32(x.bfloat16().float()), rtol=2e-2, atol=2e-2)
    long = torch.randn(SHORT_ROWS + 1, 32).bfloat16()
    assert b16(long).dtype == torch.bfloat16  # a long call: the bf16 float layer


@needs_onednn
def test_a_packed_layer_that_trains_learns_and_never_answers_stale():
    """distill trains the pair's draft: the gradient reaches the weight, and after the step the layer
    (and the direct path's projection, planned again) computes with the new weight."""
    torch.manual_seed(0)
    layer = PackedLinear(nn.Linear(16, 8))
    x = torch.randn(4, 16)
    loss = layer(x).square().sum()
    loss.backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    before = layer.current()
    torch.optim.SGD(layer.parameters(), lr=0.1).step()
    with torch.no_grad():
        torch.testing.assert_close(layer(x), nn.functional.linear(x, layer.weight, layer.bias))
        torch.testing.assert_close(
            layer.direct_projection()(x), nn.functional.linear(x, layer.weight, layer.bias)
        )
    assert layer.current() is not before  # packed again once, then kept
    assert layer.current() is layer.current()
