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
from diversed.errors import ConfigError, UserError
from diversed.files import atomic, rundir
from diversed.sweep.results import (
    ResultStore,
    examples_path,
    grid_key,
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

    def read_only(path, flags, *a, **kw):  # (the lock is opened by name, relative to the directory)
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, flags, *a, **kw)

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


# ----------------------------------------------------------------------------- symbolic links


@pytest.fixture
def victim(tmp_path):
    """A file outside the run directory whose last line has no newline: nothing done in the run
    directory may cut, truncate or append to it."""
    path = tmp_path / "elsewhere" / "precious.jsonl"
    path.parent.mkdir()
    path.write_bytes(b'{"keep": 1}\n{"no newline": 2}')
    return path


VICTIM = b'{"keep": 1}\n{"no newline": 2}'


def test_a_linked_lock_is_refused_and_its_target_never_truncated(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    (run / rundir.LOCK_NAME).symlink_to(victim)
    with pytest.raises(atomic.NotAPlainFile) as e, rundir.hold(run):
        pass
    message = str(e.value)
    assert f"{run / rundir.LOCK_NAME} is a symbolic link (to {victim})" in message
    assert f"rm {run / rundir.LOCK_NAME}" in message and isinstance(e.value, UserError)
    assert victim.read_bytes() == VICTIM


def test_a_linked_results_file_is_neither_cut_nor_appended_to(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    results = run / "results.jsonl"
    results.symlink_to(victim)  # its target's last line has no newline: the repair would cut it
    with pytest.raises(atomic.NotAPlainFile, match=r"results\.jsonl is a symbolic link .*remove it \(rm "):
        ResultStore(run)
    assert victim.read_bytes() == VICTIM
    results.unlink()
    store = ResultStore(run)
    results.symlink_to(victim)  # planted after the store was opened: the append is refused too
    row = dict(example_id="0", completion="c", score=1.0, new_tokens=1, accepted_drafts=0)
    with pytest.raises(atomic.NotAPlainFile):
        store.write(_point("autoregressive"), [row])
    assert victim.read_bytes() == VICTIM
    results.unlink()
    results.symlink_to(tmp_path / "nowhere.jsonl")  # a dangling link: nothing created through it
    with pytest.raises(atomic.NotAPlainFile):
        store.write(_point("autoregressive"), [row])
    assert not (tmp_path / "nowhere.jsonl").exists()


def test_linked_examples_settings_and_export_files_are_replaced_never_written_through(tmp_path, victim):
    from diversed.show import run as show

    run = tmp_path / "run"
    store = ResultStore(run)
    record = _point("autoregressive")
    examples = examples_path(run, record["key"])
    examples.symlink_to(victim)
    row = dict(example_id="0", completion="c", score=1.0, new_tokens=1, accepted_drafts=0)
    store.write(record, [row])
    assert not examples.is_symlink() and [r["example_id"] for r in read_examples(run, record["key"])] == ["0"]
    settings = run / "settings" / "s1.json"
    settings.parent.mkdir()
    settings.symlink_to(victim)  # (it does not parse as one JSON object: written again, as a torn one is)
    rundir.keep_settings(run, "s1", {"seed": 0}, lambda: "seed: 0\n")
    assert not settings.is_symlink() and json.loads(settings.read_text()) == {"seed": 0}
    out = tmp_path / "export.csv"
    out.symlink_to(victim)
    show([str(run), "--export", str(out)])
    assert not out.is_symlink() and "autoregressive" in out.read_text()
    assert victim.read_bytes() == VICTIM


def test_a_linked_log_file_or_hydra_config_copy_is_not_written_through(tmp_path, victim, capsys):
    log = tmp_path / "evaluate.log"
    log.symlink_to(victim)
    handler = jobs.LogFile(str(log))
    handler.emit(logging.makeLogRecord({"msg": "a line"}))
    handler.close()
    err = capsys.readouterr().err
    assert f"{log}" in err and "symbolic link" in err and f"rm {log}" in err
    assert victim.read_bytes() == VICTIM
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").symlink_to(victim)
    assert jobs.config_subdir(None, "now", run) is None
    assert jobs.config_subdir(None, "now", run) is None  # (Hydra asks more than once: said once)
    assert capsys.readouterr().err.count("overrides.yaml is a symbolic link") == 1
    (run / ".hydra" / "overrides.yaml").unlink()
    assert jobs.config_subdir(None, "now", run) == ".hydra"


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


# ----------------------------------------------------------------------------- lines no parser foresaw

_GOOD = b'{"pair": "p", "task": "t", "method": "lossless", "num_draft_tokens": 2, "temperature": 1.0'
PARSER_BREAKERS = [  # (line, what the warning says): each used to stop show, report and evaluate
    (_GOOD + b', "seed": ' + b"9" * 5000 + b"}", "not JSON (an integer of 5000 digits, beyond 64 bits)"),
    (b"[" * 100_000, "nested deeper than 100 levels"),
    (_GOOD + b', "seed": 123456789012345678901234}', "not JSON (an integer of 24 digits, beyond 64 bits)"),
    (_GOOD + b', "timing": ' + b"[" * 150 + b"]" * 150 + b"}", "nested deeper than 100 levels"),
    (_GOOD + b', "pair": "p\\ud800"}', "a lone surrogate"),
    (_GOOD + b', "seed": 1' + b"0" * 401 + b"}", "not JSON (an integer of 402 digits"),  # (float() overflows)
    (_GOOD + b', "extra": "' + b"x" * 300_000 + b'"}', "longer than 200000 bytes, not read"),
]


@pytest.fixture
def broken_run(tmp_path, monkeypatch):
    """A run of three points whose results.jsonl has, after them, every line in PARSER_BREAKERS (lines
    over 200,000 bytes count as over the cap here), then a good record."""
    monkeypatch.setattr(rundir, "MAX_LINE_BYTES", 200_000)
    run = tmp_path / "run"
    store = ResultStore(run)
    row = dict(example_id="0", completion="c", score=1.0, new_tokens=1, accepted_drafts=0)
    for r in (_point("autoregressive"), _point("lossless", num_draft_tokens=2)):
        store.write(r, [row])
    with open(run / "results.jsonl", "ab") as f:
        f.write(b"".join(line + b"\n" for line, _ in PARSER_BREAKERS))
    store.write(_point("static", weight=0.5, num_draft_tokens=2), [row])
    return run


def test_a_line_no_parser_can_take_is_skipped_and_named_by_every_reader(broken_run, tmp_path, capsys):
    from diversed import report, show

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(read_records(broken_run)) == 3
        assert len(ResultStore(broken_run).found) == 3  # evaluate opens its store
    _named(caught, broken_run / "results.jsonl", PARSER_BREAKERS, 3)
    for name, call in {
        "show": lambda: show.run([str(broken_run), "--all"]),
        "report": lambda: report.run([str(broken_run), "--out", str(tmp_path / "r"), "--formats", "png"]),
    }.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        said = "\n".join(str(w.message) for w in caught)
        assert "line 3: not JSON (an integer of 5000 digits" in said and "line 9: longer than" in said, name
    assert "Static w=0.5" in capsys.readouterr().out


def test_any_exception_of_the_parser_or_the_taker_skips_the_line_and_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir, "MAX_DEPTH", 10**9)  # the parser itself meets 100,000 brackets
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"[" * 100_000 + b'\n{"a": 1}\n{"a": 2}\n{"a": 3}\n{"a": 4}')  # no newline at the end

    def take(row):
        if row["a"] == 2:
            raise TypeError("a bug of the taker")
        return row["a"]

    with pytest.warns(UserWarning) as caught:
        assert rundir.read_jsonl(path, take) == [1, 3, 4]  # a torn last line that parses is taken
    (message,) = [str(w.message) for w in caught]
    assert "skipping 2 unreadable lines" in message and "line 1: not JSON (RecursionError: " in message
    assert "line 3: TypeError: a bug of the taker" in message


@pytest.mark.parametrize("cap, chunk", [(10, 3), (7, 7), (50, 1), (64, 16), (5, 64)])
def test_lines_are_read_as_the_file_splits_them_whatever_the_chunk_and_cap(tmp_path, monkeypatch, cap, chunk):
    import random

    monkeypatch.setattr(rundir, "MAX_LINE_BYTES", cap)
    monkeypatch.setattr(rundir, "_CHUNK", chunk)
    rng = random.Random(cap * chunk)
    for trial in range(30):
        data = bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(0, 200)))
        path = tmp_path / f"{trial}.bin"
        path.write_bytes(data)
        with open(path, "rb") as f:
            got = list(rundir._lines(f))
        pieces = data.split(b"\n")
        want = [(i + 1, p + b"\n", True) for i, p in enumerate(pieces[:-1])]
        want += [(len(pieces), pieces[-1], False)] if pieces[-1] else []
        want = [(n, line if len(line) - ended <= cap else None, ended) for n, line, ended in want]
        assert got == want, data


def test_a_line_far_over_the_cap_is_read_past_in_bounded_memory(tmp_path):
    """200 MB on one line between two records: skipped and named, and never held whole (the reader's
    peak stays near the 64 MiB cap; reading the file whole, as before, took over 400 MB)."""
    import tracemalloc

    path = tmp_path / "results.jsonl"
    first, last = (json.dumps(r).encode() + b"\n" for r in (_point("autoregressive"), _point("lossless")))
    with open(path, "wb") as f:
        f.write(first + b'{"pair": "')
        block = b"x" * 2**20
        for _ in range(200):
            f.write(block)
        f.write(b'"}\n' + last)
    tracemalloc.start()
    try:
        with pytest.warns(UserWarning, match="line 2: longer than 64 MiB, not read"):
            got = read_records(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [r["method"] for r in got] == ["autoregressive", "lossless"]
    assert peak < rundir.MAX_LINE_BYTES + 16 * 2**20, peak


def test_the_torn_end_of_a_results_file_is_found_reading_backwards(tmp_path):
    from diversed.sweep import results as R

    path = tmp_path / "x"
    for data in (b"", b"abc", b"\n", b"a\nbc", b"a\nb\n", b"\n" + b"x" * 50, b"ab\ncd\nef" * 7):
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            for chunk in (1, 2, 5, 1000):
                assert R._whole_lines_end(fd, len(data), chunk) == data.rfind(b"\n") + 1, (data, chunk)
        finally:
            os.close(fd)


def test_a_json_file_no_parser_can_take_is_left_out_with_a_warning(tmp_path, monkeypatch):
    for name, body in (("deep", b"[" * 100_000), ("digits", b'{"a": ' + b"9" * 5000 + b"}"), ("big", b"{}")):
        (tmp_path / f"{name}.json").write_bytes(body)
    monkeypatch.setattr(rundir, "MAX_LINE_BYTES", 1)
    with pytest.warns(
        UserWarning, match=r"big\.json: cannot be read, left out \(ValueError: more than 1 bytes"
    ):
        assert rundir.read_json(tmp_path / "big.json") is None
    monkeypatch.undo()
    with pytest.warns(UserWarning, match=r"deep\.json: cannot be read, left out \(RecursionError"):
        assert rundir.read_json(tmp_path / "deep.json") is None
    with pytest.warns(UserWarning, match=r"digits\.json: cannot be read, left out \(ValueError: Exceeds"):
        assert rundir.read_json(tmp_path / "digits.json") is None
    (tmp_path / "settings").mkdir()
    os.replace(tmp_path / "deep.json", tmp_path / "settings" / "d.json")  # kept settings that do not parse
    rundir.keep_settings(tmp_path, "d", {"seed": 0}, lambda: "seed: 0\n")
    assert json.loads((tmp_path / "settings" / "d.json").read_text()) == {"seed": 0}


def test_report_on_runs_with_nothing_readable_says_so_in_one_line(tmp_path, capsys):
    from diversed import report

    for name, body in (("a", b'[1]\n{"score": 2}\n'), ("b", b"")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_bytes(body)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status = report.main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and "no readable run records" in line and str(tmp_path / "a") in line


# ----------------------------------------------------------------------------- what show prints

HOSTILE = "\x1b[2J\x1b]0;pwned\x07\rover\x1b[8mhidden\x1b[0m\u202eevil\u2066\x9b\x00\u2028"


def test_show_prints_every_string_of_a_record_with_control_characters_escaped(tmp_path):
    from diversed.show import _HIDDEN, visible
    from diversed.show import run as show

    store = ResultStore(tmp_path)
    for method, fields in (("autoregressive", {}), ("lossless", {"num_draft_tokens": 2})):
        row = dict(
            example_id=f"id{HOSTILE}",
            completion=f"line 1\n\tline 2 {HOSTILE}",
            score=1.0 if method == "lossless" else 0.0,
            new_tokens=1,
            accepted_drafts=0,
            prompt=f"Q: {HOSTILE}",
            reference=HOSTILE,
            extracted=HOSTILE,
        )
        store.write(_point(method, **fields), [row])
    text = show([str(tmp_path)])
    assert not _HIDDEN.search(text.replace("\n", "")), [c for c in text if _HIDDEN.match(c)]
    for shown in ("\\x1b[2J", "\\x1b]0;pwned\\x07", "\\x0dover", "\\x1b[8mhidden", "\\u202eevil", "\\x9b"):
        assert shown in text, shown
    assert "line 1⏎\tline 2" in text  # a completion's newline shows as ⏎ on its one line; a tab stays
    assert "== example id\\x1b[2J" in text
    assert visible("plain, é 漢 🙂\tand a tab") == "plain, é 漢 🙂\tand a tab"
    assert visible("a\ud800b\u2029") == "a\\ud800b\\u2029"  # (print would fail on a lone surrogate)


def test_show_picks_the_most_common_setting_and_the_examples_that_differ():
    from diversed.show import _most

    assert _most([1.0, 0.0, None, 1.0, 0.0, None, None]) == 0.0  # tied: the smallest; None never
    assert _most([None]) is None and _most([]) is None and _most([2, 3, 3]) == 3


# ----------------------------------------------------------------------------- many records


def _many(run: Path, n: int, temperatures: int = 2) -> Path:
    """`run`/results.jsonl with `n` records as evaluate writes them (18 settings, seeds counting up), at
    `temperatures` distinct temperatures; returns the file."""
    points = [("autoregressive", {})]
    points += [("lossless", {"num_draft_tokens": k}) for k in (2, 4, 8)]
    points += [("static", {"weight": w / 10, "num_draft_tokens": k}) for w in (1, 3, 5, 7, 9) for k in (2, 4)]
    records = [_point(method, **knobs) for method, knobs in points]
    run.mkdir(parents=True, exist_ok=True)
    path = run / "results.jsonl"
    with open(path, "wb") as f:
        for i in range(n):
            record = records[i % len(points)] | {
                "temperature": i % temperatures / temperatures,
                "seed": i // temperatures,
            }
            f.write(rundir.json_line(record | {"key": grid_key(**record)}))
    return path


def test_reading_many_records_holds_each_record_not_the_file(tmp_path):
    """20,000 records: the reader's peak stays under 3x the file (field names and short values shared
    across lines); reading the whole file, split, then parsed, took over 6x."""
    import tracemalloc

    path = _many(tmp_path, 20_000)
    tracemalloc.start()
    try:
        found = read_records(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(found) == 20_000 and len({r["key"] for r in found}) == 20_000
    assert peak < 3 * path.stat().st_size, (peak, path.stat().st_size)


def _measured(*args: str) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of `python -m diversed.<args>` in a child process."""
    import resource
    import time

    code = (
        "import resource, runpy, sys, time; t = time.perf_counter(); sys.argv = sys.argv[1:]; "
        "exec('try:\\n runpy.run_module(sys.argv[0], run_name=\"__main__\")\\nexcept SystemExit: pass'); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
    )
    del resource, time
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True)
    seconds, rss_kb = proc.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(rss_kb) / 1024


@pytest.mark.slow
def test_show_and_report_on_100000_records_take_seconds_and_bounded_memory(tmp_path):
    """Bounds with room for a loaded machine. This one measured show 2.8 s and 360 MB on 100,000 records
    at 20,000 temperatures (before: 18 s and 1.1 GB, picking the most common temperature counted each
    anew), and report 12 s and 1.2 GB on 100,000 records at 2 (before: 12 s and 1.7 GB)."""
    _many(tmp_path / "many_t", 100_000, temperatures=20_000)
    seconds, mb = _measured("diversed.show", str(tmp_path / "many_t"))
    assert seconds < 10 and mb < 700, (seconds, mb)
    _many(tmp_path / "run", 100_000)
    seconds, mb = _measured(
        "diversed.report", str(tmp_path / "run"), "--out", str(tmp_path / "r"), "--formats", "png"
    )
    assert seconds < 120 and mb < 1500, (seconds, mb)
