"""Check the four tasks against local copies of the real data (no Hub access needed).

    python scripts/check_tasks.py /path/to/data [--skip-mbpp]

The data directory holds gsm8k/test.jsonl (and train.jsonl), mbpp/full.jsonl, mbpp/sanitized.json,
xsum/*.jsonl and cnndm/*.jsonl (the first .jsonl found in each). Checks: every GSM8K gold answer,
fed back as the completion, scores 1; MBPP reference solutions pass their tests in the sandbox
(this RUNS THE DATASET'S CODE); XSum and CNN/DM load and score lead-k baselines (mean ROUGE).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

from diversed.tasks import load_task

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def lead(text: str, k: int) -> str:
    """The first k sentences (a naive split on . ! ? followed by whitespace)."""
    return " ".join(_SENTENCE_END.split(text.strip())[:k])


def check_gsm8k(data: Path) -> None:
    task = load_task(
        "gsm8k",
        data_files={"test": data / "gsm8k/test.jsonl", "train": data / "gsm8k/train.jsonl"},
        num_few_shot=3,
    )
    scores = task.score_batch(task.examples, [e["answer"] for e in task])
    wrong = [i for i, s in enumerate(scores) if s != 1.0]
    print(f"gsm8k: {int(sum(scores))}/{len(task)} gold answers score 1; failures at {wrong[:10]}")
    print(f"gsm8k: 3-shot prompt of example 0 is {len(task.full_prompt(task[0]))} characters")


def check_mbpp(data: Path) -> None:
    for subset, path in (("full", data / "mbpp/full.jsonl"), ("sanitized", data / "mbpp/sanitized.json")):
        task = load_task("mbpp", data_files=path, subset=subset, allow_code_execution=True)
        start = time.monotonic()
        results = task.execute(task.examples, [e["code"] for e in task])
        failed = [
            (task.example_id(e, i), r.status, r.output.strip().splitlines()[-1:])
            for i, (e, r) in enumerate(zip(task, results, strict=True))
            if not r.passed
        ]
        passed = sum(r.passed for r in results)
        print(
            f"mbpp {subset}: {passed}/{len(task)} reference solutions pass "
            f"({time.monotonic() - start:.0f} s, slowest {max(r.seconds for r in results):.1f} s)"
        )
        for task_id, status, last in failed:
            print(f"  task {task_id}: {status} {last}")


def check_summaries(data: Path) -> None:
    for name, folder, leads in (("xsum", "xsum", (1, 3)), ("cnndm", "cnndm", (3,))):
        path = sorted((data / folder).glob("*.jsonl"))[0]
        task = load_task(name, data_files=path)
        for k in leads:
            metrics = [task.metrics(e, " " + lead(e[task.document_field], k)) for e in task]
            means = {m: 100 * statistics.mean(x[m] for x in metrics) for m in task.rouge_types}
            print(
                f"{name}: {len(task)} rows from {path.name}, lead-{k}: "
                + ", ".join(f"{m} {v:.2f}" for m, v in means.items())
                + " ("
                + ", ".join(f"{k}={v}" for k, v in task.option_settings().items())
                + ")"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--skip-mbpp", action="store_true", help="do not run the MBPP reference code")
    args = parser.parse_args()
    check_gsm8k(args.data)
    check_summaries(args.data)
    if not args.skip_mbpp:
        check_mbpp(args.data)


if __name__ == "__main__":
    main()
