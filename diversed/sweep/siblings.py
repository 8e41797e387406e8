"""Grid points a Hydra multirun's jobs share: found in a sibling job's run directory and reused.

`python -m diversed.evaluate -m sweep.weights=0.3,0.7 sweep.draft_lengths=3,5` runs four jobs whose
grids overlap: the autoregressive point is in all four, lossless SD at N = 3 in two. A point's key
holds everything that determines its output (`results.grid_key` with the settings digest), so a
sibling's record of the same key, timed the same way, is that point: `Siblings.find` returns it with
its per-example rows, and the job writes a copy into its own directory with `reused_from` naming the
job that decoded it. Each job's folder stays whole (report, show and plot read one alone), and
readers given several read the copies once (`results.load_results`: identical points are one).
`Siblings.claim` holds a lock per key (`<sweep dir>/.claims/`) while a job decodes the point, so
jobs launched side by side (joblib) decode it once as well: the second waits, then copies.

A copy's times are its sibling's, measured in another process of the same multirun (same machine,
settings and launcher: as comparable as two points of one long job). `sweep.reuse_siblings=false`
decodes every point in every job.

It reads only the multirun's own directory (`jobs.sweep_job`), decides nothing about which points a
job has (`grid.py` does), and copies nothing a job did not ask for.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diversed.sweep.results import key_digest, read_examples, read_records

log = logging.getLogger(__name__)

REUSED_FROM = "reused_from"  # a copied record's field: the sibling job directory it was decoded in
_CLAIMS = ".claims"


@dataclass(frozen=True)
class Found:
    """A sibling's record of a point (`reused_from` naming the job that decoded it) and its per-example
    rows."""

    record: dict[str, Any]
    rows: list[dict[str, Any]]


class Siblings:
    """The run directories of the other jobs of this job's multirun (none outside one)."""

    def __init__(
        self, run_dir: str | Path, sweep_dir: str | Path | None, timing: Mapping[str, Any], token_w: bool
    ) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.sweep_dir = Path(sweep_dir) if sweep_dir is not None else None
        self.timing = dict(timing)
        self.token_w = token_w
        self._read: dict[Path, tuple[tuple[int, int], dict[str, dict[str, Any]]]] = {}

    def _dirs(self) -> list[Path]:
        if self.sweep_dir is None or not self.sweep_dir.is_dir():
            return []
        return sorted(
            d
            for d in self.sweep_dir.iterdir()
            if d.is_dir()
            and not d.is_symlink()
            and d.resolve() != self.run_dir
            and (d / "results.jsonl").is_file()
        )

    def _records(self, run_dir: Path) -> dict[str, dict[str, Any]]:
        """A sibling's records by key, read again only when its file changed."""
        st = (run_dir / "results.jsonl").stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if (kept := self._read.get(run_dir)) is None or kept[0] != stamp:
            kept = (stamp, {r["key"]: r for r in read_records(run_dir)})
            self._read[run_dir] = kept
        return kept[1]

    def _timed_alike(self, record: Mapping[str, Any], threads: int) -> bool:
        timed = record.get("timing") or {}
        return timed.get("threads") == threads and all(timed.get(k) == v for k, v in self.timing.items())

    def find(self, key: str, threads: int) -> Found | None:
        """The point `key` as a sibling job decoded it, timed as this job would (same timing settings
        and torch threads) and with all its per-example rows (with per-token w where this job keeps
        them); None where no sibling has it so."""
        for d in self._dirs():
            record = self._records(d).get(key)
            if record is None or not self._timed_alike(record, threads):
                continue
            rows = read_examples(d, key)
            if len(rows) != record.get("n_examples"):
                continue  # rows lost or torn: decode it here
            if self.token_w and record.get("mean_w") is not None and not all("token_w" in r for r in rows):
                continue
            origin = record.get(REUSED_FROM) or os.path.relpath(d, self.sweep_dir)
            return Found({**record, REUSED_FROM: origin}, rows)
        return None

    @contextlib.contextmanager
    def claim(self, key: str) -> Iterator[None]:
        """Hold the multirun's lock of `key` (blocking while another job decodes it); nothing to hold
        outside a multirun."""
        if self.sweep_dir is None:
            yield
            return
        claims = self.sweep_dir / _CLAIMS
        claims.mkdir(exist_ok=True)
        fd = os.open(
            claims / f"{key_digest(key)}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # (releases the lock)
