"""GGUF files as pair members, end to end without a network: a tiny random Llama and a tiny Gemma-3
with sliding-window layers written by the `gguf` package (tests/gguf_fixtures.py), converted once
to cached safetensors (diversed/models/gguf.py), a draft made from the target's first layers with a
restricted vocabulary (diversed/drafts.py, draft_vocab.py), loaded through `pair.load_pair` and
decoded exactly (lossless greedy = the target's own `generate`)."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("gguf")

from gguf_fixtures import write_tiny_gemma3_gguf, write_tiny_llama_gguf  # noqa: E402

from diversed import Lossless, StaticEnsemble, speculative_generate  # noqa: E402
from diversed.decoding.draft_vocab import DraftVocabHead  # noqa: E402
from diversed.decoding.forward import forward_path  # noqa: E402
from diversed.decoding.inputs import left_pad  # noqa: E402
from diversed.errors import ConfigError  # noqa: E402
from diversed.models.gguf import convert_gguf, converted_dir, sha256_file  # noqa: E402
from diversed.models.pair import describe_pair, load_pair  # noqa: E402
from diversed.models.surgery import init_draft  # noqa: E402

TEXTS = [
    "The cat sat on the mat and 12 + 30 = 42.",
    "Hello world",
    "A longer sentence about the sea, with 7 words more.",
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DIVERSED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _greedy_matches_generate(pair, texts, max_new=12):
    tok = pair.tokenizer
    prompts = [tok(t, add_special_tokens=False).input_ids for t in texts]
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    out = speculative_generate(
        pair.target,
        pair.draft,
        ids,
        mask,
        verifier=Lossless(),
        num_draft_tokens=3,
        max_new_tokens=max_new,
        eos_token_id=[],
        pad_token_id=tok.pad_token_id,
    )
    for i, p in enumerate(prompts):
        ref = pair.target.generate(
            torch.tensor([p]),
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=None,
            pad_token_id=tok.pad_token_id,
        )
        got = out.sequences[i, ids.shape[1] :][:max_new]
        assert got.tolist() == ref[0, len(p) :].tolist(), f"row {i}"
    return out


def test_a_gguf_file_is_converted_once_keyed_by_its_digest_and_named_in_the_pair_card(cache, tmp_path):
    path = write_tiny_llama_gguf(tmp_path / "files" / "tiny.gguf", layers=3)
    out = convert_gguf(path, progress=False)
    assert out == converted_dir(sha256_file(path)) and (out / "model.safetensors").is_file()
    source = json.loads((out / "source.json").read_text())
    assert source["sha256"] == sha256_file(path) and source["file"] == "tiny.gguf"
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert (
        convert_gguf(path, progress=False) == out and (out / "model.safetensors").stat().st_mtime_ns == stamp
    )  # cached
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # nothing half-written beside it
    card = describe_pair(
        {"_target_": "diversed.models.pair.load_pair", "target": str(path), "draft": str(path), "name": "t"}
    )
    assert card.identity["target"]["gguf"] == {"file": "tiny.gguf", "sha256": sha256_file(path)}
    assert card.hidden == {"target": 64, "draft": 64}


def test_a_tiny_llama_gguf_and_its_restricted_draft_decode_exactly(cache, tmp_path):
    path = write_tiny_llama_gguf(tmp_path / "llama.gguf", layers=3, seed=1)
    target_dir = convert_gguf(path, progress=False)
    vocab = 200  # of the fixture's ~312 ids: the draft proposes from these only
    draft_dir = init_draft(target_dir, 1, tmp_path / "draft", vocab=vocab, texts=TEXTS * 3)
    pair = load_pair(str(path), str(draft_dir), dtype="float32", device="cpu", name="tiny-gguf")
    assert isinstance(pair.draft.get_output_embeddings(), DraftVocabHead)
    assert pair.target_name == str(path) and pair.draft.config.num_hidden_layers == 1
    for forward in ("hf", "direct"):
        from diversed.decoding.forward import use_forward

        use_forward(pair.target, forward)
        use_forward(pair.draft, forward)
        assert forward_path(pair.target) == forward
        _greedy_matches_generate(pair, TEXTS)
    # sampled, against v with the restricted draft: valid statistics, q = 0 outside the vocabulary
    tok = pair.tokenizer
    ids, mask = left_pad([tok(t).input_ids for t in TEXTS], tok.pad_token_id, "cpu")
    out = speculative_generate(
        pair.target,
        pair.draft,
        ids,
        mask,
        verifier=StaticEnsemble(0.5),
        num_draft_tokens=3,
        max_new_tokens=16,
        do_sample=True,
        generator=torch.Generator().manual_seed(0),
    )
    summary = out.stats.summary()
    assert 0 <= summary["alpha"] <= 1 and 0 <= summary["acceptance_rate"] <= 1


def test_a_tiny_gemma3_gguf_with_sliding_windows_decodes_exactly(cache, tmp_path):
    path = write_tiny_gemma3_gguf(tmp_path / "gemma.gguf", layers=6, sliding_window=8, seed=2)
    target_dir = convert_gguf(path, progress=False)
    draft_dir = init_draft(target_dir, 2, tmp_path / "draft")
    pair = load_pair(str(path), str(draft_dir), dtype="float32", device="cpu", attn_implementation="sdpa")
    types = pair.target.config.layer_types
    assert (
        "sliding_attention" in types and "full_attention" in types and pair.target.config.sliding_window == 8
    )
    assert pair.draft.config.layer_types == types[:2]
    # prompts longer than the window, ragged: each row keeps its whole window
    long = ["one two three four five six seven eight nine ten eleven twelve", "short", "a b c d e f g h i j"]
    _greedy_matches_generate(pair, long, max_new=14)


def test_a_draft_is_built_from_a_gguf_target_in_stages_that_replay_each_others_samples(
    cache, tmp_path, monkeypatch
):
    """`drafts.build` end to end on a tiny recipe: cut, restricted, distilled on two tasks in turn
    (the second replaying the first's samples), the target's first layer kept frozen, α measured."""
    from safetensors.torch import load_file

    from diversed import drafts
    from diversed.training.prompts import PromptDataModule

    path = write_tiny_llama_gguf(tmp_path / "llama.gguf", layers=3, seed=2)
    tiny = (
        "distill.rollout=target",
        "distill.reuse=true",
        "distill.top_k=16",
        "distill.prompt_positions=-1",
        "distill.sample_batch_size=16",
        "distill.max_new_tokens=6",
        "distill.optimizer.lr=1e-3",
        "data.batch_size=8",
        "data.n_train=24",
        "data.val_split=holdout",
        "data.n_val=4",
        "data.val_batch_size=4",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "runtime.threads=1",
    )
    recipe = drafts.DraftRecipe(
        "tiny",
        str(path),
        layers=2,
        vocab=200,
        freeze=1,
        overrides=tiny,
        stages=(("toy", 3, ()), ("toy_count", 3, ("data.n_train=16",))),
        eval_tasks=("toy",),
        n_eval=4,
        max_new_tokens=6,
    )
    monkeypatch.setitem(drafts.RECIPES, "tiny", recipe)
    served = []
    real_serve = PromptDataModule.serve
    monkeypatch.setattr(
        PromptDataModule, "serve", lambda self, items: served.append(len(items)) or real_serve(self, items)
    )
    out = drafts.build("tiny", keep=tmp_path / "kept")
    assert out == drafts.built_dir("tiny") and out.parent.parent == cache
    # --keep: each stage's run directory, its target samples with it, instead of deleted
    kept = sorted(p.name for p in (tmp_path / "kept").iterdir())
    assert kept == ["stage0_toy", "stage1_toy_count"]
    assert all((tmp_path / "kept" / k / "teacher_samples.pt").is_file() for k in kept)
    with pytest.raises(ConfigError, match="--keep .*not a new or empty directory"):  # before any work
        drafts.build("tiny", force=True, keep=tmp_path / "kept")
    report = json.loads((out / "build.json").read_text())
    assert report["steps"] == {"toy": 3, "toy_count": 3} and 0 <= report["after"]["toy"]["alpha"] <= 1
    assert report["build_seconds"] > 0 and "before" not in report
    assert served == [24, 16 + 24]  # the second stage trains on its own samples and the first's
    assert [p.name for p in sorted(out.glob("distill_*_metrics.csv"))] == []  # logger=none: no CSV to keep
    pair = load_pair(str(path), str(out), dtype="float32", device="cpu", name="tiny-built")
    assert isinstance(pair.draft.get_output_embeddings(), DraftVocabHead)
    assert pair.draft.config.num_hidden_layers == 2
    built, target = (
        load_file(out / "model.safetensors"),
        load_file(converted_dir(sha256_file(path)) / "model.safetensors"),
    )
    layer0 = [k for k in built if k.startswith("model.layers.0.")]
    assert layer0 and all(torch.equal(built[k], target[k]) for k in layer0)  # frozen: the target's own
    assert not all(torch.equal(built[k], target[k]) for k in built if k.startswith("model.layers.1."))
    _greedy_matches_generate(pair, TEXTS)  # and it decodes exactly as a draft
    assert drafts.build("tiny") == out  # cached: built once
    # a measurement cut short (the draft already cached): the next call measures only
    (out / "build.json").write_text(json.dumps({k: v for k, v in report.items() if k != "after"}))
    weights = (out / "model.safetensors").stat().st_mtime_ns
    assert drafts.build("tiny") == out
    assert json.loads((out / "build.json").read_text())["after"] == report["after"]  # same prompts, same seed
    assert (out / "model.safetensors").stat().st_mtime_ns == weights  # not rebuilt


def test_a_draft_recipe_without_stages_reports_its_undistilled_acceptance(cache, tmp_path, monkeypatch):
    from diversed import drafts

    path = write_tiny_llama_gguf(tmp_path / "llama.gguf", layers=3, seed=2)
    recipe = drafts.DraftRecipe(
        "cut", str(path), layers=1, vocab=None, stages=(), eval_tasks=("toy",), n_eval=4, max_new_tokens=6
    )
    monkeypatch.setitem(drafts.RECIPES, "cut", recipe)
    report = json.loads((drafts.build("cut") / "build.json").read_text())
    before = report["before"]["toy"]
    assert 0 <= before["alpha_low"] <= before["alpha"] <= before["alpha_high"] <= 1 and "after" not in report
    assert before["prompts"] == 4
    # measured again, float and int8 on the same prompts: the float one is the build's, to the digit
    again = drafts.measure("cut", None, ["none", "int8"], None, 0)
    assert again["alpha"]["toy"]["none"] == before
    diff = again["difference"]["toy"]
    int8 = again["alpha"]["toy"]["int8"]["alpha"]
    assert diff["of"] == "int8 - none" and diff["alpha"] == pytest.approx(int8 - before["alpha"], abs=1e-3)
    assert diff["low"] <= diff["alpha"] <= diff["high"]
    with pytest.raises(ConfigError, match="two different"):
        drafts.measure("cut", None, ["int8", "int8"], None, 0)


def test_a_draft_recipe_with_a_base_keeps_that_model_whole_and_restricts_its_head(
    cache, tmp_path, monkeypatch
):
    """A real sibling draft made cheaper (qwen25coder_0p5b_v32k's shape): the base's every layer and
    weight as they are, its head's rows for K ids: the specials, every id of the base's own greedy
    completions, then the train texts' most frequent; MBPP read, completed and its α measured
    without the code-execution opt-in (nothing is run)."""
    from safetensors.torch import load_file

    from diversed import drafts
    from diversed.tasks.execution import ALLOW_ENV

    monkeypatch.delenv(ALLOW_ENV, raising=False)
    target = write_tiny_llama_gguf(tmp_path / "target.gguf", layers=3, seed=4)
    base = write_tiny_llama_gguf(tmp_path / "base.gguf", layers=2, seed=5)  # same tokenizer, other weights
    data = tmp_path / "data"
    rows = [
        {
            "task_id": i,
            "text": f"Write a function that adds {i} to x.",
            "code": f"def f(x):\n    return x + {i}",
            "test_list": [f"assert f(1) == {1 + i}"],
            "test_setup_code": "",
            "challenge_test_list": [],
        }
        for i in range(6)
    ]
    (data / "mbpp").mkdir(parents=True)
    for split in ("train", "test"):
        (data / "mbpp" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(convert_gguf(base, progress=False))
    text_ids = {i for r in rows for i in tok(r["text"] + " " + r["code"], add_special_tokens=False).input_ids}
    specials = set(tok.all_special_ids) | {tok.eos_token_id}
    k = len(specials) + 3 * 3  # the specials and room for every id of 3 completions of 3 tokens
    assert len(text_ids - specials) > 9  # so the texts alone could fill the rest: the order is tested
    recipe = drafts.DraftRecipe(
        "sibling",
        str(target),
        base=str(base),
        layers=None,
        vocab=k,
        stages=(),
        vocab_tasks=("mbpp",),
        vocab_completions=3,
        vocab_max_new=3,
        eval_tasks=("mbpp",),
        n_eval=2,
        max_new_tokens=4,
    )
    monkeypatch.setitem(drafts.RECIPES, "sibling", recipe)
    written = []  # the base model's own completions, ranked ahead of the texts
    real = drafts.completion_ids
    monkeypatch.setattr(drafts, "completion_ids", lambda *a, **k: written.extend(real(*a, **k)) or written)
    out = drafts.build("sibling", data=data)  # α measured too: MBPP's test prompts, decoded unscored
    built = load_file(out / "model.safetensors")
    whole = load_file(converted_dir(sha256_file(base)) / "model.safetensors")
    assert set(built) == set(whole) and all(
        torch.equal(built[k], whole[k]) for k in whole
    )  # not cut, not changed
    head = load_file(out / "draft_vocab.safetensors")
    index = set(head["index"].tolist())
    assert len(index) == k
    assert torch.equal(
        head["weight"], whole["model.embed_tokens.weight"][head["index"]]
    )  # its tied head's rows
    assert len(written) == 3 and all(len(row) <= 3 for row in written) and any(written)  # ≤ 3 new ids each
    assert all(tok.eos_token_id not in row for row in written)  # each cut at its first EOS
    own = {i for row in written for i in row}
    assert specials | own <= index  # the completions' ids kept ahead of the texts'
    assert (index - specials - own) <= text_ids  # the rest: ids of the texts
    report = json.loads((out / "build.json").read_text())
    assert 0 <= report["before"]["mbpp"]["alpha"] <= 1 and report["before"]["mbpp"]["prompts"] == 2
    pair = load_pair(str(target), str(out), dtype="float32", device="cpu", name="tiny-sibling")
    assert isinstance(pair.draft.get_output_embeddings(), DraftVocabHead)
    assert pair.draft.config.num_hidden_layers == 2
    _greedy_matches_generate(pair, TEXTS)  # lossless greedy is the target's, whatever the draft proposes
