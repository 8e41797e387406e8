#!/usr/bin/env bash
# ../shared/GPU.md's checklist in one command, sized for a short lease (about 9 minutes on an H200):
#   scripts/gpu_checklist.sh OUT_DIR [GSM8K_DIR]
# 1-2. scripts/gpu_checks.py: exactness on the GPU (float32 and bf16) and the forward paths at the
#      random 8B/1B shapes (agreement, AR tokens/s per path at batch 1 and 16);
# 3.   the bench on the random 8B/1B shapes (greedy settings, batch 1, N = 3, 2 prompts x 16 tokens, one
#      timed repeat: scripts/gpu_bench.sh's llama-greedy part cut to fit; two random models accept
#      almost nothing, so every speculative token costs N draft steps), then the toy pair (8 prompts);
# 4-5. scripts/paper_smoke.sh on the random 8B/1B pair with GSM8K_DIR (20 training steps of 32-token
#      rollouts, 16 test problems on four methods at N = 2, one seed, no latency pass, the report),
#      skipped without GSM8K_DIR.
# On an H200 (2026-11-28, BENCHMARKS.md "GPU") the parts took 67, 57, 38 and over 150 s (the smoke's
# evaluate then ran the preset's 3 seeds); item 1 now also runs on the direct forward path.
# DEVICE=cpu BIG=toy PAIR=toy ACCELERATOR=cpu runs the same parts on CPU with the toy pair (a dry run).
# Each part runs under its own time limit (seconds: CHECKS_S, BENCH_S, TOY_S, SMOKE_S) and goes on
# after a failure; OUT_DIR/checklist.tgz holds every output so far, rewritten after each part (a
# lease returns a few files only), and OUT_DIR/summary.txt says how each part ended.
set -uo pipefail
out=${1:?usage: scripts/gpu_checklist.sh OUT_DIR [GSM8K_DIR]}
data=${2:-}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
big=${BIG:-random-llama-8b-1b}
work=$(mktemp -d)
mkdir -p "$out"
export PYTHONUNBUFFERED=1

part() {  # name, seconds, command...
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "=== $name (limit $limit s)"
  timeout --kill-after=5 "$limit" "$@" >"$work/$name.log" 2>&1
  rc=$?
  tail -25 "$work/$name.log"
  echo "$name: rc $rc, $(($(date +%s) - start)) s" | tee -a "$work/summary.txt"
  cp "$work/summary.txt" "$out/summary.txt"
  tar czf "$out/checklist.tgz" -C "$work" .
}

{ nvidia-smi; "$py" -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"; } \
  >"$work/machine.txt" 2>&1
cat "$work/machine.txt"
part checks "${CHECKS_S:-150}" "$py" scripts/gpu_checks.py --device "$device" --pair "$big" --out "$work/checks"
gpu=(--device "$device" --dtype bfloat16 --threads 0)
part bench_llama "${BENCH_S:-90}" "$py" -m diversed.bench "${gpu[@]}" --pair "$big" --ignore-eos \
  --num-prompts 2 --max-new-tokens 16 --batch-sizes 1 -N 3 --repeats 1 --warmup 1 --only greedy \
  --output "$work/bench_llama_greedy.json"
part bench_toy "${TOY_S:-60}" "$py" -m diversed.bench "${gpu[@]}" --num-prompts 8 --repeats 1 \
  --output "$work/bench_toy.json"
if [[ -n $data ]]; then
  part smoke "${SMOKE_S:-200}" env PYTHON="$py" scripts/paper_smoke.sh "$work/smoke" "$data" \
    task.max_new_tokens=32 model.max_new_tokens=32 data.n_train=160 data.n_val=8 trainer.val_check_interval=10 \
    'sweep.draft_lengths=[2]' sweep.num_seeds=1 timing.repeats=1 timing.latency=false
fi
cat "$work/summary.txt"
