#!/usr/bin/env bash
# The GPU runs of the performance issue (BENCHMARKS.md, "GPU"), on a machine with one CUDA GPU:
#   scripts/gpu_bench.sh OUT_DIR [toy|llama|all]
# toy:   the toy pair in bf16, table 1 and table 2 settings;
# llama: random-initialised Llama-3.1-8B / Llama-3.2-1B shapes in bf16 (no download), exactly
#        --max-new-tokens per row (random models never say EOS on cue).
# Each run writes OUT_DIR/<name>.json (one record per setting) and OUT_DIR/<name>.txt (the table).
# Runs from the repository root without installing (python -m); PYTHON overrides the interpreter.
set -euo pipefail
out=${1:?usage: scripts/gpu_bench.sh OUT_DIR [toy|llama|all]}
what=${2:-all}
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
if [[ $what == llama || $what == all ]]; then
  # batch 1 holds the transformers comparison; each 8B setting decodes 8 x 64 tokens per repeat
  run gpu_llama --pair random-llama-8b-1b --ignore-eos --num-prompts 8 --max-new-tokens 64 \
    --repeats 2 --warmup 1
fi
