"""Bad settings fail before any model weights are read, with the key and the fix in the message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from tiny_models import compose_run

import diversed.evaluate as ev
from diversed import CONFIG_DIR
from diversed.distill import check_distill
from diversed.errors import ConfigError
from diversed.evaluate import check_evaluate
from diversed.train import check_train, train

EVAL = [
    "+experiment=toy",
    "task.n_examples=4",
    "task.max_new_tokens=4",
    "sweep.batch_size=2",
    "sweep.draft_lengths=[2]",
    "sweep.weights=[0.5]",
    "sweep.temperatures=[1.0]",
    "sweep.methods=[autoregressive,lossless,static]",
    "timing.warmup=0",
    "timing.repeats=0",
    "runtime.progress=false",
]
TRAIN = [
    "+experiment=toy",
    "logger=none",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "data.batch_size=2",
    "data.n_val=2",
    "data.val_batch_size=2",
    "data.n_train=4",
    "model.max_new_tokens=4",
]


@pytest.fixture
def no_weights(monkeypatch):
    """Any attempt to read model weights fails the test."""
    from transformers import PreTrainedModel

    def refuse(*args, **kwargs):
        raise AssertionError("model weights were read before the settings were checked")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refuse))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def data(tmp_path):
    good = {"prompt": "Q: 1+2=", "answer": "3", "reference": " so 3."}
    return {
        "empty": write(tmp_path / "empty.jsonl", ""),
        "fields": write(tmp_path / "fields.jsonl", json.dumps({"question": "1+2?", "answer": "3"}) + "\n"),
        "broken": write(
            tmp_path / "broken.jsonl", json.dumps(good) + "\n" + json.dumps(good) + "\n{'prompt': 'Q'}\n"
        ),
        "long": write(
            tmp_path / "long.jsonl", json.dumps({**good, "prompt": "Q: " + "1+" * 400 + "1="}) + "\n"
        ),
        "missing": tmp_path / "nowhere" / "test.jsonl",
    }


@pytest.fixture
def wide_draft(tmp_path, toy_tiny_dir):
    """A pair whose draft's config has an output embedding far larger than the tokenizer."""
    pair = tmp_path / "wide"
    shutil.copytree(toy_tiny_dir, pair)
    config = json.loads((pair / "draft" / "config.json").read_text())
    config["vocab_size"] = 4 * config["vocab_size"]
    (pair / "draft" / "config.json").write_text(json.dumps(config))
    return pair


EVAL_CASES = {
    "negative n": (
        ["task.n_examples=-1"],
        r"task\.n_examples=-1.*greater than or equal to 1.*null keeps every",
    ),
    "zero n": (["task.n_examples=0"], r"task\.n_examples=0"),
    "fractional N": (["sweep.draft_lengths=[2.7]"], r"sweep\.draft_lengths\[0\]=2\.7.*integer"),
    "zero batch": (["sweep.batch_size=0"], r"sweep\.batch_size=0"),
    "weight": (["sweep.weights=[1.5]"], r"sweep\.weights\[0\]=1\.5"),
    "unknown method": (["sweep.methods=[lossless,beam]"], r"unknown methods \['beam'\]"),
    "top_k": (["engine.top_k=-5"], r"engine\.top_k=-5.*greater than or equal to 0.*0 or null: no top-k"),
    "top_p": (["engine.top_p=0"], r"engine\.top_p=0.*greater than 0.*in \(0, 1\]; 1\.0: no top-p"),
    "no GPU": (["pair.device=cuda"], r"pair\.device='cuda'.*no GPU.*pair\.device=cpu"),
    "forward": (["pair.forward=fast"], r"pair\.forward='fast'"),
    "not a head": (["sweep.heads=[/nonexistent/head]", "sweep.methods=[dynamic]"], "not a saved head"),
    "empty data": (["task.data_files={data[empty]}"], r"empty\.jsonl.*has no rows"),
    "wrong fields": (
        ["task.data_files={data[fields]}"],
        r"row 1 lacks \['prompt'\].*needs the fields prompt, answer",
    ),
    "missing file": (["task.data_files={data[missing]}"], r"nowhere/test\.jsonl does not exist"),
    "broken line": (["task.data_files={data[broken]}"], r"broken\.jsonl:3: not a JSON row"),
    "too long": (
        ["task.data_files={data[long]}"],
        r"longest prompt has \d+ tokens.*512 positions.*task\.max_prompt_tokens=508",
    ),
    # what Hydra's own hint suggests for a typo: with +, a key that nothing reads
    "unknown key": (
        ["+sweep.weight=[0.9]"],
        r"sweep\.weight=\[0\.9\]: unknown key; did you mean sweep\.weights\?",
    ),
    "unknown task key": (
        ["+task.max_prompt_token=3"],
        r"task\.max_prompt_token=3: unknown key; did you mean task\.max_prompt_tokens\?",
    ),
    "unknown pair key": (
        ["+pair.dtyp=float16"],
        r"pair\.dtyp='float16': unknown key; did you mean pair\.dtype\?",
    ),
    "unknown top key": (["+sweeps.weights=[0.9]"], r"sweeps=.*unknown key; did you mean sweep\?"),
}


@pytest.mark.parametrize("case", EVAL_CASES)
def test_evaluate_refuses_bad_settings_before_reading_weights(case, tmp_path, toy_tiny_dir, data, no_weights):
    overrides, message = EVAL_CASES[case]
    if case == "no GPU":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    overrides = [o.format(data={k: str(v) for k, v in data.items()}) for o in overrides]
    cfg = compose_run("evaluate", tmp_path / "run", toy_tiny_dir, EVAL, overrides)
    with pytest.raises(ValueError, match=message):
        ev.evaluate(cfg)


def test_a_draft_wider_than_the_tokenizer_is_named_before_loading(tmp_path, wide_draft, no_weights):
    cfg = compose_run("evaluate", tmp_path / "run", wide_draft, EVAL)
    with pytest.raises(ValueError, match=r"draft's .* larger by more than padding.*resize_token_embeddings"):
        ev.evaluate(cfg)


TRAIN_CASES = {
    "no steps": (["trainer.max_steps=0"], r"trainer\.max_steps=0 trains nothing.*untrained head"),
    "negative reg": (["model.reg_scale=-1"], r"model\.reg_scale=-1"),
    "zero batch": (["data.batch_size=0"], r"data\.batch_size=0"),
    "group baseline": (["model.baseline=group"], r"needs model\.num_samples >= 2"),
    "bad lr": (["model.optimizer.lr=0"], r"model\.optimizer\.lr=0"),
    "bad schedule": (["model.lr_schedule=step"], r"model\.lr_schedule='step'"),
    "test selects": (
        ["data.val_split=test"],
        r"data\.val_split='test' is the split the task is evaluated on.*holdout",
    ),
    "test trains": (
        ["task.split=validation"],
        r"data\.val_split='validation' is the split the task is evaluated on",
    ),
    "empty data": (["task.data_files={{train: {data[empty]}, validation: {data[empty]}}}"], "has no rows"),
    "unknown trainer key": (
        ["+trainer.max_step=3"],
        r"trainer\.max_step=3: unknown key; did you mean trainer\.max_steps\?",
    ),
    "unknown head key": (
        ["+head.hidden_size=[8]"],
        r"head\.hidden_size=\[8\]: unknown key; did you mean head\.hidden_sizes",
    ),
    "unknown optimizer key": (
        ["+model.optimizer.lrr=1"],
        r"model\.optimizer\.lrr=1: unknown key; did you mean model\.optimizer\.lr\?",
    ),
    "unknown callback key": (
        ["+callbacks.model_checkpoint.monitr=x"],
        r"did you mean callbacks\.model_checkpoint\.monitor\?",
    ),
    "another task's key": (["+task.use_stemmer=true"], r"task\.use_stemmer=True: unknown key"),
    "fresh rows": (["task.skip_examples=4"], r"task\.skip_examples=4 picks the rows a sweep scores"),
}


@pytest.mark.parametrize("case", TRAIN_CASES)
def test_train_refuses_bad_settings_before_reading_weights(case, tmp_path, toy_tiny_dir, data, no_weights):
    overrides, message = TRAIN_CASES[case]
    overrides = [o.format(data={k: str(v) for k, v in data.items()}) for o in overrides]
    cfg = compose_run("train", tmp_path / "run", toy_tiny_dir, TRAIN, overrides)
    with pytest.raises(ValueError, match=message):
        train(cfg)


def test_every_problem_is_named_at_once(tmp_path, toy_tiny_dir, no_weights):
    cfg = compose_run(
        "evaluate", tmp_path, toy_tiny_dir, EVAL, ["task.n_examples=-1", "sweep.batch_size=0", "seed=x"]
    )
    with pytest.raises(ValueError) as err:
        ev.evaluate(cfg)
    text = str(err.value)
    assert "task.n_examples=-1" in text and "sweep.batch_size=0" in text and "seed='x'" in text
    assert "nothing was loaded" in text


EXPERIMENTS = sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_passes_every_entry_points_checks(experiment):
    """Our own yaml holds no key that the checks refuse: an experiment sets sections for several
    entry points, and each entry point accepts (and ignores) the others' sections."""
    for entry, check in (("evaluate", check_evaluate), ("train", check_train), ("distill", check_distill)):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name=entry):
            check(compose(entry, overrides=[f"+experiment={experiment}"], return_hydra_config=True))


PAIRS = sorted(p.stem for p in (Path(CONFIG_DIR) / "pair").glob("*.yaml"))


@pytest.mark.parametrize("pair", PAIRS)
def test_every_pair_resolves_under_the_paper_preset(pair):
    """Train logs its whole config resolved (`log_hyperparams`), and the paper preset's paths name the
    pair (`${pair.name}`): a pair config without a name failed there only after its models had loaded
    (random_llama8b_1b on a GPU, 2026-11-28)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    extra = ["pair.target=/models/big", "pair.draft=/models/small"] if pair == "local" else []
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="train"):
        cfg = compose("train", overrides=["+paper=gsm8k", f"pair={pair}", *extra], return_hydra_config=True)
    before = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} as in a run
    try:
        for key in cfg:
            if key != "hydra" and OmegaConf.is_config(cfg[key]):
                OmegaConf.to_container(cfg[key], resolve=True)
    finally:
        HydraConfig.instance().cfg = before
    assert f"/{cfg.pair.name}/gsm8k/" in cfg.sweep.heads[0]


def test_unknown_keys_are_found_in_every_kind_of_section():
    """Sections of the schema, of another entry point, `_target_` nodes (by the target's signature,
    anything for a **kwargs target), collections of loggers and callbacks."""
    overrides = [
        "+experiment=distill_toy",
        "+distill.lora_r=4",
        "distill.lora={r: 4, alpha: 8}",
        "+model.reg_scal=1",
        "+distill.optimizer.betas=[0.9,0.99]",
        "+trainer.accumulate_grad_batches=2",
        "+paths.mine=x",
        "+callbacks.stop={_target_: lightning.pytorch.callbacks.EarlyStopping, monitor: x, patiense: 3}",
        "logger=wandb",
        "+logger.wandb.tags=[a]",
        "+logger.csv.save_dirr=x",
        "+runtime.thread=1",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="distill"):
        cfg = compose("distill", overrides=overrides)
    with pytest.raises(ConfigError) as err:
        check_distill(cfg)
    refused = sorted(line.split("=")[0].strip() for line in str(err.value).splitlines()[1:])
    assert refused == [
        "callbacks.stop.patiense",
        "distill.lora_r",
        "logger.csv.save_dirr",
        "model.reg_scal",
        "runtime.thread",
    ]


def ckpt_files(tmp_path, toy_tiny_dir) -> dict[str, Path]:
    """Checkpoints a resume can be pointed at by mistake: a directory, none, an empty file, half a
    file, a head of other hidden sizes, a draft of another pair, a file that is no checkpoint."""
    import torch

    from diversed.models.pair import describe_pair
    from diversed.training.checkpoints import model_shapes

    card = describe_pair(compose_run("train", tmp_path, toy_tiny_dir, TRAIN).pair)
    d, t = card.hidden["draft"], card.hidden["target"]
    files = {
        "directory": tmp_path / "run1",
        "missing": tmp_path / "gone.ckpt",
        "empty": write(tmp_path / "empty.ckpt", ""),
    }
    (tmp_path / "run1" / "checkpoints").mkdir(parents=True)
    torch.save(
        {"state_dict": {"head.net.0.weight": torch.zeros(2, d + t)}},
        tmp_path / "run1" / "checkpoints" / "last.ckpt",
    )
    blob = (tmp_path / "run1" / "checkpoints" / "last.ckpt").read_bytes()
    files["half"] = tmp_path / "half.ckpt"
    files["half"].write_bytes(blob[: len(blob) // 2])
    (tmp_path / "run2" / "checkpoints").mkdir(
        parents=True
    )  # a run whose last.ckpt was cut short, its best whole
    (tmp_path / "run2" / "checkpoints" / "step_000040.ckpt").write_bytes(blob)
    files["half, another whole"] = tmp_path / "run2" / "checkpoints" / "last.ckpt"
    files["half, another whole"].write_bytes(blob[: len(blob) // 2])
    torch.save(
        {"state_dict": {"head.net.0.weight": torch.zeros(2, d + t + 64), "head.net.0.bias": torch.zeros(2)}},
        files.setdefault("other head", tmp_path / "other_head.ckpt"),
    )
    embed = "model.embed_tokens.weight"
    (v, h) = model_shapes(card, "draft")[embed]
    torch.save(
        {"state_dict": {f"draft.{embed}": torch.zeros(v, h * 2)}},
        files.setdefault("other draft", tmp_path / "d.ckpt"),
    )
    torch.save({"weights": torch.zeros(2)}, files.setdefault("no state", tmp_path / "plain.pt"))
    return files


CKPT_CASES = {
    "directory": (
        "train",
        r"ckpt_path='.*run1': is a directory: give the checkpoint file, "
        r"e.g\. ckpt_path=.*run1/checkpoints/last\.ckpt",
    ),
    "missing": (
        "train",
        r"ckpt_path='.*gone\.ckpt': no such file: .*checkpoints/last\.ckpt.*null to start afresh",
    ),
    "empty": (
        "train",
        r"ckpt_path=.*empty\.ckpt is not a complete checkpoint \(0 bytes.*ckpt_path=null to start afresh",
    ),
    "half": (
        "train",
        r"ckpt_path=.*half\.ckpt is not a complete checkpoint \(\d+ bytes, not a whole zip archive",
    ),
    "half, another whole": (
        "distill",
        r"run2/checkpoints/last\.ckpt is not a complete checkpoint .*resume from another "
        r"checkpoint of the run \(ckpt_path=.*run2/checkpoints/step_000040\.ckpt\)",
    ),
    "other head": (
        "train",
        r"other_head\.ckpt was saved for another head or pair: head\.net\.0\.weight \(2, \d+\) "
        r"\(this pair: \(2, \d+\)\)",
    ),
    "other draft": (
        "distill",
        r"d\.ckpt was saved for another draft or pair: draft\.model\.embed_tokens\.weight",
    ),
    "no state": ("train", r"plain\.pt is not a Lightning checkpoint \(no state_dict\)"),
}


@pytest.mark.parametrize("case", CKPT_CASES)
def test_a_bad_ckpt_path_is_named_before_the_pair_loads(case, tmp_path, toy_tiny_dir, no_weights):
    from diversed.distill import distill

    entry, message = CKPT_CASES[case]
    path = ckpt_files(tmp_path, toy_tiny_dir)[case]
    overrides = (
        TRAIN
        if entry == "train"
        else ["+experiment=distill_toy", "logger=none", "data.n_val=2", "data.n_train=4"]
    )
    cfg = compose_run(entry, tmp_path / "run", toy_tiny_dir, overrides, [f"ckpt_path={path}"])
    with pytest.raises(ValueError, match=message):
        (train if entry == "train" else distill)(cfg)
