#!/usr/bin/env bash
# A paper preset end to end at the smallest real-shaped setting (../shared/GPU.md, item 5): a few
# training steps, a few grid points and the report, with random-initialised Llama-3.1-8B/3.2-1B
# shapes (no download; outputs mean nothing, times and memory do). Prints each step's wall time
# and the GPU's peak memory (nvidia-smi, sampled every 0.5 s); train.log ends with Lightning's simple
# profile (mean seconds per training batch, rollout and scoring together, and per validation step).
#   scripts/paper_smoke.sh OUT_DIR GSM8K_DIR [OVERRIDE...]   # GSM8K_DIR holds train.jsonl and test.jsonl
#   PAIR=toy ACCELERATOR=cpu scripts/paper_smoke.sh ...      # the same commands on CPU with the toy pair
# Each OVERRIDE (Hydra, e.g. task.max_new_tokens=64 data.n_train=160) goes to train and evaluate alike,
# after the script's own values, so it replaces them: both read the preset's every section.
set -euo pipefail
out=${1:?usage: scripts/paper_smoke.sh OUT_DIR GSM8K_DIR}
data=${2:?usage: scripts/paper_smoke.sh OUT_DIR GSM8K_DIR}
shift 2
extra=("$@")
py=${PYTHON:-python}
pair=${PAIR:-random_llama8b_1b}
accel=${ACCELERATOR:-gpu}
mkdir -p "$out"
common=(+paper=gsm8k "pair=$pair" "task.data_files={train: $data/train.jsonl, test: $data/test.jsonl}" task.max_prompt_tokens=384)
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$out/gpu_memory_mib.log" &
  smi=$!
  trap 'kill $smi 2>/dev/null || true' EXIT
fi
step() {  # name, command...
  local name=$1 start
  shift
  start=$(date +%s%N)
  "$@" >"$out/$name.log" 2>&1 || { tail -20 "$out/$name.log" >&2; exit 1; }
  echo "$name: $((($(date +%s%N) - start) / 1000000)) ms" | tee -a "$out/times.txt"  # (no bc on GPU images)
}
step train "$py" -m diversed.train "${common[@]}" trainer.accelerator="$accel" logger=csv data.n_train=32 data.n_val=8 \
  data.val_batch_size=8 trainer.max_epochs=1 trainer.val_check_interval=2 trainer.enable_progress_bar=false \
  +trainer.profiler=simple "hydra.run.dir=$out/train" "${extra[@]}"
step evaluate "$py" -m diversed.evaluate "${common[@]}" task.n_examples=16 "sweep.heads=[$out/train/head]" \
  "sweep.methods=[autoregressive,lossless,static,dynamic]" "sweep.weights=[0.5]" "sweep.draft_lengths=[5]" \
  "sweep.temperatures=[1.0]" timing.latency_examples=4 runtime.progress=false "hydra.run.dir=$out/evaluate" "${extra[@]}"
step report "$py" -m diversed.report "$out/evaluate" --out "$out/report"
if [[ -f $out/gpu_memory_mib.log ]]; then
  echo "peak GPU memory: $(sort -n "$out/gpu_memory_mib.log" | tail -1) MiB" | tee -a "$out/times.txt"
fi
