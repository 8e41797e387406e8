"""Tiny random GGUF files for tests: Llama and Gemma-3 text models written with `gguf.GGUFWriter`.

Tests that need transformers' real GGUF path (`AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)`
and `AutoTokenizer.from_pretrained(dir, gguf_file=name)`, which need the `gguf` package) get a file
here instead of a download:

    path = write_tiny_llama_gguf(tmp_path / "llama.gguf")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)

Both are laid out like the project's shipped files (SmolLM2-135M-Instruct.Q4_1.gguf and
gemma-3-270m-q4_k_m.gguf: same metadata keys, special tokens and tensor names, as llama.cpp's
`convert_hf_to_gguf.py` writes them), only tiny and random:

- `write_tiny_llama_gguf`: `general.architecture = "llama"`, the `llama.*` hyper-parameters, tied
  embeddings by default (no `output.weight`, as SmolLM2), and a byte-level BPE tokenizer
  (`tokenizer.ggml.model = "gpt2"`, pre-tokenizer "smollm"): control tokens `<|endoftext|>` (0, unk),
  `<|im_start|>` (1, bos), `<|im_end|>` (2, eos and pad), the 256 byte tokens in GPT-2's byte
  alphabet, and a few dozen English/digit merges (~310 tokens); `add_bos_token` false and a ChatML
  chat template, as SmolLM2. `attn_q` / `attn_k` are stored permuted for GGML's rotary layout, as the
  converter does; transformers undoes that on load.
- `write_tiny_gemma3_gguf`: `general.architecture = "gemma3"` (transformers loads it as
  `Gemma3ForCausalLM`, model type "gemma3_text"): q/k norms, pre/post attention and feed-forward
  norms, tied embeddings, `gemma3.attention.sliding_window`, and a SentencePiece tokenizer
  (`tokenizer.ggml.model = "llama"`, with scores and token types, no merges): Gemma's control tokens
  (`<pad>` 0, `<eos>` 1, `<bos>` 2, `<unk>` 3, `<mask>`, `<start_of_turn>`, `<end_of_turn>`), user-defined
  `[multimodal]`, "\\n", "\\n\\n" and space-run tokens (stored as real spaces, as Gemma's are), the 256
  `<0xXX>` byte-fallback tokens, "▁" and the printable ASCII characters, then a few dozen pieces
  (~410 tokens). Norm weights are stored as `1 + w` (Gemma's RMSNorm multiplies by `1 + w`, and the
  converter adds the 1); transformers subtracts it. The layers follow Gemma-3's fixed pattern
  (5 sliding-window layers, then 1 full), which nothing in the file states.

`llama_state_dict` / `gemma3_state_dict` give the weights a writer writes for a seed, under transformers'
names and in its layout (q/k unpermuted, norms without the +1): what a loaded float32 model holds.
The same arguments always write byte-identical files (0.3-0.4 MB in float32 with the defaults).

`dtype` picks the 2-D weights' type: "f32" (default), "f16", "bf16", or one of the 32-wide block
types the `gguf` package can quantize in numpy, "q8_0", "q4_0", "q4_1", "q5_0", "q5_1" (then every
weight row must be a multiple of 32 long). 1-D tensors (norms) stay F32, as llama.cpp keeps them.
Not written: k-quants (Q4_K, Q6_K, ...; 256-wide blocks and no numpy quantizer), mixed per-tensor
types, a vision tower, rope scaling, or real merges/scores: the tokenizers are only as good as
round-tripping text needs.

Transformers 5.x quirks these files run into (transformers/modeling_gguf_pytorch_utils.py,
integrations/ggml.py and integrations/gguf/: both architectures still go through the "legacy" loader,
which dequantizes every tensor to float32 on load):

- Gemma-3: the config reads `sliding_window` but not the layer pattern, so `layer_types` is always
  Gemma3TextConfig's default (every 6th layer full; `attention.sliding_window_pattern` is ignored).
  Nor does it read `query_pre_attn_scalar` (no GGUF key; default 256, right for 270M/1B/4B/12B with
  head_dim 256, wrong for 27B), the sliding layers' rope base (default 10000; `rope.freq_base_swa`
  is ignored) or `rope.scaling.*` (ignored: Gemma-3 4B and larger use linear scaling x8 on the
  full-attention layers, so long-context positions differ from llama.cpp's).
- Whatever the file's tensor types, the model comes back in float32 (every tensor dequantized),
  unless `dtype=` is passed; then transformers warns about packed-weight kernels that this path
  does not use.
- Byte-level pre-tokenizers: `tokenizer.ggml.pre` picks a split regex only for the names in
  transformers' table ("llama-bpe", "qwen2", ...); others, SmolLM2's "smollm" included, get GPT-2's.
- Byte-level ("gpt2") tokenizers: a vocabulary without a `<|endoftext|>` token gets one added by
  transformers' GPT2Tokenizer default, one id past the model's vocabulary (`len(tokenizer) ==
  vocab_size + 1`). These files have it, as SmolLM2 does (id 0); Llama-3-style files do not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# SmolLM2's ChatML template, without its default system prompt.
LLAMA_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Gemma's turn format, short (the 270M file carries no template at all).
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

# Merge pairs in priority order, as plain text (a space is GPT-2's "Ġ" once spelled).
_LLAMA_MERGES = [
    (" ", "t"),
    (" ", "a"),
    ("i", "n"),
    ("h", "e"),
    (" ", " "),
    ("r", "e"),
    ("o", "n"),
    ("e", "r"),
    (" t", "he"),
    ("a", "t"),
    (" ", "s"),
    (" ", "o"),
    ("e", "n"),
    (" ", "w"),
    ("o", "r"),
    ("i", "s"),
    ("in", "g"),
    ("a", "n"),
    (" ", "c"),
    ("n", "d"),
    ("e", "s"),
    ("e", "d"),
    (" ", "b"),
    (" ", "f"),
    (" ", "m"),
    (" ", "p"),
    ("o", "u"),
    ("l", "l"),
    ("i", "t"),
    ("a", "r"),
    ("a", "l"),
    (" a", "nd"),
    (" o", "f"),
    (" t", "o"),
    (" ", "is"),
    (" ", "in"),
    (" ", "h"),
    (" ", "d"),
    (" ", "l"),
    ("l", "e"),
    ("s", "t"),
    (" w", "or"),
    ("l", "d"),
    (" wor", "ld"),
    ("e", "l"),
    ("l", "o"),
    ("el", "lo"),
    ("0", "0"),
    ("1", "9"),
    ("2", "0"),
    ("1", "0"),
    ("00", "0"),
    ("1", "2"),
]
_LLAMA_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Gemma pieces ("▁" is SentencePiece's space), each splittable into pieces before it.
_GEMMA_PIECES = [
    "▁t",
    "in",
    "he",
    "▁a",
    "▁the",
    "er",
    "on",
    "▁s",
    "re",
    "at",
    "en",
    "▁w",
    "or",
    "is",
    "ing",
    "an",
    "▁o",
    "▁c",
    "nd",
    "es",
    "ed",
    "▁b",
    "▁f",
    "▁m",
    "▁p",
    "ou",
    "ll",
    "it",
    "ar",
    "al",
    "▁and",
    "▁of",
    "▁to",
    "▁is",
    "▁in",
    "▁h",
    "▁d",
    "▁l",
    "le",
    "st",
    "▁wor",
    "ld",
    "▁world",
    "el",
    "lo",
    "ello",
    "▁T",
    "Th",
    "The",
    "00",
    "19",
    "20",
    "000",
    "12",
]
# (token, GGUF token type) before the byte tokens, as in Gemma-3's vocabulary: 3 control, 2 unknown,
# 4 user-defined (matched whole; runs of spaces are stored as real spaces).
_GEMMA_HEAD = [
    ("<pad>", 3),
    ("<eos>", 3),
    ("<bos>", 3),
    ("<unk>", 2),
    ("<mask>", 3),
    ("[multimodal]", 4),
    ("<start_of_turn>", 3),
    ("<end_of_turn>", 3),
    ("\n", 4),
    ("\n\n", 4),
    ("  ", 4),
    ("   ", 4),
]

DTYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: every byte as a printable character (the table transformers uses)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def llama_vocab() -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """The byte-level BPE vocabulary: `(tokens, token types, merges, special ids)` as the file spells them."""
    spell = _bytes_to_unicode()

    def spelled(text: str) -> str:
        return "".join(spell[b] for b in text.encode("utf-8"))

    tokens = list(_LLAMA_SPECIALS) + [spell[b] for b in range(256)]
    merges = []
    for left, right in _LLAMA_MERGES:
        merged = spelled(left + right)
        assert spelled(left) in tokens and spelled(right) in tokens and merged not in tokens, (left, right)
        tokens.append(merged)
        merges.append(f"{spelled(left)} {spelled(right)}")
    types = [3] * len(_LLAMA_SPECIALS) + [1] * (len(tokens) - len(_LLAMA_SPECIALS))
    return tokens, types, merges, {"unk": 0, "bos": 1, "eos": 2, "pad": 2}


def gemma3_vocab() -> tuple[list[str], list[float], list[int], dict[str, int]]:
    """The SentencePiece vocabulary: `(tokens, scores, token types, special ids)` as the file spells them."""
    tokens = [token for token, _ in _GEMMA_HEAD] + [f"<0x{b:02X}>" for b in range(256)]
    types = [kind for _, kind in _GEMMA_HEAD] + [6] * 256  # 6: byte
    scores = [-1000.0] * len(_GEMMA_HEAD) + [0.0] * 256
    pieces = ["▁"] + [chr(c) for c in range(ord("!"), ord("~") + 1)] + _GEMMA_PIECES
    assert len(set(pieces)) == len(pieces)
    for index, piece in enumerate(_GEMMA_PIECES):
        known = pieces[: 95 + index]
        assert any(piece[:i] in known and piece[i:] in known for i in range(1, len(piece))), piece
    tokens += pieces
    types += [1] * len(pieces)
    scores += [-float(i) for i in range(len(pieces))]  # transformers orders Gemma merges by position instead
    return tokens, scores, types, {"pad": 0, "eos": 1, "bos": 2, "unk": 3}


def _normal(rng: np.random.Generator, shape, std: float) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


def llama_state_dict(
    *,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    tie_embeddings: bool = True,
) -> dict[str, np.ndarray]:
    """The float32 weights `write_tiny_llama_gguf` writes for these arguments, in transformers' names
    and layout (q/k unpermuted)."""
    vocab = len(llama_vocab()[0])
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    std = 0.2
    out = {"model.embed_tokens.weight": _normal(rng, (vocab, hidden), std)}
    for i in range(layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = 1.0 + _normal(rng, (hidden,), 0.05)
        out[p + "self_attn.q_proj.weight"] = _normal(rng, (heads * head_dim, hidden), std)
        out[p + "self_attn.k_proj.weight"] = _normal(rng, (kv_heads * head_dim, hidden), std)
        out[p + "self_attn.v_proj.weight"] = _normal(rng, (kv_heads * head_dim, hidden), std)
        out[p + "self_attn.o_proj.weight"] = _normal(rng, (hidden, heads * head_dim), std)
        out[p + "post_attention_layernorm.weight"] = 1.0 + _normal(rng, (hidden,), 0.05)
        out[p + "mlp.gate_proj.weight"] = _normal(rng, (ffn, hidden), std)
        out[p + "mlp.up_proj.weight"] = _normal(rng, (ffn, hidden), std)
        out[p + "mlp.down_proj.weight"] = _normal(rng, (hidden, ffn), std)
    out["model.norm.weight"] = 1.0 + _normal(rng, (hidden,), 0.05)
    if not tie_embeddings:
        out["lm_head.weight"] = _normal(rng, (vocab, hidden), std)
    return out


def gemma3_state_dict(
    *,
    seed: int = 0,
    layers: int = 6,
    hidden: int = 32,
    heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 16,
    ffn: int = 64,
) -> dict[str, np.ndarray]:
    """The float32 weights `write_tiny_gemma3_gguf` writes for these arguments, in transformers' names and
    layout (a norm's `w` of `x * (1 + w)`, without the +1 the file stores). Embeddings are tied."""
    vocab = len(gemma3_vocab()[0])
    rng = np.random.default_rng(seed)
    std = 0.2
    out = {"model.embed_tokens.weight": _normal(rng, (vocab, hidden), 0.05)}  # scaled by sqrt(hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = _normal(rng, (hidden,), 0.05)
        out[p + "self_attn.q_proj.weight"] = _normal(rng, (heads * head_dim, hidden), std)
        out[p + "self_attn.k_proj.weight"] = _normal(rng, (kv_heads * head_dim, hidden), std)
        out[p + "self_attn.v_proj.weight"] = _normal(rng, (kv_heads * head_dim, hidden), std)
        out[p + "self_attn.o_proj.weight"] = _normal(rng, (hidden, heads * head_dim), std)
        out[p + "self_attn.q_norm.weight"] = _normal(rng, (head_dim,), 0.05)
        out[p + "self_attn.k_norm.weight"] = _normal(rng, (head_dim,), 0.05)
        out[p + "post_attention_layernorm.weight"] = _normal(rng, (hidden,), 0.05)
        out[p + "pre_feedforward_layernorm.weight"] = _normal(rng, (hidden,), 0.05)
        out[p + "mlp.gate_proj.weight"] = _normal(rng, (ffn, hidden), std)
        out[p + "mlp.up_proj.weight"] = _normal(rng, (ffn, hidden), std)
        out[p + "mlp.down_proj.weight"] = _normal(rng, (hidden, ffn), std)
        out[p + "post_feedforward_layernorm.weight"] = _normal(rng, (hidden,), 0.05)
    out["model.norm.weight"] = _normal(rng, (hidden,), 0.05)
    return out


def _permute_for_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's `LlamaModel.permute`: HF's rotate-half q/k rows to the interleaved pairs GGML ropes."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write(path: Path, arch: str, metadata, state: dict[str, np.ndarray], transform, dtype: str) -> Path:
    """Name `state`'s tensors with gguf's own table (the one transformers reverses on load) and write."""
    import gguf

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    qtype = gguf.GGMLQuantizationType[dtype.upper()]
    file_type = gguf.LlamaFileType["ALL_F32" if dtype == "f32" else f"MOSTLY_{dtype.upper()}"]
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    model_arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    n_layers = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("model.layers."))
    name_map = gguf.get_tensor_name_map(model_arch, n_layers)

    tensors = []
    for hf_name, array in state.items():
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = name_map.get_name(base)
        if gguf_name is None:
            raise KeyError(f"gguf has no {arch} tensor for {hf_name}")
        array = np.ascontiguousarray(transform(gguf_name, array), dtype=np.float32)
        if array.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:  # llama.cpp keeps 1-D tensors in F32
            tensors.append((f"{gguf_name}.{suffix}", array, None))
        elif qtype == gguf.GGMLQuantizationType.F16:
            tensors.append((f"{gguf_name}.{suffix}", array.astype(np.float16), None))
        else:
            if array.shape[-1] % block:
                raise ValueError(f"{dtype} needs rows a multiple of {block} long: {hf_name} {array.shape}")
            tensors.append((f"{gguf_name}.{suffix}", gguf.quants.quantize(array, qtype), qtype))

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, arch)
    metadata(writer)
    writer.add_file_type(int(file_type))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for name, data, raw_dtype in tensors:
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_llama_gguf(
    path: Path,
    *,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    context: int = 256,
    rope_theta: float = 100_000.0,
    tie_embeddings: bool = True,
    dtype: str = "f32",
) -> Path:
    """A random Llama GGUF at `path` (~0.4 MB with the defaults) with a byte-level BPE tokenizer.

    `tie_embeddings=False` adds an `output.weight` (the untied `lm_head`). Returns `path`.
    """
    import gguf

    if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
        raise ValueError("need hidden % heads == 0, heads % kv_heads == 0 and an even head size")
    tokens, types, merges, ids = llama_vocab()
    state = llama_state_dict(
        seed=seed,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn=ffn,
        tie_embeddings=tie_embeddings,
    )

    def metadata(w: gguf.GGUFWriter) -> None:
        w.add_name("tiny-random-llama")
        w.add_block_count(layers)
        w.add_context_length(context)
        w.add_embedding_length(hidden)
        w.add_feed_forward_length(ffn)
        w.add_head_count(heads)
        w.add_head_count_kv(kv_heads)
        w.add_rope_freq_base(rope_theta)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(len(tokens))
        w.add_rope_dimension_count(hidden // heads)
        w.add_add_space_prefix(False)
        w.add_add_bos_token(False)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(ids["bos"])
        w.add_eos_token_id(ids["eos"])
        w.add_unk_token_id(ids["unk"])
        w.add_pad_token_id(ids["pad"])
        w.add_chat_template(LLAMA_CHAT_TEMPLATE)

    def transform(gguf_name: str, array: np.ndarray) -> np.ndarray:
        if gguf_name.endswith(".attn_q"):
            return _permute_for_rope(array, heads)
        if gguf_name.endswith(".attn_k"):
            return _permute_for_rope(array, kv_heads)
        return array

    return _write(path, "llama", metadata, state, transform, dtype)


def write_tiny_gemma3_gguf(
    path: Path,
    *,
    seed: int = 0,
    layers: int = 6,
    hidden: int = 32,
    heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 16,
    ffn: int = 64,
    context: int = 256,
    sliding_window: int = 8,
    rope_theta: float = 1_000_000.0,
    dtype: str = "f32",
) -> Path:
    """A random Gemma-3 text GGUF at `path` (~0.3 MB with the defaults) with a SentencePiece tokenizer.

    Layer `i` is full attention when `(i + 1) % 6 == 0`, sliding-window otherwise: Gemma-3's pattern,
    which llama.cpp and transformers both assume for "gemma3" rather than read, so `layers >= 6`
    gives a full-attention layer. Returns `path`.
    """
    import gguf

    if hidden % heads or heads % kv_heads:
        raise ValueError("need hidden % heads == 0 and heads % kv_heads == 0")
    tokens, scores, types, ids = gemma3_vocab()
    state = gemma3_state_dict(
        seed=seed, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, ffn=ffn
    )

    def metadata(w: gguf.GGUFWriter) -> None:
        w.add_name("tiny-random-gemma3")
        w.add_context_length(context)
        w.add_embedding_length(hidden)
        w.add_block_count(layers)
        w.add_feed_forward_length(ffn)
        w.add_head_count(heads)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_rope_freq_base(rope_theta)
        w.add_sliding_window(sliding_window)
        w.add_head_count_kv(kv_heads)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(ids["bos"])
        w.add_eos_token_id(ids["eos"])
        w.add_unk_token_id(ids["unk"])
        w.add_pad_token_id(ids["pad"])
        w.add_add_bos_token(True)
        w.add_add_sep_token(False)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(False)
        w.add_chat_template(GEMMA3_CHAT_TEMPLATE)

    def transform(gguf_name: str, array: np.ndarray) -> np.ndarray:
        return array + np.float32(1.0) if gguf_name.endswith("norm") else array

    return _write(path, "gemma3", metadata, state, transform, dtype)
