"""Local task rows for the real-model runs (`make real-setup`, `make demo-real`), offline.

    python scripts/real_data.py SRC OUT

SRC is a folder of public task data in the layout of the project's shared data folder
(`gsm8k/{train,test}.jsonl`, `xsum/test_sample1000.jsonl`, `cnndm/test_sample100_tokenized.jsonl`,
`mbpp/full.jsonl`); OUT gets `<task>/<split>.jsonl`, what `python -m diversed.drafts build --data OUT`
and the `task.data_files` overrides of `scripts/demo_real.py` read. Rows that select settings never
meet rows that train or are reported:
- GSM8K keeps its test split; a tenth of its train problems (by a digest of the question) is
  `validation`, where knobs are chosen, apart from the `train` rows heads learn on.
- XSum's 1,000-article sample has no train split: its articles are split by a digest of their ids,
  80 % to `train` (drafts and heads learn there) and 20 % to `test` (evaluated).
- CNN/DailyMail's 100 articles are `test` only (evaluation, no training).
- MBPP's full file keeps its published splits by task id: 11-510 `test`, 511-600 `validation`,
  601-974 `train` (1-10, the few-shot `prompt` split).
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
    digest = lambda text: int(hashlib.sha256(str(text).encode()).hexdigest(), 16)  # noqa: E731
    _write(out_dir / "gsm8k" / "test.jsonl", _rows(src_dir / "gsm8k" / "test.jsonl"))
    gsm_train = _rows(src_dir / "gsm8k" / "train.jsonl")
    held = lambda r: digest(r["question"]) % 10 == 0  # noqa: E731
    _write(out_dir / "gsm8k" / "train.jsonl", [r for r in gsm_train if not held(r)])
    _write(out_dir / "gsm8k" / "validation.jsonl", [r for r in gsm_train if held(r)])
    xsum = _rows(src_dir / "xsum" / "test_sample1000.jsonl")
    to_test = lambda r: digest(r["id"]) % 5 == 0  # noqa: E731
    _write(out_dir / "xsum" / "train.jsonl", [r for r in xsum if not to_test(r)])
    _write(out_dir / "xsum" / "test.jsonl", [r for r in xsum if to_test(r)])
    cnndm = src_dir / "cnndm" / "test_sample100_tokenized.jsonl"
    if cnndm.is_file():
        _write(out_dir / "cnndm" / "test.jsonl", _rows(cnndm))
    mbpp = src_dir / "mbpp" / "full.jsonl"
    if mbpp.is_file():
        rows = _rows(mbpp)
        for split, (lo, hi) in {
            "prompt": (1, 10),
            "test": (11, 510),
            "validation": (511, 600),
            "train": (601, 974),
        }.items():
            _write(out_dir / "mbpp" / f"{split}.jsonl", [r for r in rows if lo <= int(r["task_id"]) <= hi])
    for f in sorted(out_dir.glob("*/*.jsonl")):
        print(f"{f}: {sum(1 for _ in open(f))} rows")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
