"""`make demo`: the paper's whole pipeline on the toy pair, on CPU, ending in its report.

1. load the shipped toy pair and decode a few toy prompts speculatively, printing each
   completion with its score and the acceptance statistics (lossless, and static w = 0.5);
2. `python -m diversed.train` trains one weight head per toy task (addition, counting);
3. `python -m diversed.distill` fine-tunes the draft per task (the "SD with a fine-tuned draft" row);
4. `python -m diversed.evaluate` sweeps the knob families on each task's VALIDATION split (where the
   report chooses their settings), then every method on the test split: autoregressive, lossless,
   the fine-tuned draft, the static ensemble, lossy SD, cascades, typical acceptance and its
   autoregressive baseline (every token from the typical-truncated p), and BOTH heads
   (each on its own task and on the other: the transfer table), with per-token w and batch-1
   latency, every point once per seed (`--seeds`; resumable: re-running skips finished points);
5. `python -m diversed.report` writes Tables 1-3 (intervals over examples and seeds, DIVERSED paired
   against each baseline) and the figures; `--docs` copies the figures the docs show, writes the demo
   results of docs/results.md between its markers from the report's claims.md and the README's five-row
   headline from the same claims (`headline`), so no number there is typed (`--fill-only`: those two
   from the committed docs/demo_claims.md alone).
Steps 2-5 run exactly the commands a user would type; everything goes under `--out`.

`--quick` (`make demo`) is a first look in a few minutes: one seed, 40 prompts, N = 5 and T = 1, a
smaller grid and no timing, so its report has no time column. The README and docs/results.md quote the
full run (`make demo-full`, `--docs docs`), never a quick one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from diversed import StaticEnsemble, speculative_generate
from diversed.models.toy import load_toy_pair
from diversed.tasks.toy import ToyTask

TASKS = ("toy", "toy_count")


def decode(args: argparse.Namespace) -> None:
    """Step 1: a few toy prompts through the engine, with their stats."""
    hf_logging.disable_progress_bar()

    pair = load_toy_pair(seed=args.seed)
    tok = pair.tokenizer
    task = ToyTask.load(split="test", n_examples=args.n, seed=args.seed)
    enc = tok([task.prompt(e) for e in task], return_tensors="pt", padding=True)
    print(
        f"pair {pair.name}: target {pair.target_name}\n{' ' * (6 + len(pair.name))}draft  {pair.draft_name}"
    )

    for label, verifier in (("lossless", None), ("static w=0.5", StaticEnsemble(0.5))):
        out = speculative_generate(
            pair.target,
            pair.draft,
            enc["input_ids"],
            enc["attention_mask"],
            verifier=verifier,
            num_draft_tokens=args.num_draft_tokens,
            max_new_tokens=task.max_new_tokens,
            do_sample=True,
            temperature=1.0,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            generator=torch.Generator().manual_seed(args.seed),
        )
        texts = tok.batch_decode(out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        scores = [task.score(e, t) for e, t in zip(task, texts, strict=True)]
        print(f"\n{label} (T = 1, N = {args.num_draft_tokens})")
        for e, t, s in zip(task, texts, scores, strict=True):
            print(f"  {task.prompt(e)}{t!s:<28} {'ok' if s else 'wrong'}")
        st = out.stats
        print(
            f"  exact match {sum(scores) / len(scores):.2f}  acceptance rate {st.acceptance_rate:.2f}  "
            f"mean accepted length {st.mean_accepted_length:.2f}  tokens per target call "
            f"{st.tokens_per_target_call:.2f}  histogram {st.accepted_hist.sum(0).tolist()}"
        )


LOGS: Path | None = None  # where each step's output goes (main: <out>/logs; None with --verbose: the console)


def run(title: str, *argv: str) -> float:
    """One step: the command a user would type, run; its output in a log file of its own (the console gets
    the command, what it printed last and its time), or on the console with --verbose. A failed step
    shows its log's end and stops the demo."""
    print(f"\n=== {title}\n$ python {' '.join(argv)}", flush=True)
    start = time.perf_counter()
    if LOGS is None:
        subprocess.run([sys.executable, *argv], check=True)
        print(f"({time.perf_counter() - start:.0f} s)", flush=True)
        return time.perf_counter() - start
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / (re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")[:60] + ".log")
    with open(log, "w", encoding="utf-8") as f:
        done = subprocess.run([sys.executable, *argv], stdout=f, stderr=subprocess.STDOUT)
    took = time.perf_counter() - start
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    if done.returncode:
        print("\n".join(lines[-40:]), file=sys.stderr)
        sys.exit(f"step failed (exit status {done.returncode}); its whole output: {log}")
    print(f"{lines[-1] if lines else ''}\n({took:.0f} s; its output: {log})", flush=True)
    return took


# The figures the README and docs/results.md show, copied by --docs (names as the report writes them).
DOCS = (
    "acceptance_vs_w_toy_toy_T1.png",
    "quality_vs_time_toy_T1.png",
    "time_vs_acceptance_toy_count_T1.png",
    "pareto_toy_toy_T1.png",
)


# The demo grid, the same on both splits (the validation sweep has only the knob families and no timing).
# `--quick` (what `make demo` runs: a first look in a few minutes) keeps N = 5 and T = 1 and fewer points.
QUICK = (
    "sweep.draft_lengths=[5]",
    "sweep.temperatures=[1.0]",
    "sweep.weights=[0.0,0.4,0.8,1.0]",
    "sweep.lenience=[0.6]",
    "sweep.cascade_rules=[opt]",
    "sweep.cascade_alphas=[0.3]",
    "sweep.typical_epsilons=[0.05,0.3]",
)
GRID = (
    "sweep.draft_lengths=[3,5]",
    "sweep.temperatures=[1.0,0.1]",
    "sweep.weights=[0.0,0.2,0.4,0.6,0.8,1.0]",
    "sweep.lenience=[0.3,0.6,0.9]",
    "sweep.cascade_rules=[chow,opt]",
    "sweep.cascade_alphas=[0.1,0.3]",
    "sweep.typical_epsilons=[0.05,0.3]",
)

# docs/results.md's section: the report's claims whole (every table, caption and the run's times)
BEGIN, END = (
    "<!-- demo results: written by scripts/demo.py --docs from the report; do not edit -->",
    "<!-- end of demo results -->",
)
# the README's headline: five rows of the same claims (`headline`)
HEADLINE_BEGIN, HEADLINE_END = (
    "<!-- demo headline: written by scripts/demo.py --docs from docs/demo_claims.md; do not edit -->",
    "<!-- end of demo headline -->",
)
HEADLINE_TABLE = "Table (T = 1)"
# its rows, by the report's labels: the first label of a tuple the claims have (the fine-tuned draft, else
# lossy SD); the speculative rows at the table's largest N
HEADLINE_ROWS = (
    "Autoregressive",
    "SD (lossless)",
    "Static, chosen on validation",
    ("SD, fine-tuned draft", "Lossy SD, chosen on validation"),
    "DIVERSED",
)
HEADLINE_COLUMNS = ("accepted/proposed %", "quality ×100")  # per task


def fill_readme(readme: Path, text: str, markers: tuple[str, str] = (BEGIN, END)) -> None:
    """Replace what lies between a page's demo `markers` with `text` (the report's claims)."""
    begin, end = markers
    body = readme.read_text()
    if begin not in body or end not in body:
        raise SystemExit(
            f"{readme} has no demo markers ({begin} ... {end}): add them where the demo's results go"
        )
    head, rest = body.split(begin, 1)
    readme.write_text(f"{head}{begin}\n{text.strip()}\n{end}{rest.split(end, 1)[1]}")


# A cell "83.33 [77.00, 88.33] (w=1)*": estimate, interval, and what follows (a knob note, a verdict).
CELL = re.compile(r"^(-?\d+(?:\.\d+)?) \[(-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)\](.*)$")


def _row_cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table_lines(text: str):
    """Each line of a report's Markdown with the title of the table it is in (its caption's bold start),
    that table's header, and its cells where it is a row of values (None for prose, a header, a rule)."""
    title, header = None, []
    for line in text.splitlines():
        if m := re.match(r"\*\*(.+?)\*\*", line):
            title, header = m.group(1), []
        if not line.startswith("|") or line.startswith("|---"):
            yield line, title, header, None
        elif not header:
            header = _row_cells(line)
            yield line, title, header, None
        else:
            yield line, title, header, _row_cells(line)


def _is_time(column: str) -> bool:
    """A time ratio's column ("toy: time / AR", "toy: × AR / token"): the machine's as much as the
    method's."""
    return "time" in column or "× AR" in column


def across_builds(a: str, b: str) -> tuple[str, dict[str, int], list[str]]:
    """Two builds' claims (the same report from two machines or builds: same tables, rows and columns) as
    one: each cell with an interval keeps build A's estimate with the HULL of both builds' 95 % intervals
    ("the interval that holds across builds"); where the text after the interval differs (another knob
    chosen, another verdict) the cell says both. Returns the text, counts {cells, inside, identical,
    time_cells, time_inside, differ_note} (inside: cells whose build-B estimate lies within build A's own
    interval; identical: the same text in both; time_*: the same among time ratios, `_is_time`) and the
    cells where it does not lie inside, as "table | row | column: A v [l, h], B v'". Prose lines are A's."""
    b_cells = {
        (title, " | ".join(cells[:3]), col): cell
        for _, title, header, cells in _table_lines(b)
        if cells is not None
        for col, cell in zip(header[3:], cells[3:], strict=True)
    }
    out, outside = [], []
    counts = {"cells": 0, "inside": 0, "identical": 0, "time_cells": 0, "time_inside": 0, "differ_note": 0}
    for line, title, header, cells in _table_lines(a):
        if cells is None:
            out.append(line)
            continue
        row = " | ".join(cells[:3])
        merged = cells[:3]
        for col, cell in zip(header[3:], cells[3:], strict=True):
            other = b_cells.get((title, row, col))
            ma, mb = CELL.match(cell), CELL.match(other or "")
            if ma is None or mb is None:
                merged.append(cell if other in (None, cell) else f"{cell} (build B: {other})")
                continue
            la, ha, rest_a = float(ma[2]), float(ma[3]), ma[4]
            vb, lb, hb, rest_b = float(mb[1]), float(mb[2]), float(mb[3]), mb[4]
            digits = len(ma[1].split(".")[1]) if "." in ma[1] else 0
            timing, inside = _is_time(col), la <= vb <= ha
            counts["cells"] += 1
            counts["inside"] += inside
            counts["identical"] += cell == other
            counts["time_cells"] += timing
            counts["time_inside"] += timing and inside
            if not inside:
                outside.append(f"{title} | {row} | {col}: A {cell}, B {other}")
            note = rest_a if rest_a == rest_b else f"{rest_a} (build B:{rest_b or ' –'})"
            counts["differ_note"] += rest_a != rest_b
            merged.append(f"{ma[1]} [{min(la, lb):.{digits}f}, {max(ha, hb):.{digits}f}]{note}")
        out.append("| " + " | ".join(merged) + " |")
    return "\n".join(out) + "\n", counts, outside


def headline(claims: str, link: str = "docs/results.md") -> str:
    """The README's headline from a report's claims (or `across_builds`' merge): `HEADLINE_ROWS` of
    `HEADLINE_TABLE` (its first pair; the speculative rows at its largest N), the `HEADLINE_COLUMNS` of every
    task, each cell as the claims wrote it, under a caption taken from theirs; `link` is the page with them
    all."""
    table = [
        (head, cells) for _, title, head, cells in _table_lines(claims) if title == HEADLINE_TABLE and cells
    ]
    if not table:
        raise SystemExit(f"the claims have no {HEADLINE_TABLE!r}: the headline is drawn from it")
    header, pair = table[0][0], table[0][1][0]
    rows = {(c[1], c[2]): dict(zip(header, c, strict=True)) for _, c in table if c[0] == pair}
    caption = next((line for line in claims.splitlines() if line.startswith(f"**{HEADLINE_TABLE}**")), "")
    n = str(max(int(n) for _, n in rows if n.isdigit()))
    tasks = [h.split(": ")[0] for h in header[3:] if h.endswith(f": {HEADLINE_COLUMNS[1]}")]
    columns = [f"{task}: {c}" for task in tasks for c in HEADLINE_COLUMNS]
    lines = ["| method | N | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
    for labels in HEADLINE_ROWS:
        labels = (labels,) if isinstance(labels, str) else labels
        row = next((rows[k] for label in labels for k in ((label, n), (label, "–")) if k in rows), None)
        if row is None:
            raise SystemExit(f"{HEADLINE_TABLE!r} has no row {' or '.join(labels)} (N = {n} or –)")
        lines.append("| " + " | ".join([row["method"], row["N"], *(row[c] for c in columns)]) + " |")
    seeds = re.search(r"mean over \d+ seeds? \([^)]*\) and the examples", caption)
    across = ", the hull of both builds' intervals" if claims.startswith("The same run on two builds") else ""
    said = (
        f"**{HEADLINE_TABLE}, N = {n}**: five of its rows; acceptance = accepted/proposed drafts %, quality "
        f"×100 per task; {seeds[0] if seeds else 'mean over the examples'} [95 % interval{across}]. Every "
        f"row, the times and the paired tests: [{link}]({link})."
    )
    said = textwrap.fill(said, 110, break_long_words=False, break_on_hyphens=False)  # a README's lines
    return said + "\n\n" + "\n".join(lines) + "\n"


def fill_docs(claims: str, page: Path, readme: Path) -> None:
    """`claims` (docs/demo_claims.md's text) between `page`'s demo markers, and its `headline` between
    `readme`'s headline markers (linking to `page`)."""
    fill_readme(page, claims)
    link = Path(os.path.relpath(page, readme.parent)).as_posix()
    fill_readme(readme, headline(claims, link), (HEADLINE_BEGIN, HEADLINE_END))


def build_record(args: argparse.Namespace, took: dict[str, float], seconds: float) -> dict:
    """What a run was and where it ran (out/demo_run.json): its size, its steps' times and the build."""
    return {
        "seeds": args.seeds,
        "n_examples": args.n_examples,
        "quick": args.quick,
        "minutes": seconds / 60,
        "took": took,
        "cpu_cores": os.cpu_count(),
        "cores_used": len(os.sched_getaffinity(0)),  # the cores this process may run on (taskset)
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY"),
    }


def _run_line(record: dict, name: str) -> str:
    took = record["took"]
    return (
        f"{name}: {record['seeds']} seeds × {record['n_examples']} prompts per task and split, "
        f"{record['minutes']:.1f} min on {record.get('cores_used', record['cpu_cores'])} of "
        f"{record['cpu_cores']} CPU cores ({record['torch_threads']} torch "
        f"thread{'s' * (record['torch_threads'] != 1)}, kernels for {record['cpu_capability']}, torch "
        f"{record['torch']}) for steps 1-5: " + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()) + "."
    )


def docs(args: argparse.Namespace, out: Path) -> None:
    """--docs: copy the figures the docs show, write docs/demo_claims.md and fill --page's demo section
    and --readme's headline from it (`fill_docs`): one build's claims, or with --build-b the cells across
    both builds (`across_builds`), each build's own claims kept beside them (demo_claims_build_a.md,
    _b.md)."""
    where = Path(args.docs)
    where.mkdir(parents=True, exist_ok=True)
    for name in DOCS:
        shutil.copy(out / "report" / "figures" / name, where / name)
    learned = sorted((out / "report" / "figures").glob("w_by_token_class_toy_toy_T1_N5_head-toy-*.png"))
    if learned:
        shutil.copy(learned[0], where / "w_by_token_class_toy_T1.png")
    a = json.loads((out / "demo_run.json").read_text())
    claims = (out / "report" / "claims.md").read_text()
    if not args.build_b:
        text = claims + "\n" + _run_line(a, "This run") + "\n"
    else:
        other = Path(args.build_b)
        b = json.loads((other / "demo_run.json").read_text())
        claims_b = (other / "report" / "claims.md").read_text()
        (where / "demo_claims_build_a.md").write_text(claims + "\n" + _run_line(a, "Build A") + "\n")
        (where / "demo_claims_build_b.md").write_text(claims_b + "\n" + _run_line(b, "Build B") + "\n")
        merged, counts, outside = across_builds(claims, claims_b)
        other_cells = counts["cells"] - counts["time_cells"]
        # the column of "table | pair | method | N | column: A ..." (across_builds' form)
        untimed = [o for o in outside if not _is_time(o.split(": A ")[0].rsplit(" | ", 1)[1])]
        text = (
            "The same run on two builds; every interval below is the hull of both builds' 95 % intervals "
            "(the interval that holds across them), every estimate build A's; a cell whose knob or verdict "
            "differs says build B's. Build B's estimate lay inside build A's own interval in "
            f"{counts['inside']} of {counts['cells']} cells with an interval: "
            f"{other_cells - len(untimed)} of the {other_cells} quality, acceptance and difference cells"
            + (f" (outside: {'; '.join(untimed)})" if untimed else "")
            + f", and {counts['time_inside']} of the {counts['time_cells']} time ratios; "
            f"{counts['identical']} cells read the same in both.\n\n"
            + merged
            + "\n"
            + _run_line(a, "Build A")
            + "\n\n"
            + _run_line(b, "Build B")
            + "\n"
        )
    (where / "demo_claims.md").write_text(text)
    fill_docs(text, Path(args.page), Path(args.readme))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="toy test prompts to decode in step 1")
    parser.add_argument("--num-draft-tokens", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", default="outputs/demo", help="where heads, drafts, results and the report go"
    )
    parser.add_argument("--n-examples", type=int, default=100, help="toy test prompts per grid point")
    parser.add_argument(
        "--seeds", type=int, default=3, help="seeds per grid point (intervals over examples and seeds)"
    )
    parser.add_argument(
        "--docs",
        default=None,
        help="copy the docs' figures here (e.g. docs), write its demo_claims.md, fill --page and --readme",
    )
    parser.add_argument(
        "--page",
        default="docs/results.md",
        help="the page whose demo results --docs rewrites (the claims whole)",
    )
    parser.add_argument(
        "--readme", default="README.md", help="the README whose headline table --docs rewrites"
    )
    parser.add_argument(
        "--fill-only",
        action="store_true",
        help="with --docs: run nothing, rewrite --page's section and --readme's headline from the committed "
        "<docs>/demo_claims.md",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="every step's whole output on the console (default: in <out>/logs, one file per step)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a first look (`make demo`): 1 seed, 40 prompts, N = 5, T = 1, a smaller grid, no batch-1 "
        "timing; the README's numbers come from the full run (`make demo-full`)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="skip steps 1-4: re-run the report on --out's records (the run's times from its demo_run.json)",
    )
    parser.add_argument(
        "--build-b",
        default=None,
        help="with --docs: the --out of the same demo run on another build (other threads or instruction "
        "set); the docs then give each cell's interval across both builds (`across_builds`)",
    )
    args = parser.parse_args()
    if args.build_b and not args.docs:
        parser.error("--build-b goes with --docs (it merges two builds' reports into the docs' numbers)")
    if args.quick and args.docs:
        parser.error("--docs writes the docs' numbers: they come from the full run, not --quick")
    if args.fill_only:
        if not args.docs:
            parser.error("--fill-only goes with --docs (the folder holding demo_claims.md)")
        fill_docs((Path(args.docs) / "demo_claims.md").read_text(), Path(args.page), Path(args.readme))
        print(f"filled {args.page} and {args.readme} from {Path(args.docs) / 'demo_claims.md'}")
        return
    if args.quick:
        args.seeds, args.n_examples = min(args.seeds, 1), min(args.n_examples, 40)
    grid = QUICK if args.quick else GRID
    timing = (
        ("timing.repeats=0", "timing.warmup=0")
        if args.quick
        else (
            "timing.repeats=5",
            "timing.latency=true",
            "timing.latency_repeats=3",
            "timing.latency_examples=20",
        )
    )
    out = Path(args.out)
    start, took = time.perf_counter(), {}
    global LOGS
    LOGS = None if args.verbose else out / "logs"

    run_file = out / "demo_run.json"
    if args.report_only:
        if not run_file.is_file():
            parser.error(f"--report-only: {run_file} is missing (run the demo into --out {out} first)")
        took = json.loads(run_file.read_text())["took"]
    else:
        print("=== 1. the toy pair, and speculative decoding on a few prompts", flush=True)
        decode(args)
        heads = [out / f"train_{t}" / "head" for t in TASKS]
        for task in TASKS:
            took[f"train {task}"] = run(
                f"2. train a weight head on {task}",
                "-m",
                "diversed.train",
                "+experiment=toy",
                f"task={task}",
                "logger=csv",
                f"hydra.run.dir={out / f'train_{task}'}",
                "trainer.enable_progress_bar=false",
            )
        for task in TASKS:
            took[f"distill {task}"] = run(
                f"3. fine-tune the draft on {task}",
                "-m",
                "diversed.distill",
                "+experiment=distill_toy",
                f"task={task}",
                "logger=csv",
                f"hydra.run.dir={out / f'distill_{task}'}",
                "trainer.enable_progress_bar=false",
            )
        seeds = f"sweep.num_seeds={args.seeds}"
        families = "sweep.methods=[autoregressive,static,lossy,cascade,typical,autoregressive_typical]"
        for task in TASKS:
            took[f"validation {task}"] = run(
                f"4a. sweep the knob families on {task}'s validation split (the report chooses there)",
                "-m",
                "diversed.evaluate",
                "+experiment=toy",
                f"task={task}",
                "task.split=validation",
                f"task.n_examples={args.n_examples}",
                f"hydra.run.dir={out / f'validation_{task}'}",
                families,
                seeds,
                *grid,
                "timing.warmup=0",
                "timing.repeats=0",
                "runtime.progress=false",
            )
        for task in TASKS:
            took[f"sweep {task}"] = run(
                f"4. sweep every method on {task}",
                "-m",
                "diversed.evaluate",
                "+experiment=toy",
                f"task={task}",
                f"task.n_examples={args.n_examples}",
                f"hydra.run.dir={out / f'sweep_{task}'}",
                "sweep.methods=[autoregressive,lossless,finetuned_draft,static,dynamic,lossy,cascade,typical,"
                "autoregressive_typical]",
                seeds,
                *grid,
                f"sweep.heads=[{','.join(map(str, heads))}]",
                f"sweep.draft_models=[{out / f'distill_{task}' / 'draft'}]",
                "sweep.token_w=true",
                *timing,
                "runtime.progress=false",
            )
    took["report"] = run(
        "5. the report: Tables 1-3 and figures",
        "-m",
        "diversed.report",
        *(str(out / f"{kind}_{t}") for kind in ("validation", "sweep") for t in TASKS),
        "--out",
        str(out / "report"),
    )
    if not args.report_only:
        run_file.write_text(
            json.dumps(build_record(args, took, time.perf_counter() - start), indent=1) + "\n"
        )
    if args.docs:
        docs(args, out)
    print(
        f"\n=== done in {(time.perf_counter() - start) / 60:.1f} min: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
    )
    print(f"report:   {out / 'report' / 'README.md'} (tables table_T*.md, transfer_T*.md; figures/)")


if __name__ == "__main__":
    main()
