"""The paper presets (+paper=<task>, pair=<pair>): they compose for every entry point with the
protocol's values, pass the settings checks, and lay their runs out where the next step looks."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from hydra import compose, initialize_config_dir

from diversed import CONFIG_DIR
from diversed.distill import check_distill
from diversed.evaluate import check_evaluate
from diversed.train import check_train

TASKS = ["gsm8k", "cnndm", "xsum", "mbpp"]
PAIRS = ["llama8b_1b", "qwen3_8b_0p6b", "gemma3_12b_4b"]


def preset(entry: str, task: str, pair: str, *extra: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name=entry):
        return compose(entry, overrides=[f"+paper={task}", f"pair={pair}", *extra], return_hydra_config=True)


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("task", TASKS)
def test_protocol_values(task, pair, monkeypatch):
    monkeypatch.setenv("DIVERSED_ALLOW_CODE_EXECUTION", "1")
    cfg = preset("evaluate", task, pair)
    assert cfg.task.name == task and cfg.pair.name == pair and cfg.pair.dtype == "bfloat16"
    t = cfg.task
    assert (t.n_examples, t.seed, t.max_new_tokens, t.num_few_shot, t.chat_template, t.stop_early) == (
        100,
        42,
        128,
        0,
        False,
        False,
    )
    assert t.split == ("validation" if task == "mbpp" else "test")
    if task == "mbpp":
        assert t.test_format == "list" and t.subset == "full"
    if task == "xsum":
        assert t.max_summary_words == 32
    s = cfg.sweep
    assert list(s.temperatures) == [1.0, 0.1] and list(s.draft_lengths) == [3, 5, 7]
    assert {"autoregressive", "lossless", "finetuned_draft", "static", "dynamic"} <= set(s.methods)
    assert (
        cfg.timing.latency is True and cfg.timing.latency_examples is None
    )  # the paper's mean over all examples
    assert cfg.timing.repeats >= 5 and cfg.timing.latency_repeats >= 3  # enough for an interval per time
    base = f"outputs/paper/{pair}/{task}"
    assert cfg.hydra.run.dir.endswith(f"{base}/evaluate")
    assert s.heads[0].endswith(f"{base}/train/head") and s.draft_models[0].endswith(f"{base}/distill/draft")
    check_evaluate(cfg)

    cfg = preset("train", task, pair)
    assert cfg.hydra.run.dir.endswith(f"{base}/train")
    m, d, tr = cfg.model, cfg.data, cfg.trainer
    assert (m.optimizer.lr, m.lr_schedule, m.warmup_steps, m.reg_mode, m.reg_scale) == (
        5e-4,
        "cosine",
        10,
        "adaptive",
        0.05,
    )
    assert (m.do_sample, m.temperature, m.max_new_tokens) == (True, 1.0, 128)
    assert (d.n_train, d.batch_size, tr.max_epochs, tr.max_steps, tr.gradient_clip_val) == (
        400,
        8,
        2,
        -1,
        5.0,
    )
    assert list(cfg.head.hidden_sizes) == [] and list(cfg.head.features) == []  # the paper's linear head
    if task in ("gsm8k", "mbpp"):
        assert (m.baseline, m.baseline_constant, d.val_split) == ("constant", 1.0, "holdout")
    else:
        assert (m.baseline, m.baseline_momentum, d.val_split) == ("running", 0.9, "validation")
    assert d.val_split != t.split
    check_train(cfg)

    cfg = preset("distill", task, pair)
    assert cfg.hydra.run.dir.endswith(f"{base}/distill") and cfg.distill.max_new_tokens == 128
    check_distill(cfg)


@pytest.mark.parametrize("task", TASKS)
def test_sampling_is_the_released_codes_by_default_and_exact_v_on_request(task, monkeypatch):
    """released: the bonus token from p and transformers' default top_k = 50 on p and q, as the
    released evaluation through transformers' assisted generation; exact_v: every token from v of
    the full softmax, what the presets did before (its settings are the old ones: old runs resume)."""
    from diversed.sweep.grid import engine_settings

    monkeypatch.setenv("DIVERSED_ALLOW_CODE_EXECUTION", "1")
    released = preset("evaluate", task, "qwen3_8b_0p6b")
    e = released.engine
    assert (e.bonus_token, e.top_k, e.top_p, e.first_token) == ("target", 50, 1.0, "ensemble")
    assert released.hydra.runtime.choices["paper_sampling"] == "released"
    check_evaluate(released)
    exact = preset("evaluate", task, "qwen3_8b_0p6b", "paper_sampling=exact_v")
    e = exact.engine
    assert (e.bonus_token, e.top_k, e.top_p, e.first_token) == ("ensemble", 0, 1.0, "ensemble")
    check_evaluate(exact)
    before = {
        "bonus_token": "ensemble",
        "num_draft_tokens_schedule": "constant",
        "draft_confidence_threshold": None,
    }
    assert engine_settings(exact.engine) == before
    assert engine_settings(released.engine) == {**before, "bonus_token": "target", "top_k": 50}
    # each setting can still be changed on its own
    assert preset("evaluate", task, "llama8b_1b", "engine.top_p=0.9").engine.top_p == 0.9


def test_another_task_under_a_preset_is_refused():
    from diversed.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\+paper=gsm8k is the gsm8k protocol.*use \+paper=xsum"):
        check_train(preset("train", "gsm8k", "llama8b_1b", "task=xsum"))


def test_the_pair_defaults_to_llama_and_stop_early_can_come_back():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="evaluate"):
        cfg = compose("evaluate", overrides=["+paper=gsm8k", "task.stop_early=true"])
    assert cfg.pair.name == "llama8b_1b" and cfg.task.stop_early is True


@pytest.mark.parametrize("entry", ["train", "evaluate"])
@pytest.mark.slow
def test_cfg_job_on_the_command_line(entry, tmp_path):
    """What a researcher types to see a preset: `--cfg job` prints it without running."""
    out = subprocess.run(
        [sys.executable, "-m", f"diversed.{entry}", "+paper=xsum", "pair=qwen3_8b_0p6b", "--cfg", "job"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=True,
    ).stdout
    cfg = yaml.safe_load(out)
    assert cfg["task"]["name"] == "xsum" and cfg["task"]["max_summary_words"] == 32
    assert cfg["pair"]["target"] == "Qwen/Qwen3-8B" and cfg["task"]["n_examples"] == 100
    if entry == "train":
        assert cfg["model"]["baseline"] == "running" and cfg["trainer"]["max_epochs"] == 2
    else:
        assert cfg["sweep"]["temperatures"] == [1.0, 0.1]
