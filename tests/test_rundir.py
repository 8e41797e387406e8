"""Run directories: files written whole or not at all, the writer's lock, and readers (show, report,
plot, export, results loading) that skip and name every line a crash or a hand edit can leave."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from diversed.config import jobs
from diversed.errors import ConfigError
from diversed.files import atomic, rundir
from diversed.sweep.results import (
    ResultStore,
    examples_path,
    load_results,
    read_examples,
    read_records,
    run_record,
)

ROOT = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- writing


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "settings.json"
    atomic.write_file(path, '{"old": 1}\n')
    assert path.read_text() == '{"old": 1}\n' and oct(path.stat().st_mode & 0o777) != "0o600"

    def full_disk(fd, data):
        os.write(fd, data[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "write_all", full_disk)
    with pytest.raises(atomic.DiskFull, match="is full"):
        atomic.write_file(path, '{"new": 2222222}\n')
    assert path.read_text() == '{"old": 1}\n' and os.listdir(path.parent) == ["settings.json"]
    monkeypatch.undo()
    atomic.write_file(path, lambda f: f.write(b"from a writer"))  # figures and tables write a file object
    assert path.read_bytes() == b"from a writer" and os.listdir(path.parent) == ["settings.json"]


def test_a_kill_during_a_write_leaves_the_old_file_and_a_temp_file_the_writer_removes(tmp_path):
    path = tmp_path / "a.json"
    atomic.write_file(path, "old\n")
    child = (
        "import os, sys; from diversed import atomic\n"
        "def dying(fd, data):\n    os.write(fd, data[:5]); os._exit(9)\n"
        "atomic.write_all = dying\natomic.write_file(sys.argv[1], 'new, and longer\\n')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", child, str(path)], cwd=ROOT, capture_output=True, timeout=120
    )
    assert proc.returncode == 9, proc.stderr
    assert path.read_text() == "old\n"
    (leftover,) = [p for p in tmp_path.iterdir() if p != path]
    assert re.fullmatch(r"\.a\.json\.tmp-\d+", leftover.name), leftover.name
    assert [p.name for p in tmp_path.glob("*.json")] == ["a.json"]  # no reader's glob sees the temp file
    atomic.remove_stale(tmp_path)  # its writer no longer runs
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_settings_are_kept_once_and_written_again_where_torn(tmp_path):
    settings, config = {"seed": 0, "task": {"task": "toy"}}, lambda: "seed: 0\n"
    rundir.keep_settings(tmp_path, "d1", settings, config)
    s, c = tmp_path / "settings" / "d1.json", tmp_path / "configs" / "d1.yaml"
    assert json.loads(s.read_text()) == settings and c.read_text() == "seed: 0\n"
    rundir.keep_settings(tmp_path, "d1", {"seed": 1}, lambda: "seed: 1\n")  # a readable one is never replaced
    assert json.loads(s.read_text()) == settings and c.read_text() == "seed: 0\n"
    for torn in (
        b"",
        s.read_bytes()[:9],
    ):  # what a kill or a full disk left behind an older version's plain write
        s.write_bytes(torn)
        c.write_bytes(b"")
        rundir.keep_settings(tmp_path, "d1", settings, config)
        assert json.loads(s.read_text()) == settings and c.read_text() == "seed: 0\n"


# ----------------------------------------------------------------------------- the lock


HOLDER = (
    "import sys, time; from diversed import rundir; lock = rundir.hold(sys.argv[1]); lock.__enter__(); "
    "print('held', flush=True); time.sleep(120)"
)


def test_a_second_writer_is_refused_with_who_holds_the_directory_and_a_killed_holder_blocks_nothing(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError) as e, rundir.hold(tmp_path):
            pass
        message = str(e.value)
        assert f"pid {holder.pid} on " in message and "rundir.hold" in message and str(tmp_path) in message
        assert "wait for it" in message and "paths.output_dir" in message
    finally:
        holder.kill()  # kill -9: its lock file stays, with its pid in it
        holder.wait()
    assert str(holder.pid) in (tmp_path / rundir.LOCK_NAME).read_text()
    with rundir.hold(tmp_path) as writable:  # the kernel released the lock: the stale file blocks nothing
        assert writable is True
        assert json.loads((tmp_path / rundir.LOCK_NAME).read_text())["pid"] == os.getpid()
        with pytest.raises(ConfigError, match=f"pid {os.getpid()}"), rundir.hold(tmp_path):
            pass  # one writer, even within one process
    with rundir.hold(tmp_path):  # released when the block ends
        pass


def test_a_read_only_directory_gives_no_lock_and_no_error(tmp_path, monkeypatch):
    real = os.open

    def read_only(path, flags, *a):
        if str(path).startswith(str(tmp_path)) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, flags, *a)

    monkeypatch.setattr(os, "open", read_only)
    with rundir.hold(tmp_path) as writable:
        assert writable is False


def test_the_job_log_and_hydras_config_copy_do_not_stop_a_read_only_run(tmp_path, monkeypatch, capsys):
    handler = jobs.LogFile(str(tmp_path / "missing" / "evaluate.log"))  # cannot be opened
    handler.emit(logging.makeLogRecord({"msg": "a line"}))
    handler.close()
    assert capsys.readouterr().err.count("cannot write the log file") == 1
    assert jobs.config_subdir(None, "now", tmp_path) == ".hydra"
    monkeypatch.setattr(jobs.os, "access", lambda path, mode: False)
    assert jobs.config_subdir(None, "now", tmp_path) is None and jobs.config_subdir(None, "now") == ".hydra"


# ----------------------------------------------------------------------------- readers


def _point(method: str, **fields) -> dict:
    return run_record(
        pair="p",
        task="t",
        metric="accuracy",
        method=method,
        temperature=1.0,
        seed=0,
        n_examples=3,
        settings="s1",
        settings_group="g",
        score=2 / 3,
        score_ci_low=0.2,
        score_ci_high=0.9,
        wall_time_s=1.0,
        **fields,
    )


BAD_RECORDS = [  # (line, what the warning says)
    (b'{"pair": "p\xff", "task": "t"}', "not UTF-8"),
    (b"[1, 2, 3]", "a JSON list, not a record"),
    (b'{"score": 1}', "no pair"),
    (
        b'{"pair": "p", "task": "t", "method": "lossless", "num_draft_tokens": 2, "score": 0.5}',
        "no temperature",
    ),
    (
        b'{"pair": "p", "task": "t", "method": "static", "weight": 0.5, "num_draft_tokens": 3, '
        b'"temperature": 1.0, "score": 9.5}',
        "score is 9.5",
    ),
    (
        b'{"pair": "p", "task": "t", "method": "static", "weight": 0.5, "num_draft_tokens": 4, '
        b'"temperature": 1.0, "score": NaN}',
        "score is nan",
    ),
    (
        b'{"pair": "p", "task": "t", "method": "lossless", "temperature": 1.0, "wall_time_s": 1e999}',
        "wall_time_s is inf",
    ),
    (b'{"pair": "p", "task": "t", "method": "lossless", "temperature": "hot"}', "temperature is 'hot'"),
    (b'{"pair": "p", "task": "t", "method": "lossless", "temperature": 1.0, "key": 5}', "key is 5"),
    (b'{"pair": "p", "task": ', "not JSON"),
]
BAD_EXAMPLES = [
    (b'{"example_id": "\xff"}', "not UTF-8"),
    (b"[1]", "a JSON list, not an example row"),
    (b'{"score": 1}', "example_id is None"),
    (
        b'{"example_id": "9", "key": "another point", "score": 1.0}',
        "key 'another point' is another grid point's",
    ),
    (b'{"example_id": "9", "score": 2.0}', "score is 2.0"),
    (b'{"example_id": "9", "score": 1.0, "token_text": ["a"], "token_w": [0.5, 0.5]}', "token_w"),
]


@pytest.fixture
def damaged_run(tmp_path):
    """A run (autoregressive, lossless, static w=0.5 at N=2, three examples each) with every kind of bad
    line after its records and its first point's examples, a torn last line, and a torn settings file."""
    run = tmp_path / "run"
    store = ResultStore(run)
    rows = [
        dict(example_id=str(i), completion="c", score=float(i % 2), new_tokens=2, accepted_drafts=1)
        for i in range(3)
    ]
    records = [
        store.write(r, rows)
        for r in (
            _point("autoregressive"),
            _point("lossless", num_draft_tokens=2),
            _point("static", weight=0.5, num_draft_tokens=2),
        )
    ]
    with open(run / "results.jsonl", "ab") as f:
        f.write(b"".join(line + b"\n" for line, _ in BAD_RECORDS) + b'{"pair": "torn')
    with open(examples_path(run, records[0]["key"]), "ab") as f:
        f.write(b"".join(line + b"\n" for line, _ in BAD_EXAMPLES))
    atomic.write_file(run / "settings" / "s1.json", b'{"task": {"ta')  # as a killed older version left it
    return run, records


def _named(caught, path: Path, bad: list[tuple[bytes, str]], first_line: int) -> None:
    """One warning names every bad line of `path`: its number and why."""
    (message,) = {
        str(w.message) for w in caught if str(w.message).startswith(f"{path}:")
    }  # (each read says the same)
    assert f"skipping {len(bad)} unreadable lines" in message, message
    for i, (_, why) in enumerate(bad):
        assert f"line {first_line + i}: {why}" in message, (why, message)
    assert "torn" not in message  # the torn last line is expected after a kill: skipped silently


def test_every_reader_survives_each_bad_line_and_names_it(damaged_run, tmp_path):
    from diversed import plot, report, show

    run, records = damaged_run
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [r["key"] for r in read_records(run)] == [r["key"] for r in records]
        assert len(load_results(run)) == 3 and len(read_examples(run, records[0]["key"])) == 3
    _named(caught, run / "results.jsonl", BAD_RECORDS, 4)
    _named(caught, examples_path(run, records[0]["key"]), BAD_EXAMPLES, 4)

    for name, call in {
        "show": lambda: show.run([str(run), "--all"]),
        "export": lambda: show.run([str(run), "--export", str(tmp_path / "all.csv")]),
        "report": lambda: report.run([str(run), "--out", str(tmp_path / "report"), "--formats", "png"]),
        "plot": lambda: plot.run([str(run), "--out", str(tmp_path / "plots"), "--formats", "png"]),
    }.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        said = "\n".join(str(w.message) for w in caught)
        assert "line 4: not UTF-8" in said and "line 8: score is 9.5" in said, name
        if name == "report":  # it also names the torn settings file, and its page says so
            assert re.search(r"settings/s1\.json: cannot be read", said)
    page = next((tmp_path / "report" / "runs").glob("*.md")).read_text()
    assert "`s1`" in page and "cannot be read" in page
    assert (tmp_path / "all.csv").read_text().count("\n") == 1 + 3  # the records, none of the bad lines
    with pytest.warns(UserWarning, match="skipping 10 unreadable lines"):
        load_results(run)


def test_an_older_writers_interval_that_crosses_the_score_range_is_read_clipped(tmp_path):
    """Records written before the Wilson/bootstrap intervals carry a Student-t interval, which crosses
    [0, 1] near the bounds (a real run: score_ci_low -0.00045): read, clipped to the range, not lost."""
    rec = _point("lossless", num_draft_tokens=2)
    rec.update(score=0.01, score_ci_low=-0.00045, score_ci_high=1.02)
    (tmp_path / "results.jsonl").write_text(json.dumps(rec) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no line skipped
        frame = load_results(tmp_path)
    assert len(frame) == 1
    assert (frame.score_ci_low.item(), frame.score_ci_high.item()) == (0.0, 1.0)
    rec.update(score_ci_low=float("nan"))
    (tmp_path / "results.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.warns(UserWarning, match="score_ci_low is nan"):
        assert len(load_results(tmp_path)) == 0
