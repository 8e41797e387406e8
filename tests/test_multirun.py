"""A Hydra multirun over the grid as users type it (`-m sweep.weights=0.3,0.7 sweep.draft_lengths=2,3`):
every job runs, a point its siblings share is decoded once and copied, and report, plot, show and
load_results read the multirun's folder (and any set of folders holding the same points) as one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import pair_overrides

from diversed import plot, report, show
from diversed.errors import ConfigError
from diversed.sweep.results import examples_path, load_results, load_runs, read_examples


def _command(sweep_dir: Path, pair_dir: Path, weights: str, lengths: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "diversed.evaluate",
        "-m",
        "+experiment=toy",
        f"sweep.weights={weights}",  # scalars, as a user types a sweep: each job gets one number
        f"sweep.draft_lengths={lengths}",
        "sweep.temperatures=1.0",
        "sweep.methods=[autoregressive,lossless,static]",
        "task.n_examples=4",
        "task.max_new_tokens=4",
        "timing.repeats=1",
        "sweep.num_seeds=1",
        "runtime.progress=false",
        f"hydra.sweep.dir={sweep_dir}",
        *pair_overrides(pair_dir),
        *extra,
    ]


def _multirun(sweep_dir: Path, pair_dir: Path, *extra: str, launcher: str = "basic") -> None:
    cmd = _command(sweep_dir, pair_dir, "0.3,0.7", "2,3", f"hydra/launcher={launcher}", *extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _records(sweep_dir: Path) -> dict[str, list[dict]]:
    return {
        f.parent.name: [json.loads(line) for line in f.read_text().splitlines()]
        for f in sorted(sweep_dir.glob("*/results.jsonl"))
    }


@pytest.fixture(scope="module")
def swept(tmp_path_factory, toy_tiny_dir) -> Path:
    sweep_dir = tmp_path_factory.mktemp("multirun")
    _multirun(sweep_dir, toy_tiny_dir)
    return sweep_dir


def test_a_multirun_over_scalars_runs_every_job_and_decodes_shared_points_once(swept):
    jobs = _records(swept)
    assert sorted(jobs) == [f"sweep.draft_lengths={n},sweep.weights={w}" for n in (2, 3) for w in (0.3, 0.7)]
    for records in jobs.values():  # each job's folder is whole: its three points, as a lone run has them
        assert sorted(r["method"] for r in records) == ["autoregressive", "lossless", "static"]
    decoded = [r for rs in jobs.values() for r in rs if "reused_from" not in r]
    copied = [r for rs in jobs.values() for r in rs if "reused_from" in r]
    # autoregressive once (not 4 times), lossless once per N (not twice), each static point in its job
    assert sorted((r["method"], r["num_draft_tokens"]) for r in decoded) == [
        ("autoregressive", None),
        ("lossless", 2),
        ("lossless", 3),
        *[("static", n) for n in (2, 2, 3, 3)],
    ]
    assert len(copied) == 3 + 2
    first = {r["key"]: r for r in decoded}
    for r in copied:  # a copy is its sibling's record, word for word, and says where it was decoded
        origin = first[r["key"]]
        assert {k: v for k, v in r.items() if k != "reused_from"} == origin
        assert (swept / r["reused_from"] / "results.jsonl").is_file()
        assert r["reused_from"] != ""
    for job, records in jobs.items():  # and its per-example rows are there, for show and the report
        assert len(read_examples(swept / job, records[0]["key"])) == 4
        assert all(examples_path(swept / job, r["key"]).is_file() for r in records)
    static = [r for r in decoded if r["method"] == "static"]
    assert all(r["normalized_time"] is not None for r in static)  # normalised by the copied baseline


def test_every_reader_takes_the_multirun_folder_and_overlapping_folders(swept, tmp_path, capsys):
    job = next(swept.glob("sweep.draft_lengths=2,sweep.weights=0.3"))
    df = load_results(swept)
    assert len(df) == 1 + 2 + 4 and df["key"].is_unique  # each point once
    for given in ([swept], [swept, job], [job, job], [swept, swept]):
        assert len(load_runs(*given)) == len(load_results(*given))
        assert load_runs(*given)["key"].is_unique
    paths = report.run([str(swept), str(job), "--out", str(tmp_path / "report")])
    text = (tmp_path / "report" / "README.md").read_text()
    assert any(p.name == "README.md" for p in paths) and "| SD (lossless) | 3 |" in text
    assert plot.main([str(swept), str(job), "--out", str(tmp_path / "plots"), "--formats", "png"]) == 0
    shown = show.run([str(swept), "--num-draft-tokens", "2", "--n", "1"])
    assert "Static w=0.3, N=2" in shown and "Static w=0.7, N=2" in shown  # two jobs' points side by side
    assert shown.count("Autoregressive") == 1


def test_one_point_with_two_results_is_refused_naming_both_files(swept, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(swept, copy)
    f = copy / "sweep.draft_lengths=3,sweep.weights=0.7" / "results.jsonl"
    rows = [json.loads(line) for line in f.read_text().splitlines()]
    for r in rows:
        if r["method"] == "autoregressive":
            r["score"] = 0.123  # a copy that disagrees with the point it copies
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError) as e:
        load_results(copy)
    message = str(e.value)
    assert str(f) in message and "method=autoregressive" in message and "score" in message
    assert message.count("results.jsonl") == 2
    assert report.main([str(copy), "--out", str(tmp_path / "r")]) == 2  # the CLI: one line, exit 2


def test_a_dry_run_of_a_new_job_counts_what_it_would_copy(swept, toy_tiny_dir):
    cmd = _command(swept, toy_tiny_dir, "0.5", "2", "sweep.dry_run=true")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    assert "3 grid points, 0 done, 2 to copy from sibling jobs, 1 to run" in out


@pytest.mark.slow
def test_jobs_side_by_side_decode_a_shared_point_once(tmp_path, toy_tiny_dir):
    """joblib runs the jobs at once: the per-key claim makes the second job wait, then copy."""
    _multirun(tmp_path, toy_tiny_dir, "hydra.launcher.n_jobs=2", launcher="joblib")
    records = [r for rs in _records(tmp_path).values() for r in rs]
    assert sum(r["method"] == "autoregressive" and "reused_from" not in r for r in records) == 1
    assert sum(r["method"] == "lossless" and "reused_from" not in r for r in records) == 2
