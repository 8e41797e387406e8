"""The evaluation runner: the grid, records, resume after a crash, and bad sweeps."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import hydra
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf, open_dict
from tiny_models import compose_run, pair_overrides

import diversed.evaluate as ev
import diversed.sweep.point as point_module
from diversed import WeightHead
from diversed.decoding.inputs import left_pad
from diversed.decoding.verify import SAMPLER
from diversed.errors import ConfigError
from diversed.files.provenance import digest
from diversed.sweep.point import decode
from diversed.sweep.results import ResultStore, load_results, read_examples
from diversed.tasks import TASKS
from diversed.tasks.base import Option
from diversed.tasks.toy import ToyTask


@pytest.fixture(scope="module")
def head_dir(toy_tiny_dir, tmp_path_factory):
    cfg = json.loads((toy_tiny_dir / "target" / "config.json").read_text())
    dcfg = json.loads((toy_tiny_dir / "draft" / "config.json").read_text())
    out = tmp_path_factory.mktemp("head")
    WeightHead(dcfg["hidden_size"], cfg["hidden_size"]).save_pretrained(out, pair="tiny-toy")
    return out


SMALL = [
    "+experiment=toy",
    "task.n_examples=6",
    "task.max_new_tokens=6",
    "sweep.batch_size=4",
    "sweep.draft_lengths=[2,3]",
    "sweep.weights=[0.0,0.5,1.0]",
    "sweep.temperatures=[0.0,1.0]",
    "timing.warmup=0",
    "timing.repeats=1",
    "runtime.progress=false",
    "sweep.num_seeds=1",
    "sweep.methods=[autoregressive,lossless,static,dynamic]",
]


def compose_eval(out: Path, pair_dir: Path, *overrides: str):
    return compose_run("evaluate", out, pair_dir, SMALL, overrides)


def test_grid_records_and_resume(tmp_path, toy_tiny_dir, head_dir, monkeypatch):
    cfg = compose_eval(tmp_path, toy_tiny_dir, f"sweep.heads=[{head_dir}]")
    n_points = len(list(ev.grid(cfg.sweep, {"head": [str(head_dir)]})))
    assert n_points == 2 * (1 + 2 * (1 + 3 + 1))  # per T: AR + per N: lossless, 3 static, 1 head

    # crash after 5 grid points: what was written stays, nothing is partial
    calls = {"n": 0}
    real = ev.run_point

    def crashing(*a, **k):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt("killed")
        return real(*a, **k)

    monkeypatch.setattr(ev, "run_point", crashing)
    with pytest.raises(KeyboardInterrupt):
        ev.evaluate(cfg)
    assert len(load_results(tmp_path)) == 5

    # re-run: only the missing points run, and no row is duplicated
    monkeypatch.setattr(ev, "run_point", real)
    ev.evaluate(cfg)
    df = load_results(tmp_path)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(df) == len(lines) == n_points
    # every settings fingerprint keeps the config and the settings that produced its records
    digests = set(df.settings)
    assert len(digests) == 2  # one for the pair's points, one for the head's (its files are part of it)
    assert {p.stem for p in (tmp_path / "configs").glob("*.yaml")} == digests
    assert {p.stem for p in (tmp_path / "settings").glob("*.json")} == digests

    ran = {"n": 0}
    monkeypatch.setattr(ev, "run_point", lambda *a, **k: ran.__setitem__("n", ran["n"] + 1))
    ev.evaluate(cfg)
    assert ran["n"] == 0  # everything was done

    # the records carry what the plots need
    static = df[df.method == "static"]
    assert set(static.weight) == {0.0, 0.5, 1.0}
    assert (df[df.method == "autoregressive"].normalized_time == 1.0).all()
    assert df[df.method != "autoregressive"].acceptance_rate.between(0, 1).all()
    assert (df.score_ci_low <= df.score).all() and (df.score <= df.score_ci_high).all()
    # toy scores are 0/1: Wilson intervals, within [0, 1] and never of zero width (all wrong included)
    assert (
        (df.score_ci_low >= 0).all()
        and (df.score_ci_high <= 1).all()
        and (df.score_ci_low < df.score_ci_high).all()
    )
    dyn = df[df.method == "dynamic"]
    assert dyn.mean_w.between(0.4, 0.6).all()  # an untrained head: w = 0.5
    # w = 0 accepts every draft; greedy w = 1 and lossless give the same text
    assert (static[static.weight == 0.0].acceptance_rate == 1.0).all()
    g = df[(df.temperature == 0.0) & (df.num_draft_tokens == 2)]
    assert float(g[g.method == "lossless"].score.iloc[0]) == float(
        g[(g.method == "static") & (g.weight == 1.0)].score.iloc[0]
    )
    examples = sorted((tmp_path / "examples").glob("*.jsonl"))
    assert len(examples) == n_points
    row = json.loads(examples[0].read_text().splitlines()[0])
    assert {"example_id", "completion", "score", "new_tokens", "accepted_drafts"} <= set(row)
    assert {"prompt", "reference", "extracted"} <= set(row) and row["prompt"].startswith("Q: ")


def test_every_method_stops_at_the_task_stop_sequences(tmp_path, toy_tiny_dir):
    # The untrained pair writes random characters; with the digits (one token each in the toy
    # tokenizer) as stop sequences about half the rows meet one within 32 tokens (16 left it at a
    # third, a draw away from the bound below), and a method that decoded past it would show
    # characters after it.
    digits = list("0123456789")
    cfg = compose_eval(
        tmp_path,
        toy_tiny_dir,
        f"task.stop=[{','.join(repr(d) for d in digits)}]",
        "task.max_new_tokens=32",
        "sweep.methods=[autoregressive,lossless,static]",
        "sweep.draft_lengths=[3]",
        "sweep.weights=[0.5]",
    )
    ev.evaluate(cfg)
    task, stopped, rows = ToyTask([], stop=digits), 0, 0
    for path in sorted((tmp_path / "examples").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            text = json.loads(line)["completion"]
            kept = task.truncate(text)
            assert text == kept or text[len(kept) :] in digits, text  # nothing after the stop
            stopped, rows = stopped + (text != kept), rows + 1
    assert rows == 6 * 3 * 2 and stopped >= rows // 3

    # generate itself ends those rows (the time baseline does not decode past a stop either), and
    # the count of new tokens ends at the stop also where the padding after it is EOS
    pair = hydra.utils.instantiate(cfg.pair)
    tok = pair.tokenizer
    for pad in (tok.pad_token_id, tok.eos_token_id):
        tok.pad_token_id = pad
        ids, mask = left_pad(
            task.encode(tok, ToyTask.load(n_examples=6).examples), tok.pad_token_id, pair.device
        )
        for method in ("autoregressive", "hf_generate"):  # the time baseline and transformers' reference
            point = {"method": method, "temperature": 1.0}

            def run(stop=None, point=point, ids=ids, mask=mask):
                out = decode(pair, point, None, ids, mask, max_new=16, seed=0, stop=stop)
                return out.sequences, out.stats.new_tokens

            free, n_free = run()
            seqs, n_new = run(task.stopper(tok))
            stopper = task.stopper(tok)
            assert (
                stopper.triggers is not None
            )  # rows are asked only after a digit; asking every row is the same
            every, n_every = run(stopper.__call__)  # no triggers
            assert torch.equal(seqs, every) and torch.equal(n_new, n_every)
            P = ids.shape[1]
            assert (n_new < n_free).any()
            for r, n in enumerate(n_new.tolist()):
                assert seqs[r, P : P + n].tolist() == free[r, P : P + n].tolist()
                assert (seqs[r, P + n :] == tok.pad_token_id).all()
                assert task.truncate(
                    tok.decode(seqs[r, P : P + n - 1], skip_special_tokens=True)
                ) == tok.decode(
                    seqs[r, P : P + n - 1], skip_special_tokens=True
                )  # the fewest tokens: one fewer has not reached the stop


def test_each_example_is_scored_once_with_every_metric(tmp_path, toy_tiny_dir):
    """run_point calls the task's scoring once per example, and records the mean of each metric."""
    calls = []

    class Counted(ToyTask):
        def score(self, example, completion):
            calls.append(example["id"])
            return super().score(example, completion)

        def metrics(self, example, completion):
            return {"exact_match": self.score(example, completion), "length": min(1.0, len(completion) / 10)}

    pair = hydra.utils.instantiate(compose_eval(tmp_path, toy_tiny_dir).pair)
    task = Counted(ToyTask.load(n_examples=6).examples)
    point = {"method": "autoregressive", "temperature": 1.0}
    fields, rows = ev.run_point(pair, task, point, None, batch_size=4, seed=0)
    assert sorted(calls) == sorted(e["id"] for e in task)  # each example once
    assert fields["score"] == fields["exact_match"] == pytest.approx(sum(r["score"] for r in rows) / 6)
    assert fields["length"] == pytest.approx(sum(min(1.0, len(r["completion"]) / 10) for r in rows) / 6)
    # a completion with nothing to score once cut at the stop sequences is counted as empty
    assert [r["empty"] for r in rows] == [not task.truncate(r["completion"]).strip() for r in rows]
    assert fields["empty_rate"] == pytest.approx(sum(r["empty"] for r in rows) / 6)
    stopped_at_once = Counted(
        ToyTask.load(n_examples=6).examples, stop=list("abcdefghijklmnopqrstuvwxyz0123456789 ")
    )
    fields, rows = ev.run_point(pair, stopped_at_once, point, None, batch_size=4, seed=0)
    assert fields["empty_rate"] == sum(r["empty"] for r in rows) / 6 > 0
    # a completion that ran to max_new_tokens is counted as cut at the cap (none of those that stopped)
    assert not any(r["at_cap"] for r in rows) and fields["capped_rate"] == 0
    capped = Counted(ToyTask.load(n_examples=6).examples, max_new_tokens=2, stop=[])
    fields, rows = ev.run_point(pair, capped, point, None, batch_size=4, seed=0)
    assert [r["at_cap"] for r in rows] == [r["new_tokens"] == 2 for r in rows]
    assert fields["capped_rate"] == pytest.approx(sum(r["at_cap"] for r in rows) / 6)
    assert fields["capped_rate"] > 0
    # which sampler drew the tokens is recorded (one seed's draws differ between schemes); greedy: none
    assert fields["sampler"] == SAMPLER
    greedy, _ = ev.run_point(pair, capped, {**point, "temperature": 0.0}, None, batch_size=4, seed=0)
    assert greedy["sampler"] == "greedy"
    theirs, _ = ev.run_point(pair, capped, {**point, "method": "hf_generate"}, None, batch_size=4, seed=0)
    assert theirs["sampler"] == "transformers"  # generate's own draws


def test_batch_indices_by_length_cover_every_example_once_in_length_order():
    lengths = [5, 1, 9, 1, 3, 7, 2]
    assert point_module.batch_indices(lengths, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    batches = point_module.batch_indices(lengths, 3, by_length=True)
    assert batches == [[1, 3, 6], [4, 0, 5], [2]]  # stable among equal lengths
    assert sorted(sum(batches, [])) == list(range(len(lengths)))


def test_batches_by_length_pad_less_and_give_rows_in_the_tasks_order(tmp_path, toy_tiny_dir, monkeypatch):
    """sweep.batch_by_length: the decoded batches hold prompts of about one length (less left padding),
    the rows come back in the task's order, and greedy completions are the ones batched in order."""
    pair = hydra.utils.instantiate(compose_eval(tmp_path, toy_tiny_dir).pair)
    examples = ToyTask.load(n_examples=12).examples  # toy prompts are all of one length: lengthen some
    task = ToyTask([{**e, "prompt": "1+1=2 " * (i * 7 % 4) + e["prompt"]} for i, e in enumerate(examples)])
    lengths = [len(p) for p in task.encode(pair.tokenizer, list(task))]
    assert len(set(lengths)) > 2 and lengths != sorted(lengths)  # else the order could not change anything
    widths, real = [], point_module.decode

    def spy(pair, point, verifier, ids, mask, **kw):
        widths.append(int(ids.shape[0] * ids.shape[1]))
        return real(pair, point, verifier, ids, mask, **kw)

    monkeypatch.setattr(point_module, "decode", spy)
    point = {"method": "autoregressive", "temperature": 0.0}
    _, given = ev.run_point(pair, task, point, None, batch_size=4, seed=0)
    padded_given, widths[:] = sum(widths), []
    _, sorted_rows = ev.run_point(pair, task, point, None, batch_size=4, seed=0, by_length=True)
    assert sum(widths) < padded_given and sum(widths) == sum(
        len(b) * max(lengths[j] for j in b) for b in point_module.batch_indices(lengths, 4, True)
    )
    assert [r["example_id"] for r in sorted_rows] == [r["example_id"] for r in given]
    assert [r["completion"] for r in sorted_rows] == [r["completion"] for r in given]


def test_no_warm_up_at_the_batch_size_without_a_timed_pass_there(tmp_path, toy_tiny_dir, monkeypatch):
    """timing.repeats=0 (scored once, timed alone at batch 1): the warm-up batch at the sweep's batch
    size warmed nothing up; only the latency pass's warm-up of one example runs."""
    pair = hydra.utils.instantiate(compose_eval(tmp_path, toy_tiny_dir).pair)
    task = ToyTask.load(n_examples=6)
    rows, real = [], point_module.decode

    def spy(pair, point, verifier, ids, mask, **kw):
        rows.append(int(ids.shape[0]))
        return real(pair, point, verifier, ids, mask, **kw)

    monkeypatch.setattr(point_module, "decode", spy)
    point = {"method": "autoregressive", "temperature": 1.0}
    timing = {"warmup": 1, "repeats": 0, "latency": True, "latency_examples": 2, "latency_repeats": 1}
    out = point_module.time_point(pair, task, point, None, batch_size=4, seed=0, timing=timing)
    # the latency warm-up, its pass over 2 examples, and the same 2 timed to their first token
    assert rows == [1, 1, 1, 1, 1] and "wall_time_s" not in out and out["latency_examples"] == 2
    rows[:] = []
    point_module.time_point(pair, task, point, None, batch_size=4, seed=0, timing={**timing, "repeats": 1})
    assert rows == [4, 4, 2, 1, 1, 1, 1, 1]  # the warm-up batch, one pass, then the latency passes


def test_batch_by_length_is_in_the_settings_fingerprint(tmp_path, toy_tiny_dir):
    from diversed.sweep.grid import settings_fingerprint

    task = ToyTask.load(n_examples=2)
    plain = settings_fingerprint(compose_eval(tmp_path, toy_tiny_dir), task, None)
    assert "batch_by_length" not in plain  # older records' fingerprints unchanged
    cfg = compose_eval(tmp_path, toy_tiny_dir, "sweep.batch_by_length=true")
    assert settings_fingerprint(cfg, task, None) == {**plain, "batch_by_length": True}


class StrictToy(ToyTask):
    """A task defined outside the package with one option of its own: declared, and nothing else."""

    name = "toy_strict"
    options = {"strict": Option(False, bool, "the completion must be the answer alone")}

    def score(self, example, completion):
        if self.strict:
            return float(self.truncate(completion).strip() == str(example["answer"]))
        return super().score(example, completion)


def test_a_task_with_its_own_option_needs_no_edit_to_the_runner(tmp_path, toy_tiny_dir, monkeypatch):
    """Registered, its option is a known key, checked before anything loads, passed to the task,
    recorded in its settings and in every record (the runner reads the task's `option_settings`)."""
    monkeypatch.setitem(TASKS, "toy_strict", StrictToy)
    bad = small_eval(
        tmp_path / "bad", toy_tiny_dir, "task.name=toy_strict", "+task.strict=maybe", "+task.strikt=1"
    )
    with pytest.raises(ConfigError) as err:
        ev.evaluate(bad)
    assert "task.strict='maybe': Input should be a valid boolean" in str(err.value)
    assert "task.strikt=1: unknown key; did you mean task.strict?" in str(err.value)
    out = tmp_path / "run"
    ev.evaluate(
        small_eval(
            out, toy_tiny_dir, "task.name=toy_strict", "+task.strict=true", "sweep.methods=[autoregressive]"
        )
    )
    (record,) = load_results(out).to_dict("records")
    assert record["task"] == "toy_strict" and record["strict"] is True and record["stop_early"] is True
    assert json.loads((out / "settings" / f"{record['settings']}.json").read_text())["task"]["strict"] is True


def test_bad_sweep_fails_before_loading_the_pair(tmp_path, toy_tiny_dir):
    for override, message in (
        ("sweep.weights=[0.5,1.5]", "sweep.weights"),
        ("sweep.draft_lengths=[0]", "draft_lengths"),
        ("sweep.heads=[/nonexistent/head]", "not a saved head"),
        ("sweep.methods=[lossless,beam]", "unknown"),
    ):
        cfg = compose_eval(tmp_path, toy_tiny_dir, override)
        with open_dict(cfg):
            cfg.pair = OmegaConf.create(
                {"_target_": "builtins.exec", "source": "raise AssertionError('pair loaded')"}
            )
        with pytest.raises(ValueError, match=message):
            ev.evaluate(cfg)


def test_head_for_another_pair_is_refused(tmp_path, toy_tiny_dir):
    wrong = tmp_path / "wrong_head"
    WeightHead(7, 9).save_pretrained(wrong)
    cfg = compose_eval(tmp_path / "run", toy_tiny_dir, f"sweep.heads=[{wrong}]")
    with pytest.raises(ValueError, match="hidden sizes"):
        ev.evaluate(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_multirun_fans_out_over_coarse_axes(tmp_path, toy_tiny_dir, launcher):
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "diversed.evaluate",
        "-m",
        f"hydra/launcher={launcher}",
        "+experiment=toy",
        "seed=0,1",
        "task.n_examples=4",
        "task.max_new_tokens=4",
        "sweep.draft_lengths=[2]",
        "sweep.weights=[0.5]",
        "sweep.temperatures=[1.0]",
        "sweep.methods=[autoregressive,lossless,static]",
        f"hydra.sweep.dir={tmp_path}",
        "timing.repeats=1",
        "sweep.num_seeds=1",
        *pair_overrides(toy_tiny_dir),
    ]
    subprocess.run(cmd, check=True, timeout=900)
    df = load_results(tmp_path)
    assert sorted(df.seed.unique().tolist()) == [0, 1] and len(df) == 6
    # each job's directory named by what the sweep varies (diversed/config/jobs.py), under either launcher
    assert sorted(p.parent.name for p in tmp_path.glob("*/results.jsonl")) == ["seed=0", "seed=1"]
    # joblib's default n_jobs=-1 times the jobs side by side: each record says so
    beside = {(t or {}).get("parallel_launcher") for t in df.timing}
    assert beside == ({"joblib n_jobs=-1"} if launcher == "joblib" else {None})


def test_multirun_job_directories_stay_short_and_distinct():
    from diversed.config.jobs import short_dirname

    assert short_dirname("seed=0,task=toy") == "seed=0,task=toy"
    assert short_dirname("pair.target=/m/t") == "pair.target=_m_t" and short_dirname("") == "single"
    long = ",".join(f"sweep.option_{i}=[{i},{i + 1}]" for i in range(20))
    a, b = short_dirname(long), short_dirname(long.replace("option_19", "option_x"))
    assert len(a) == len(b) == 120 and a != b and a == short_dirname(long) and a.startswith(long[:100])


def test_the_runner_does_not_import_lightning():
    """`python -m diversed.evaluate` needs no training stack: importing lightning alone took 9 s of
    the runner's 11 s start-up on the development machine (every job of a process-per-job sweep
    pays it)."""
    import subprocess
    import sys

    code = (
        "import sys, diversed.evaluate; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ----------------------------------------------------------------------------- settings, timing, reading


SMALL_ONE = [
    "sweep.methods=[autoregressive,lossless,static]",
    "sweep.draft_lengths=[2]",
    "sweep.weights=[0.5]",
    "sweep.temperatures=[1.0]",
]


def small_eval(out, pair_dir, *overrides):
    return compose_eval(out, pair_dir, *SMALL_ONE, *overrides)


def test_a_changed_setting_gives_new_points_and_the_same_settings_resume_without_the_pair(
    tmp_path, toy_tiny_dir, monkeypatch
):
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    first = load_results(tmp_path)
    assert len(first) == 3 and first.settings.nunique() == 1
    # the same command again: nothing runs, and the pair is not even loaded
    from transformers import PreTrainedModel

    monkeypatch.setattr(
        PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("pair loaded"))
    )
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    monkeypatch.undo()
    # each setting that changes outputs gives new points; the old records stay
    first_tokens = []  # what the engine was asked for, through evaluate's engine options
    engine = point_module.speculative_generate
    spy = lambda *a, **k: first_tokens.append(k["first_token"]) or engine(*a, **k)  # noqa: E731
    monkeypatch.setattr(point_module, "speculative_generate", spy)
    for i, override in enumerate(
        [
            "task.max_new_tokens=4",
            "sweep.batch_size=3",
            "engine.bonus_token=target",
            "engine.first_token=target",
            "task.stop=['+']",
            "seed=1",
        ]
    ):
        first_tokens.clear()
        ev.evaluate(small_eval(tmp_path, toy_tiny_dir, override))
        df = load_results(tmp_path)
        assert len(df) == 3 * (i + 2) and df.settings.nunique() == i + 2, override
        assert set(first_tokens) == {"target" if "first_token" in override else "ensemble"}, override
    assert len(list((tmp_path / "configs").glob("*.yaml"))) == 7  # every configuration that made records
    settings = json.loads(next((tmp_path / "settings").glob("*.json")).read_text())
    assert {"task", "pair", "engine", "batch_size", "seed"} <= set(settings)
    assert settings["pair"]["target"]["weights"] and settings["task"]["prompts"]


def test_fresh_rows_are_new_points_in_the_same_comparison_group(tmp_path, toy_tiny_dir):
    """task.skip_examples=K: rows none of task.n_examples=K's, new points in the same directory (never
    resumed from the first run's), in its comparison group (which rows is not the protocol); 0 is the
    first run's settings, resumed."""
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "task.skip_examples=0"))
    assert len(load_results(tmp_path)) == 3
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "task.skip_examples=6"))
    df = load_results(tmp_path)
    assert len(df) == 6 and df.settings.nunique() == 2 and df.comparison_group.nunique() == 1
    ids = {
        digest: {r["example_id"] for k in group.key for r in read_examples(tmp_path, k)}
        for digest, group in df.groupby("settings")
    }
    first, fresh = ids.values()
    assert len(first) == len(fresh) == 6 and not first & fresh
    said = [json.loads(f.read_text())["task"] for f in (tmp_path / "settings").glob("*.json")]
    assert sorted(t.get("skip_examples", 0) for t in said) == [0, 6]


def test_truncation_reaches_every_decoder_and_its_defaults_keep_old_digests(
    tmp_path, toy_tiny_dir, monkeypatch
):
    """engine.top_k / engine.top_p go to our engine, our autoregressive loop and transformers alike;
    at their defaults (no truncation) they are left out of the settings, so run directories from
    before the options resume; set, they are in the settings and give new points."""
    from diversed.models.pair import describe_pair

    asked, decoders = [], ("speculative_generate", "autoregressive_generate", "transformers_generate")

    def spy(name, real):
        return lambda *a, **k: asked.append((name, k["top_k"], k["top_p"])) or real(*a, **k)

    for name in decoders:
        monkeypatch.setattr(point_module, name, spy(name, getattr(point_module, name)))
    methods = "sweep.methods=[autoregressive,hf_generate,lossless]"
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir, methods, "engine.top_k=5", "engine.top_p=0.9"))
    assert {a[0] for a in asked} == set(decoders)
    assert {a[1:] for a in asked} == {(5, 0.9)}
    settings = [json.loads(p.read_text()) for p in (tmp_path / "settings").glob("*.json")]
    assert [(s["engine"]["top_k"], s["engine"]["top_p"]) for s in settings] == [(5, 0.9)]

    cfg = small_eval(tmp_path, toy_tiny_dir)
    task, card = hydra.utils.instantiate(cfg.task), describe_pair(cfg.pair)
    now = ev.settings_fingerprint(cfg, task, card)
    with open_dict(cfg):  # a config from before the options
        del cfg.engine.top_k, cfg.engine.top_p
    assert "top_k" not in now["engine"] and "top_p" not in now["engine"]
    assert digest(now) == digest(ev.settings_fingerprint(cfg, task, card))
    with open_dict(cfg):
        cfg.engine.top_k = 50
    assert ev.settings_fingerprint(cfg, task, card)["engine"]["top_k"] == 50


def test_another_pair_under_the_same_name_is_not_resumed(tmp_path, toy_tiny_dir):
    """Two pairs given one name (pair.name=tiny-toy): the weights' digest tells them apart."""
    ev.evaluate(small_eval(tmp_path / "run", toy_tiny_dir))
    other = tmp_path / "other"
    shutil.copytree(toy_tiny_dir, other)
    from safetensors.torch import load_file, save_file

    state = load_file(other / "draft" / "model.safetensors")
    save_file(
        {k: v * 1.01 for k, v in state.items()},
        other / "draft" / "model.safetensors",
        metadata={"format": "pt"},
    )
    ev.evaluate(small_eval(tmp_path / "run", other))
    df = load_results(tmp_path / "run")
    assert len(df) == 6 and df.settings.nunique() == 2 and set(df.pair) == {"tiny-toy"}


def test_records_from_before_fingerprints_are_read_but_not_resumed(tmp_path, toy_tiny_dir, caplog):
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    old = []
    for line in lines:  # as an older version wrote them: no settings, the key without it
        r = json.loads(line)
        r.pop("settings")
        r["key"] = r["key"].rsplit("|settings=", 1)[0]
        old.append(json.dumps(r))
    (tmp_path / "results.jsonl").write_text("\n".join(old) + "\n")
    assert len(load_results(tmp_path)) == 3  # plots read them
    with caplog.at_level("WARNING"):
        ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    assert "3 records from before settings fingerprints" in caplog.text
    df = load_results(tmp_path)
    assert len(df) == 6 and df.settings.isna().sum() == 3  # re-run beside the old ones


# ----------------------------------------------------------------------------- the run directory under faults


def no_pair(monkeypatch):
    from transformers import PreTrainedModel

    monkeypatch.setattr(
        PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("pair loaded"))
    )


def test_a_second_evaluate_on_one_directory_is_refused_before_the_pair_loads(
    tmp_path, toy_tiny_dir, monkeypatch
):
    from diversed.files.rundir import hold

    cfg = small_eval(tmp_path, toy_tiny_dir)
    with (
        hold(tmp_path),
        monkeypatch.context() as m,
    ):  # another writer (this process holds it apart: one writer)
        no_pair(m)
        with pytest.raises(ConfigError, match=r"being written by another process \(pid \d+ on .*wait for it"):
            ev.evaluate(cfg)
        ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "sweep.dry_run=true"))  # a dry run only reads: no lock
    assert not (tmp_path / "results.jsonl").exists()
    ev.evaluate(cfg)  # released: it runs
    assert len(load_results(tmp_path)) == 3


def test_resuming_skips_bad_lines_redoes_their_points_and_rewrites_a_torn_settings_file(
    tmp_path, toy_tiny_dir, monkeypatch
):
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    results = tmp_path / "results.jsonl"
    lines = results.read_bytes().splitlines(keepends=True)
    lossless = json.loads(lines[1])
    (settings,) = (tmp_path / "settings").glob("*.json")
    results.write_bytes(
        lines[0]
        + b'{"pair": "\xff"}\n[1, 2, 3]\n{"score": 1}\n'
        + json.dumps({**lossless, "score": 9.5}).encode()
        + b"\n"
        + lines[2]
    )
    settings.write_bytes(settings.read_bytes()[:40])  # as a kill left it under an older version
    ran = []
    real = ev.run_point
    monkeypatch.setattr(
        ev,
        "run_point",
        lambda pair, task, point, *a, **k: ran.append(point) or real(pair, task, point, *a, **k),
    )
    with pytest.warns(UserWarning, match=r"line 2: not UTF-8; line 3: a JSON list.*line 5: score is 9.5"):
        ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    assert [p["method"] for p in ran] == ["lossless"]  # its line was impossible: the point is redone, once
    assert json.loads(settings.read_text())["seed"] == 0  # written again
    with pytest.warns(UserWarning, match="skipping 4 unreadable lines"):
        df = load_results(tmp_path)
    assert len(df) == 3 and df.score.between(0, 1).all()


@pytest.mark.slow
def test_a_finished_sweep_reruns_on_a_read_only_directory(tmp_path, toy_tiny_dir, monkeypatch):
    """In-process (the runner), then as a user runs it, where a read-only mount can be made (Hydra's own
    log file and config copy)."""
    import contextlib
    import subprocess
    import sys

    ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    with monkeypatch.context() as m:
        m.setattr(
            ev, "hold", lambda run_dir: contextlib.nullcontext(False)
        )  # what a read-only directory gives
        no_pair(m)
        assert (
            ev.evaluate(small_eval(tmp_path, toy_tiny_dir)) == tmp_path
        )  # every point done: out, writing nothing
        assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before
        with pytest.raises(ConfigError, match="cannot be written .* 1 of its 4 grid points are still to run"):
            ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "sweep.weights=[0.5,1.0]"))

    probe = (
        subprocess.run(["unshare", "-rm", "true"], capture_output=True) if shutil.which("unshare") else None
    )
    if os.geteuid() != 0:
        wrap = []
        for p in [tmp_path, *tmp_path.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
    elif probe is not None and probe.returncode == 0:
        wrap = [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f'mount --bind -o ro "{tmp_path}" "{tmp_path}" && '
            f'mount -o remount,bind,ro "{tmp_path}" "{tmp_path}" && exec "$0" "$@"',
        ]
    else:
        pytest.skip("no read-only directory can be made here (root without user namespaces)")
    cmd = [
        *wrap,
        sys.executable,
        "-m",
        "diversed.evaluate",
        *SMALL,
        *SMALL_ONE,
        *pair_overrides(toy_tiny_dir),
        f"hydra.run.dir={tmp_path}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "Every grid point is done" in proc.stdout + proc.stderr
    assert proc.stderr.count("cannot write the log file") == 1
    assert not (tmp_path / ".hydra").exists() and not (tmp_path / "evaluate.log").exists()


def test_points_are_timed_apart_from_scoring(tmp_path, toy_tiny_dir):
    cfg = small_eval(
        tmp_path,
        toy_tiny_dir,
        "timing.repeats=3",
        "timing.warmup=1",
        "timing.latency=true",
        "timing.latency_repeats=2",
        "sweep.methods=[autoregressive,hf_generate,lossless,hf_static]",
    )
    ev.evaluate(cfg)
    df = load_results(tmp_path).set_index("method")
    for method, r in df.iterrows():
        assert len(r.wall_time_runs) == 3 and r.wall_time_s == pytest.approx(sorted(r.wall_time_runs)[1]), (
            method
        )
        assert r.wall_time_ci_low <= r.wall_time_s <= r.wall_time_ci_high
        assert (
            len(r.latency_runs) == 2
            and r.latency_examples == 6
            and r.latency_s > 0
            and r.latency_new_tokens > 0
        )
        assert r.time_per_token_s == pytest.approx(r.wall_time_s / r.new_tokens)
        assert r.timing["repeats"] == 3 and r.timing["batch_size"] == (1 if method == "hf_static" else 4)
    ar = df.loc["autoregressive"]
    assert ar.normalized_time == 1.0 and ar.normalized_latency == 1.0
    lossless = df.loc["lossless"]
    assert lossless.normalized_time == pytest.approx(lossless.wall_time_s / ar.wall_time_s)
    assert lossless.normalized_time_ci_low < lossless.normalized_time < lossless.normalized_time_ci_high
    assert lossless.normalized_time_batch_size == 4
    # transformers' static ensemble decodes at batch 1: against autoregressive decoding at batch 1
    hf = df.loc["hf_static"]
    assert (
        hf.normalized_time == pytest.approx(hf.wall_time_s / 6 / ar.latency_s)
        and hf.normalized_time_batch_size == 1
    )
    assert df.loc["hf_generate"].acceptance_rate is None or pd_isna(df.loc["hf_generate"].acceptance_rate)


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def test_show_prints_examples_side_by_side(tmp_path, toy_tiny_dir, capsys):
    from diversed.show import run as show

    ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "sweep.weights=[0.0,1.0]"))
    text = show([str(tmp_path), "--all", "--n", "2"])
    rows = load_results(tmp_path)
    ids = [
        json.loads(line)["example_id"]
        for line in next((tmp_path / "examples").glob("*.jsonl")).read_text().splitlines()
    ]
    assert (
        f"== example {ids[0]}" in text
        and f"== example {ids[1]}" in text
        and f"== example {ids[2]}" not in text
    )
    for label in ("Autoregressive", "Lossless SD, N=2", "Static w=0, N=2", "Static w=1, N=2"):
        assert label in text
    assert text.count("reference ") == 2 and "prompt    …Q: " in text and len(rows) == 4
    one = show([str(tmp_path), "--examples", ids[2]])
    assert f"== example {ids[2]}" in one and "== example" in capsys.readouterr().out


def test_plots_keep_different_settings_apart(tmp_path, toy_tiny_dir):
    from diversed.plot import plot_pareto, summary_table

    ev.evaluate(small_eval(tmp_path, toy_tiny_dir))
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "task.max_new_tokens=4"))
    df = load_results(tmp_path)
    paths = plot_pareto(df, tmp_path / "plots", formats=("png",))
    assert len(paths) == 2 and all("_s" in p.stem for p in paths)  # one figure per settings, not averaged
    table = summary_table(df)
    assert len(table) == 6 and all("[settings " in label for _, label in table.index)


def test_the_sweep_runs_every_baseline(tmp_path, toy_tiny_dir):
    """Lossy SD, cascades, typical acceptance, a fine-tuned draft and transformers' static ensemble
    in one sweep, each point with its knobs in its own fields; a 'fine-tuned' draft that is the pair's
    own draft gives lossless's very tokens, and transformers' static ensemble (greedy, target bonus)
    gives ours."""
    ft = tmp_path / "ft-draft"
    shutil.copytree(toy_tiny_dir / "draft", ft)
    cfg = small_eval(
        tmp_path / "run",
        toy_tiny_dir,
        "sweep.methods=[autoregressive,lossless,finetuned_draft,static,hf_static,lossy,cascade,typical]",
        f"sweep.draft_models=[{ft}]",
        "sweep.weights=[0.0,0.5]",
        "sweep.lenience=[0.5]",
        "sweep.cascade_rules=[chow,opt]",
        "sweep.cascade_alphas=[0.2]",
        "sweep.typical_epsilons=[0.09]",
        "sweep.typical_deltas=[0.3]",
        "sweep.temperatures=[0.0]",
        "engine.bonus_token=target",
    )
    ev.evaluate(cfg)
    df = load_results(tmp_path / "run")
    counts = df.method.value_counts().to_dict()
    assert counts == {
        "autoregressive": 1,
        "lossless": 1,
        "finetuned_draft": 1,
        "static": 2,
        "hf_static": 1,
        "lossy": 1,
        "cascade": 2,
        "typical": 1,
    }  # hf_static: 0 < w < 1 only
    r = df.set_index("method")
    assert r.loc["lossy", "lenience"] == 0.5 and r.loc["typical", "typical_epsilon"] == 0.09
    assert sorted(df[df.method == "cascade"].cascade_rule) == ["chow", "opt"]
    assert r.loc["finetuned_draft", "draft_model"] == str(ft) and r.loc["hf_static", "weight"] == 0.5
    assert r.loc["hf_static", "timing"]["batch_size"] == 1  # transformers' assisted generation: batch 1
    store = ResultStore(tmp_path / "run")

    def completions(method, weight=None):
        rec = next(x for x in store.records() if x["method"] == method and x.get("weight") == weight)
        return [e["completion"] for e in store.examples(rec["key"])]

    assert completions("finetuned_draft") == completions("lossless")
    assert completions("hf_static", 0.5) == completions("static", 0.5)
    assert (
        abs(
            r.loc["hf_static", "acceptance_rate"]
            - df[(df.method == "static") & (df.weight == 0.5)].acceptance_rate.iloc[0]
        )
        < 0.15
    )


def test_seeds_are_a_grid_axis_and_splits_share_a_comparison_group(tmp_path, toy_tiny_dir):
    # two seeds: every point twice, each normalised by its own seed's autoregressive time; the two
    # seeds share a settings group (averaged together), a validation run shares the comparison group
    over = [
        "sweep.methods=[autoregressive,lossless]",
        "sweep.draft_lengths=[2]",
        "sweep.temperatures=[1.0]",
        "sweep.num_seeds=2",
        "seed=3",
    ]
    ev.evaluate(compose_eval(tmp_path / "test", toy_tiny_dir, *over))
    ev.evaluate(compose_eval(tmp_path / "val", toy_tiny_dir, *over, "task.split=validation"))
    test, val = load_results(tmp_path / "test"), load_results(tmp_path / "val")
    assert (
        sorted(test.seed) == [3, 3, 4, 4] and set(test.split) == {"test"} and set(val.split) == {"validation"}
    )
    assert test.settings.nunique() == 2 and test.settings_group.nunique() == 1
    assert (test[test.method == "autoregressive"].normalized_time == 1.0).all()
    for _, g in test.groupby("seed"):
        ar, sd = g.set_index("method").loc["autoregressive"], g.set_index("method").loc["lossless"]
        assert sd.normalized_time == pytest.approx(sd.wall_time_s / ar.wall_time_s)
    assert set(val.settings_group).isdisjoint(test.settings_group)  # other examples
    assert set(val.comparison_group) == set(test.comparison_group)  # the same protocol
    # seeds change the sampled outputs, and rows carry both acceptance denominators
    lossless = test[test.method == "lossless"]
    rows = [read_examples(tmp_path / "test", k) for k in lossless.key]
    assert [r["completion"] for r in rows[0]] != [r["completion"] for r in rows[1]]
    assert all(
        r["proposed_drafts"] >= r["verified_drafts"] >= r["accepted_drafts"] for rs in rows for r in rs
    )
    for rs, (_, rec) in zip(rows, lossless.iterrows(), strict=True):
        accepted = sum(r["accepted_drafts"] for r in rs)
        assert accepted / sum(r["proposed_drafts"] for r in rs) == pytest.approx(rec.acceptance_rate)
        assert accepted / sum(r["verified_drafts"] for r in rs) == pytest.approx(rec.alpha)


def test_a_dry_run_lists_the_points_and_estimates_from_finished_ones_without_loading_weights(
    tmp_path, toy_tiny_dir, monkeypatch, capsys
):
    from transformers import PreTrainedModel

    real = PreTrainedModel.from_pretrained.__func__
    monkeypatch.setattr(
        PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("weights loaded"))
    )
    # nothing finished: every point to run, and no number made up
    assert ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "sweep.dry_run=true")) == tmp_path
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "to run  Autoregressive  T=1  seed=0",
        "to run  Lossless SD  N=2  T=1  seed=0",
        "to run  Static w=0.5  N=2  T=1  seed=0",
    ]
    assert "3 grid points, 0 done, 3 to run on 6 examples each: no estimate (no finished points" in out[3]
    assert "task.n_examples=8" in out[3] and not (tmp_path / "results.jsonl").exists()

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(real))
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "sweep.methods=[autoregressive]"))
    done = load_results(tmp_path)
    monkeypatch.setattr(
        PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("weights loaded"))
    )
    ev.evaluate(small_eval(tmp_path, toy_tiny_dir, "sweep.dry_run=true", "timing.repeats=2"))
    out = capsys.readouterr().out.splitlines()
    assert [line[:6] for line in out[:3]] == ["  done", "to run", "to run"]
    assert "3 grid points, 1 done, 2 to run on 6 examples each: about " in out[3]
    assert (
        "from 1 finished points in this run: the median seconds per example of every finished point "
        "(2 points)" in out[3]
    )
    # the autoregressive point's seconds per example, times 1 scored + 2 timed passes of 6 and no warm-up
    # (tests' timing)
    seconds = 2 * float(done.wall_time_s.iloc[0]) / 6 * 6 * 3  # 2 points
    assert float(re.search(r"about ([0-9.e-]+) s", out[3]).group(1)) == pytest.approx(seconds, rel=0.05)
    assert len(load_results(tmp_path)) == 1  # nothing ran


def test_inside_a_point_a_bar_counts_the_examples_decoded_and_timed(tmp_path, toy_tiny_dir, capsys):
    timing = [
        "timing.warmup=1",
        "timing.latency=true",
        "timing.latency_examples=2",
        "timing.latency_repeats=2",
    ]
    ev.evaluate(
        small_eval(
            tmp_path / "on", toy_tiny_dir, "sweep.methods=[autoregressive]", "runtime.progress=true", *timing
        )
    )
    err = capsys.readouterr().err
    # decode: 6 examples; timing: a warm-up batch of 4, 1 pass of 6, a warm-up of 1 and 2 passes of 2 alone,
    # and 2 more of 2 alone timed to their first token
    assert re.search(r"decode: +\d+%\|[^|]*\| \d+/6 \[", err) and re.search(
        r"timing: +\d+%\|[^|]*\| \d+/19 \[", err
    )
    assert "point" in err  # the bar over points is still there
    ev.evaluate(small_eval(tmp_path / "off", toy_tiny_dir, "sweep.methods=[autoregressive]", *timing))
    err = capsys.readouterr().err
    assert "decode" not in err and "timing:" not in err and "example/s" not in err


def test_cut_prompts_are_said_and_their_rows_hold_what_the_model_saw(tmp_path, toy_tiny_dir, caplog):
    cfg = compose_eval(
        tmp_path,
        toy_tiny_dir,
        "task.max_prompt_tokens=3",
        "sweep.methods=[autoregressive]",
        "sweep.temperatures=[0.0]",
        "timing.repeats=0",
    )
    with caplog.at_level("WARNING"):
        ev.evaluate(cfg)
    (record,) = load_results(tmp_path).to_dict("records")
    rows = read_examples(tmp_path, record["key"])
    task = ToyTask.load(split="test", n_examples=6)
    tok = hydra.utils.instantiate(cfg.pair).tokenizer
    full = [tok(task.full_prompt(e))["input_ids"] for e in task]
    assert len(rows) == 6 and all(len(ids) > 3 for ids in full)
    assert [r["prompt"] for r in rows] == [tok.decode(ids[-3:]) for ids in full]  # not the uncut prompt
    assert [r["prompt_tokens_cut"] for r in rows] == [len(ids) - 3 for ids in full]
    said = [m for m in caplog.messages if "task.max_prompt_tokens=3" in m]
    assert len(said) == 1, said  # once per task, not per grid point
    assert (
        said[0].startswith("toy: 6 of 6 prompts are longer")
        and f"the longest has {max(map(len, full))} tokens" in said[0]
    )


def test_a_prompt_cache_reuses_prompt_passes_changes_no_output_and_times_apart(tmp_path, toy_tiny_dir):
    """sweep.prompt_cache_gb: a point that read its prompts from an earlier point's passes decodes
    exactly what it decodes alone; the setting is in the fingerprint; the scored pass (which reused
    them) gives no time, the latency pass (which reads every prompt again) does."""
    from diversed.sweep.grid import settings_fingerprint

    common = (
        "sweep.prompt_cache_gb=0.5",
        "sweep.temperatures=[1.0]",
        "sweep.draft_lengths=[3]",
        "sweep.weights=[0.5]",
        "timing.repeats=0",
        "timing.latency=true",
        "timing.latency_examples=2",
        "timing.latency_repeats=1",
    )
    three = "sweep.methods=[autoregressive,lossless,static]"
    both = compose_eval(tmp_path / "both", toy_tiny_dir, *common, three)
    alone = compose_eval(tmp_path / "alone", toy_tiny_dir, *common, "sweep.methods=[static]")
    task = ToyTask.load(n_examples=2)
    plain = settings_fingerprint(compose_eval(tmp_path / "p", toy_tiny_dir), task, None)
    assert "prompt_pass" not in plain  # older fingerprints unchanged
    assert settings_fingerprint(both, task, None) == {**plain, "prompt_pass": "separate"}
    ev.evaluate(both)
    ev.evaluate(alone)
    rows = {}
    for name in ("both", "alone"):
        df = load_results(tmp_path / name)
        rec = df[df.method == "static"].iloc[0]
        assert rec.prompt_cache and pd.isna(rec.wall_time_s) and rec.latency_s > 0
        rows[name] = [r["completion"] for r in read_examples(tmp_path / name, rec.key)]
    assert rows["both"] == rows["alone"]  # a hit (after two points) and a miss (first) decode alike
    df = load_results(tmp_path / "both")
    assert df.normalized_latency.notna().all() and df.normalized_time.isna().all()
    # the seconds spent computing prompt passes: the target's at the first point, the draft's at the
    # second (the target's kept), none at the third; the static point alone computes both
    spent = dict(zip(df.method, df.prompt_pass_s, strict=True))
    assert spent["autoregressive"] > 0 and spent["lossless"] > 0 and spent["static"] == 0
    assert load_results(tmp_path / "alone").prompt_pass_s.iloc[0] > 0


# ----------------------------------------------------------------------- numbers checked where they enter


def refuse_weights(monkeypatch):
    from transformers import PreTrainedModel

    monkeypatch.setattr(
        PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("weights loaded"))
    )


def test_a_tiny_temperature_is_recorded_as_given_and_is_not_greedy(tmp_path, toy_tiny_dir):
    """T = 1e-8 samples, T = 0 is greedy: two points each, in one folder, each timed against the
    autoregressive point of its own T (keyed as 0.0, the second run was "already done")."""
    from diversed.sweep.times import baseline_key

    grid = ["sweep.methods=[autoregressive,static]", "sweep.draft_lengths=[2]", "sweep.weights=[0.5]"]
    ev.evaluate(compose_eval(tmp_path, toy_tiny_dir, *grid, "sweep.temperatures=[0.0]"))
    ev.evaluate(compose_eval(tmp_path, toy_tiny_dir, *grid, "sweep.temperatures=[1e-8]"))
    df = load_results(tmp_path)
    assert sorted(df.temperature) == [0.0, 0.0, 1e-8, 1e-8] and df.key.nunique() == 4
    assert df.key.str.contains(r"\|temperature=1e-08\|").sum() == 2
    for t in (0.0, 1e-8):
        at = df[df.temperature == t].set_index("method")
        ratio = at.wall_time_s["static"] / at.wall_time_s["autoregressive"]
        assert at.normalized_time["static"] == pytest.approx(ratio)
    greedy, tiny = (df[(df.temperature == t) & (df.method == "autoregressive")].iloc[0] for t in (0.0, 1e-8))
    assert baseline_key(greedy) != baseline_key(tiny)  # two baselines, not one


@pytest.mark.parametrize("t", [0.0, 0.1, 0.7, 1.0, 2.5, 0.05, 1e-6, 0.123456789, 1.23456789, 0.50000000001])
def test_keys_of_numbers_written_with_six_decimals_or_of_0_1_and_more_are_unchanged(t):
    """What older keys held (6 decimals) is what a key holds now for these: their records resume."""
    from diversed.sweep.results import grid_key

    key = grid_key(pair="p", task="toy", method="static", weight=t if t <= 1 else 0.5, temperature=t)
    assert f"|temperature={json.dumps(round(t, 6) + 0.0)}|" in key
    assert t > 1 or f"|weight={json.dumps(round(t, 6) + 0.0)}|" in key


def test_a_draft_length_a_round_cannot_draft_is_refused_before_the_pair_loads(
    tmp_path, toy_tiny_dir, monkeypatch
):
    """With 6 new tokens a round drafts at most 5 (4 after a first token from the target): a larger N
    would run as that and be recorded as given."""
    refuse_weights(monkeypatch)
    with pytest.raises(
        ConfigError,
        match=r"N=1000 is more than the engine drafts in a round with task\.max_new_tokens=6: at most 5 "
        r".*Set sweep\.draft_lengths to values up to 5, or raise task\.max_new_tokens above 1000",
    ):
        ev.evaluate(compose_eval(tmp_path, toy_tiny_dir, "sweep.draft_lengths=[2,1000]"))
    with pytest.raises(ConfigError, match=r"N=5 is .*engine\.first_token=target.*at most 4"):
        ev.evaluate(
            compose_eval(tmp_path, toy_tiny_dir, "sweep.draft_lengths=[5]", "engine.first_token=target")
        )
    for fine in (  # the cap itself; and an N no method uses
        ["sweep.draft_lengths=[5]"],
        ["sweep.draft_lengths=[1000]", "sweep.methods=[autoregressive]"],
    ):
        assert ev.evaluate(compose_eval(tmp_path, toy_tiny_dir, *fine, "sweep.dry_run=true")) == tmp_path


def test_empty_prompts_are_named_in_the_log_before_the_pair_loads_and_still_run(
    tmp_path, toy_tiny_dir, caplog
):
    rows = [
        {"id": "fine", "prompt": "Q: 1+2=", "answer": "3"},
        {"id": "blank", "prompt": "  \n", "answer": "1"},
        {"id": "nothing", "prompt": "", "answer": "2"},
    ]
    data = tmp_path / "toy.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = compose_eval(
        tmp_path / "run",
        toy_tiny_dir,
        f"task.data_files={data}",
        "task.n_examples=null",
        "sweep.methods=[autoregressive]",
        "sweep.temperatures=[0.0]",
        "timing.repeats=0",
    )
    with caplog.at_level("INFO"):
        ev.evaluate(cfg)
    said = [i for i, m in enumerate(caplog.messages) if "prompts are empty" in m]
    assert len(said) == 1  # once per task, not per point or pass
    message = caplog.messages[said[0]]
    assert message.startswith("toy: 2 of 3 prompts are empty (examples blank, nothing)")
    assert "none holds any text of its example" in message
    loading = next(i for i, m in enumerate(caplog.messages) if m.startswith("Loading pair"))
    assert said[0] < loading
    (record,) = load_results(tmp_path / "run").to_dict("records")
    assert [r["example_id"] for r in read_examples(tmp_path / "run", record["key"])] == [
        "fine",
        "blank",
        "nothing",
    ]


def test_an_int8_target_is_another_target_and_paired_runs_pairs_it_with_the_float_one(
    tmp_path, toy_tiny_dir, capsys
):
    """`pair.target_quantize=int8` reaches the pair evaluate loads (its settings name the scheme, its
    points are new ones, not the float target's resumed), and scripts/paired_runs.py pairs the two
    runs' autoregressive decoding by example, naming the setting that differs."""
    import importlib.util

    from diversed.models.quantize import scheme

    runs = {how: tmp_path / how for how in ("none", "int8")}
    for how, out in runs.items():
        ev.evaluate(
            small_eval(out, toy_tiny_dir, "sweep.methods=[autoregressive]", f"pair.target_quantize={how}")
        )
    settings = {
        how: json.loads(next((out / "settings").glob("*.json")).read_text()) for how, out in runs.items()
    }
    assert settings["int8"]["pair"]["target_quantize"] == scheme("int8", anchored=True)
    assert "target_quantize" not in settings["none"]["pair"]  # keys as before the option
    keys = {how: set(load_results(out).key) for how, out in runs.items()}
    assert keys["none"].isdisjoint(keys["int8"])
    spec = importlib.util.spec_from_file_location(
        "paired_runs", Path(__file__).parents[1] / "scripts" / "paired_runs.py"
    )
    paired_runs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(paired_runs)
    capsys.readouterr()
    assert paired_runs.run([str(runs["int8"]), str(runs["none"])]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"toy\w* \(test\), T = 1, autoregressive: A [\d.]+ \[[\d.]+, [\d.]+\], B .* "
        r"A − B [+-][\d.]+ .* over 6 examples",
        out,
    ), out
    assert "differs: pair.target_quantize: " in out and "differs: seed" not in out
    assert paired_runs.run([str(runs["int8"]), str(runs["none"]), "--method", "lossless"]) == 2
    assert paired_runs.run([str(runs["int8"]), str(tmp_path / "nowhere")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    # another setting in the same cell (a shorter budget): refused, not averaged with the first
    ev.evaluate(
        small_eval(runs["none"], toy_tiny_dir, "sweep.methods=[autoregressive]", "task.max_new_tokens=4")
    )
    assert paired_runs.run([str(runs["int8"]), str(runs["none"])]) == 2
    assert "run B holds 2 settings here" in capsys.readouterr().err
