"""The tiny GGUF writers (tests/gguf_fixtures.py) load through transformers' real GGUF path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("gguf")

from gguf_fixtures import (  # noqa: E402
    DTYPES,
    gemma3_state_dict,
    llama_state_dict,
    write_tiny_gemma3_gguf,
    write_tiny_llama_gguf,
)
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

TEXT = "Hello world! The 2019 cats and 1000 dogs: it is the end.\nNew line,\n\n\ttabs and  spaces. Ünïcødé ✓"


def _load(path):
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model, tokenizer


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf-llama") / "tiny-llama.gguf", seed=3)
    return (path, *_load(path))


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    path = write_tiny_gemma3_gguf(tmp_path_factory.mktemp("gguf-gemma3") / "tiny-gemma3.gguf", seed=3)
    return (path, *_load(path))


def _same_weights(model, expected: dict[str, np.ndarray], atol: float = 0.0) -> None:
    state = model.state_dict()
    assert set(expected) <= set(state)
    for name, array in expected.items():
        np.testing.assert_allclose(state[name].numpy(), array, rtol=0, atol=atol, err_msg=name)


def test_llama_loads_as_written(llama):
    path, model, tokenizer = llama
    assert path.stat().st_size < 1_000_000
    assert type(model).__name__ == "LlamaForCausalLM"
    c = model.config
    assert c.model_type == "llama"
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (2, 64, 4, 2)
    assert (c.intermediate_size, c.head_dim, c.max_position_embeddings) == (128, 16, 256)
    assert c.tie_word_embeddings and c.rope_parameters["rope_theta"] == 100_000.0
    assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (1, 2, 2)
    assert c.vocab_size == len(tokenizer) == model.get_input_embeddings().num_embeddings
    # Exact: transformers undoes the rotary permutation of attn_q / attn_k the writer applied.
    _same_weights(model, llama_state_dict(seed=3))
    specials = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token)
    assert specials == ("<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>")


def test_gemma3_loads_with_sliding_and_full_layers(gemma3):
    path, model, tokenizer = gemma3
    assert path.stat().st_size < 1_000_000
    assert type(model).__name__ == "Gemma3ForCausalLM"
    c = model.config
    assert c.model_type == "gemma3_text"
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (6, 32, 2, 1)
    assert (c.intermediate_size, c.head_dim, c.max_position_embeddings) == (64, 16, 256)
    assert c.sliding_window == 8
    assert c.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    assert c.rope_parameters["full_attention"]["rope_theta"] == 1_000_000.0
    assert c.tie_word_embeddings
    assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (2, 1, 0)
    assert c.vocab_size == len(tokenizer) == model.get_input_embeddings().num_embeddings
    assert type(tokenizer).__name__ == "GemmaTokenizer"
    # Norms come back as `w` of `x * (1 + w)` (the file stores 1 + w): equal up to float32 rounding.
    _same_weights(model, gemma3_state_dict(seed=3), atol=1e-6)


@pytest.mark.parametrize("which", ["llama", "gemma3"])
def test_text_round_trips(which, request):
    _, model, tokenizer = request.getfixturevalue(which)
    ids = tokenizer(TEXT)["input_ids"]
    assert max(ids) < model.config.vocab_size
    assert tokenizer.decode(ids, skip_special_tokens=True) == TEXT
    assert len(ids) < len(TEXT.encode())  # the merges do merge
    messages = [{"role": "user", "content": "hi"}]
    chat = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat.startswith(tokenizer.bos_token if which == "gemma3" else "<|im_start|>user")
    chat_ids = tokenizer(chat, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(chat_ids) == chat  # control tokens stay whole


@pytest.mark.parametrize("which", ["llama", "gemma3"])
def test_forward_and_greedy_generate(which, request):
    _, model, tokenizer = request.getfixturevalue(which)
    enc = tokenizer([TEXT[:40]], return_tensors="pt")
    assert enc["input_ids"].shape[1] > 8  # longer than Gemma's window
    with torch.no_grad():
        logits = model(**enc).logits
        out = model.generate(
            **enc, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
        again = model.generate(
            **enc, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    assert logits.shape == (1, enc["input_ids"].shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()
    assert out.shape == (1, enc["input_ids"].shape[1] + 4)
    assert torch.equal(out, again)
    # Greedy with the cache picks what a full forward's argmax picks.
    assert out[0, enc["input_ids"].shape[1]] == logits[0, -1].argmax()


def test_gemma3_sliding_window_is_in_effect(tmp_path, gemma3):
    _, narrow, tokenizer = gemma3
    wide_path = write_tiny_gemma3_gguf(tmp_path / "wide.gguf", seed=3, sliding_window=64)
    wide = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=wide_path.name).eval()
    ids = tokenizer([TEXT], return_tensors="pt")["input_ids"][:, :20]
    with torch.no_grad():
        a, b = narrow(ids).logits, wide(ids).logits
    # Within the first 8 positions nothing falls out of the window; later the sliding layers differ.
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, -1], b[:, -1])


@pytest.mark.parametrize("writer", [write_tiny_llama_gguf, write_tiny_gemma3_gguf])
def test_same_seed_same_bytes(writer, tmp_path):
    a = writer(tmp_path / "a.gguf", seed=7).read_bytes()
    b = writer(tmp_path / "b.gguf", seed=7).read_bytes()
    c = writer(tmp_path / "c.gguf", seed=8).read_bytes()
    assert a == b
    assert a != c and len(a) == len(c)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "f32"])
def test_other_tensor_types_load(dtype, tmp_path):
    path = write_tiny_llama_gguf(tmp_path / f"llama-{dtype}.gguf", seed=3, dtype=dtype)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    # The loader dequantizes everything to float32; the error is the type's rounding.
    atol = {"f16": 1e-3, "bf16": 4e-3, "q8_0": 1e-2}.get(dtype, 0.1)
    _same_weights(model, llama_state_dict(seed=3), atol=atol)


def test_gemma3_q8_0_loads(tmp_path):
    path = write_tiny_gemma3_gguf(tmp_path / "gemma3-q8_0.gguf", seed=3, dtype="q8_0")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    assert model.config.layer_types[-1] == "full_attention"
    _same_weights(model, gemma3_state_dict(seed=3), atol=1e-2)
