"""The pair loader: local pairs, the tokenizer check, failing fast when the Hub is out of reach."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer

import diversed.models.pair as pair_mod
from diversed.files.provenance import pair_name
from diversed.models import hub
from diversed.models.hub import probe as probe_hub
from diversed.models.pair import HubUnavailableError, Pair, check_tokenizers, load_pair, resolve

CONFIGS = Path(__file__).resolve().parents[1] / "diversed" / "configs" / "pair"
MISSING = "no-such-org-diversed/no-such-model"


# ----------------------------------------------------------------------------- local pairs


def test_load_local_pair(toy_tiny_dir):
    pair = load_pair(
        str(toy_tiny_dir / "target"), str(toy_tiny_dir / "draft"), dtype="float32", device="cpu", name="tiny"
    )
    assert isinstance(pair, Pair) and pair.name == "tiny"
    assert pair.target_name.endswith("target") and pair.draft_name.endswith("draft")
    for model in (pair.target, pair.draft):
        assert not model.training
        assert not any(p.requires_grad for p in model.parameters())
        assert next(model.parameters()).dtype == torch.float32
    assert pair.device == torch.device("cpu")
    assert pair.tokenizer.padding_side == "left" and pair.tokenizer.pad_token is not None
    # the two toy models have different widths (the head maps between them)
    assert pair.target.config.hidden_size != pair.draft.config.hidden_size


def test_default_name_and_dtype_auto(toy_tiny_dir):
    pair = load_pair(str(toy_tiny_dir / "target"), str(toy_tiny_dir / "draft"), device="cpu")
    assert pair.name == pair_name(str(toy_tiny_dir / "target"), str(toy_tiny_dir / "draft"))
    assert pair.name.startswith("target+draft-")  # the directories' names and a digest of both paths
    assert next(pair.target.parameters()).dtype == torch.float32  # "auto" is fp32 on CPU


def test_mismatched_tokenizers_are_refused(toy_tiny_dir, tmp_path):
    other = tmp_path / "other-draft"
    shutil.copytree(toy_tiny_dir / "draft", other)
    tok = AutoTokenizer.from_pretrained(other)
    tok.add_tokens(["<extra-token>"])
    tok.save_pretrained(other)
    with pytest.raises(ValueError, match="tokenizers of target .* and draft .*other-draft.* differ"):
        load_pair(str(toy_tiny_dir / "target"), str(other), device="cpu")


def test_check_tokenizers_compares_special_tokens(toy_tiny_dir):
    a = AutoTokenizer.from_pretrained(toy_tiny_dir / "target")
    b = AutoTokenizer.from_pretrained(toy_tiny_dir / "draft")
    check_tokenizers(a, b)
    b.eos_token = "<unk>"
    with pytest.raises(ValueError, match="eos_token_id"):
        check_tokenizers(a, b, "A", "B")


# ----------------------------------------------------------------------------- offline


def test_offline_env_fails_fast_with_a_hint(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(HubUnavailableError) as err:
        load_pair(MISSING, "no-such-org-diversed/no-such-draft", device="cpu")
    assert time.perf_counter() - start < 10
    msg = str(err.value)
    assert MISSING in msg and "HF_HUB_OFFLINE" in msg
    assert "pair.target=/path/to/no-such-model" in msg


def test_unreachable_hub_fails_fast(monkeypatch, toy_tiny_dir):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "probe", lambda: "huggingface.co:443: simulated outage")
    start = time.perf_counter()
    with pytest.raises(HubUnavailableError, match="simulated outage") as err:
        load_pair(str(toy_tiny_dir / "target"), MISSING, device="cpu")  # a local target is fine
    assert time.perf_counter() - start < 10
    assert "the draft model" in str(err.value) and "pair.draft=/path/to/no-such-model" in str(err.value)


def test_missing_local_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="draft model directory"):
        resolve(str(tmp_path / "nowhere"), "draft", probe=lambda: None)


def test_probe_gives_up_after_its_timeout(monkeypatch):
    def hang(*args, **kwargs):  # a connection that never answers, then times out as sockets do
        time.sleep(3)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", hang)
    start = time.perf_counter()
    reason = probe_hub(timeout=0.3)
    assert reason is not None and "no answer" in reason
    assert time.perf_counter() - start < 2


def test_cached_model_loads_without_the_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(pair_mod, "in_hf_cache", lambda repo_id, revision=None: True)
    assert resolve("meta-llama/Llama-3.1-8B-Instruct", "target") == {"local_files_only": True}
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert resolve("meta-llama/Llama-3.1-8B-Instruct", "target", probe=lambda: None) == {}


def test_paper_pair_config_fails_fast_offline(monkeypatch):
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(pair_mod, "in_hf_cache", lambda repo_id, revision=None: False)
    cfg = OmegaConf.load(CONFIGS / "llama8b_1b.yaml")
    start = time.perf_counter()
    with pytest.raises(InstantiationException, match=r"pair\.target=/path/to/Llama-3\.1-8B-Instruct"):
        instantiate(cfg)  # Hydra wraps the HubUnavailableError
    assert time.perf_counter() - start < 10


# ----------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
    "name, target, draft",
    [
        ("llama8b_1b", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
        ("qwen3_8b_0p6b", "Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"),
    ],
)
def test_paper_pair_configs(name, target, draft):
    cfg = OmegaConf.load(CONFIGS / f"{name}.yaml")
    assert cfg._target_ == "diversed.models.pair.load_pair"
    assert (cfg.target, cfg.draft, cfg.name) == (target, draft, name)
    assert cfg.dtype == "bfloat16" and cfg.device == "auto"


def test_toy_pair_config():
    cfg = OmegaConf.load(CONFIGS / "toy.yaml")
    assert cfg._target_ == "diversed.models.toy.load_toy_pair" and cfg.device == "cpu"


def test_native_numerics_follow_the_cpu_and_are_recorded(monkeypatch):
    """`dtype: native`: bf16 where the CPU computes it (AVX512-BF16 / AMX), fp32 elsewhere; said in the
    pair's record with the capability it was read from."""
    import torch

    from diversed.models import pair as pair_module

    cpu = torch.device("cpu")
    monkeypatch.setattr(pair_module, "cpu_has_bf16", lambda: False)
    assert pair_module._dtype("native", cpu) is torch.float32
    said = pair_module.numerics("native", "cpu")
    assert said["dtype"] == "float32" and "no bf16 instructions" in said["numerics"]
    assert torch.backends.cpu.get_cpu_capability() in said["numerics"]
    monkeypatch.setattr(pair_module, "cpu_has_bf16", lambda: True)
    assert pair_module._dtype("native", cpu) is torch.bfloat16
    assert pair_module.numerics("native", "cpu")["dtype"] == "bfloat16"
    assert pair_module.numerics("float32", "cpu") == {"dtype": "float32"}  # asked for: as it is
    assert pair_module._dtype("auto", cpu) is torch.float32  # auto keeps its meaning on CPU
