"""Files and directories written whole or not at all, under a disk that fills up halfway."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from diversed.errors import UserError
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


# ----------------------------------------------------------------------------- symbolic links


@pytest.fixture
def victim(tmp_path):
    """A file outside the directory written, which no write there may change."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_bytes(b"do not touch\npartial last line")
    return path


def test_a_planted_link_or_file_at_the_temp_name_is_never_written_through(tmp_path, victim):
    out = tmp_path / "run" / "settings.json"
    out.parent.mkdir()
    link = out.parent / f".settings.json.tmp-{os.getpid()}"
    link.symlink_to(victim)
    taken = out.parent / f".settings.json.tmp-{os.getpid()}-1"
    taken.write_bytes(b"another writer's")
    write_file(out, b'{"new": 1}\n')
    assert out.read_bytes() == b'{"new": 1}\n' and not out.is_symlink()
    assert victim.read_bytes() == b"do not touch\npartial last line"
    assert (
        link.is_symlink() and os.readlink(link) == str(victim) and taken.read_bytes() == b"another writer's"
    )
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([out.name, link.name, taken.name])


def test_a_link_at_the_target_is_replaced_by_the_file_its_target_left_alone(tmp_path, victim):
    """The rename replaces the link itself: the file written takes its name, the target keeps its bytes."""
    out = tmp_path / "report" / "README.md"
    out.parent.mkdir()
    out.symlink_to(victim)
    write_file(out, "# report\n")
    assert not out.is_symlink() and out.read_text() == "# report\n"
    assert victim.read_bytes() == b"do not touch\npartial last line"


def test_write_directory_never_fills_a_planted_link_and_replaces_a_linked_target(tmp_path, victim):
    out = tmp_path / "exported"
    planted = tmp_path / f".exported.tmp-{os.getpid()}"
    planted.symlink_to(victim.parent, target_is_directory=True)
    write_directory(out, lambda d: (d / "head.json").write_text("{}"))
    assert sorted(os.listdir(victim.parent)) == ["precious.txt"]  # nothing written into the linked directory
    assert (out / "head.json").read_text() == "{}" and planted.is_symlink()
    planted.unlink()
    out_link = tmp_path / "linked"
    out_link.symlink_to(victim.parent, target_is_directory=True)
    write_directory(out_link, lambda d: (d / "head.json").write_text("{}"))
    assert not out_link.is_symlink() and os.listdir(out_link) == ["head.json"]
    assert sorted(os.listdir(victim.parent)) == ["precious.txt"]
    assert victim.read_bytes() == b"do not touch\npartial last line"
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "exported", "linked"]  # no .old-<pid> left


def test_open_plain_refuses_a_link_a_dangling_link_and_a_fifo_and_says_to_remove_it(tmp_path, victim):
    link, dangling, fifo = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    link.symlink_to(victim)
    dangling.symlink_to(tmp_path / "nowhere")
    os.mkfifo(fifo)
    for path, what in ((link, "a symbolic link"), (dangling, "a symbolic link"), (fifo, "a FIFO")):
        with pytest.raises(atomic.NotAPlainFile) as e:
            os.close(atomic.open_plain(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT))
        assert str(path) in str(e.value) and what in str(e.value) and f"rm {path}" in str(e.value)
        assert isinstance(e.value, UserError)
    assert victim.read_bytes() == b"do not touch\npartial last line" and not (tmp_path / "nowhere").exists()
    fd = atomic.open_plain(tmp_path / "d.jsonl", os.O_WRONLY | os.O_CREAT)  # a plain file: opened, blocking
    assert os.get_blocking(fd)
    os.close(fd)


def test_stale_temp_files_of_any_name_are_removed_a_link_as_itself(tmp_path, victim):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    left = [tmp_path / f".x.json.tmp-{pid}-3", tmp_path / f".head.tmp-{pid}"]
    left[0].write_bytes(b"part")
    left[1].symlink_to(victim.parent, target_is_directory=True)
    assert sorted(remove_stale(tmp_path)) == sorted(left)
    assert sorted(os.listdir(victim.parent)) == ["precious.txt"] and victim.read_bytes().startswith(b"do not")
