"""Local task rows for the real-model runs (`make real-setup`, `make demo-real`), offline.

    python scripts/real_data.py SRC OUT

SRC is a folder of public task data in the layout of the project's shared data folder
(`gsm8k/{train,test}.jsonl`, `xsum/test_sample1000.jsonl`, `cnndm/test_sample100_tokenized.jsonl`);
OUT gets `<task>/<split>.jsonl`, what `python -m diversed.drafts build --data OUT` and the
`task.data_files` overrides of `scripts/demo_real.py` read. GSM8K keeps its own splits. XSum's
1,000-article sample has no train split: its articles are split by a digest of their ids, 80 % to
`train` (drafts and heads learn there) and 20 % to `test` (evaluated), so no evaluated article is
ever trained on. CNN/DailyMail's 100 articles are `test` only (evaluation, no training).
Nothing is copied into the project; the files are written under OUT only.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def _rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def main(src: str, out: str) -> None:
    src_dir, out_dir = Path(src), Path(out)
    for split in ("train", "test"):
        _write(out_dir / "gsm8k" / f"{split}.jsonl", _rows(src_dir / "gsm8k" / f"{split}.jsonl"))
    xsum = _rows(src_dir / "xsum" / "test_sample1000.jsonl")
    to_test = lambda r: int(hashlib.sha256(str(r["id"]).encode()).hexdigest(), 16) % 5 == 0  # noqa: E731
    _write(out_dir / "xsum" / "train.jsonl", [r for r in xsum if not to_test(r)])
    _write(out_dir / "xsum" / "test.jsonl", [r for r in xsum if to_test(r)])
    cnndm = src_dir / "cnndm" / "test_sample100_tokenized.jsonl"
    if cnndm.is_file():
        _write(out_dir / "cnndm" / "test.jsonl", _rows(cnndm))
    for f in sorted(out_dir.glob("*/*.jsonl")):
        print(f"{f}: {sum(1 for _ in open(f))} rows")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
