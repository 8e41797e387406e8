"""Files and directories written whole or not at all, under a disk that fills up halfway."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from diversed.files import atomic
from diversed.files.atomic import DiskFull, remove_stale, write_directory, write_file


@pytest.fixture
def full_disk(monkeypatch):
    """Every write reaches half its bytes, then the disk is full (ENOSPC)."""

    def half_then_full(fd, data):
        os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "write_all", half_then_full)


def test_a_file_is_replaced_whole(tmp_path):
    path = write_file(tmp_path / "a" / "x.bin", b"old")
    write_file(path, b"new content")
    assert path.read_bytes() == b"new content" and os.listdir(path.parent) == ["x.bin"]


def test_a_full_disk_leaves_the_previous_file_and_no_part_and_says_where(tmp_path, full_disk):
    path = tmp_path / "checkpoints" / "last.ckpt"
    path.parent.mkdir()
    path.write_bytes(b"the previous checkpoint")
    with pytest.raises(
        DiskFull, match=rf"the disk holding {path.parent} is full .*writing last\.ckpt.*intact"
    ) as e:
        write_file(path, b"x" * 10_000)
    assert isinstance(e.value, OSError) and e.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"the previous checkpoint" and os.listdir(path.parent) == ["last.ckpt"]
    with pytest.raises(DiskFull):
        write_file(tmp_path / "checkpoints" / "step_000050.ckpt", b"x" * 10_000)  # no 4 KiB stub left behind
    assert os.listdir(path.parent) == ["last.ckpt"]


def test_a_directory_is_replaced_whole_or_kept(tmp_path, monkeypatch):
    out = tmp_path / "head"

    def fill(text):
        def write(d):
            (d / "a.json").write_text(text)
            (d / "b.bin").write_bytes(text.encode() * 3)

        return write

    write_directory(out, fill("one"))
    write_directory(out, fill("two"))
    assert (out / "a.json").read_text() == "two" and sorted(os.listdir(tmp_path)) == ["head"]

    def full(d):  # the second file does not fit: transformers' save_pretrained raises as open() does
        (d / "a.json").write_text("three")
        raise OSError(errno.ENOSPC, "No space left on device", str(d / "b.bin"))

    with pytest.raises(DiskFull, match=f"the disk holding {tmp_path} is full"):
        write_directory(out, full)
    assert (out / "a.json").read_text() == "two" and sorted(os.listdir(tmp_path)) == ["head"]
    with pytest.raises(RuntimeError, match="boom"):  # any other error: the same, and raised as it is
        write_directory(out, lambda d: (_ for _ in ()).throw(RuntimeError("boom")))
    assert (out / "b.bin").read_bytes() == b"twotwotwo" and sorted(os.listdir(tmp_path)) == ["head"]


def test_what_a_killed_writer_left_is_removed_and_a_running_ones_kept(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    left = [tmp_path / f".last.ckpt.tmp-{pid}", tmp_path / f".head.tmp-{pid}", tmp_path / f".head.old-{pid}"]
    left[0].write_bytes(b"part")
    left[1].mkdir(), left[2].mkdir()
    mine = tmp_path / f".step_000010.ckpt.tmp-{os.getpid()}"
    mine.write_bytes(b"being written")
    (tmp_path / "last.ckpt").write_bytes(b"whole")
    assert sorted(remove_stale(tmp_path)) == sorted(left)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, "last.ckpt"])
