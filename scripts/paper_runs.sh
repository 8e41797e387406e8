#!/usr/bin/env bash
# The paper's runs (scripts/paper_runbook.md): per pair x task train a head, fine-tune the draft,
# sweep; then the Table 3 and figure extras and the report. Resumable: re-run after a failure.
#   scripts/paper_runs.sh                                  # every pair and task of the paper
#   PAIRS=llama8b_1b TASKS=gsm8k scripts/paper_runs.sh     # one of them
#   scripts/paper_runs.sh pair.target=/models/... pair.draft=/models/...   # extra overrides for every command
# Needs a GPU; MBPP needs DIVERSED_ALLOW_CODE_EXECUTION=1. PYTHON overrides the interpreter.
set -euo pipefail
py=${PYTHON:-python}
pairs=${PAIRS:-llama8b_1b qwen3_8b_0p6b}
tasks=${TASKS:-gsm8k xsum mbpp cnndm}
extra=("$@")

for pair in $pairs; do
  for task in $tasks; do
    for entry in train distill evaluate; do
      if [[ $entry == train && -f outputs/paper/$pair/$task/train/head/head_config.json ]]; then continue; fi
      if [[ $entry == distill && -f outputs/paper/$pair/$task/distill/draft/config.json ]]; then continue; fi
      echo "=== $entry +paper=$task pair=$pair" >&2
      "$py" -m "diversed.$entry" "+paper=$task" "pair=$pair" "${extra[@]}"
    done
  done
  # Table 3: each head on the other task (CNN/DM <-> GSM8K), where both were trained
  if [[ " $tasks " == *" cnndm "* && " $tasks " == *" gsm8k "* ]]; then
    heads="[outputs/paper/$pair/cnndm/train/head,outputs/paper/$pair/gsm8k/train/head]"
    for task in cnndm gsm8k; do
      "$py" -m diversed.evaluate "+paper=$task" "pair=$pair" "sweep.methods=[lossless,dynamic]" "sweep.heads=$heads" "${extra[@]}"
    done
  fi
done
# the project page's pair on CNN/DM
if [[ -z ${PAIRS:-} ]]; then
  for entry in train evaluate; do
    "$py" -m "diversed.$entry" +paper=cnndm pair=gemma3_12b_4b "sweep.methods=[autoregressive,lossless,static,dynamic]" "${extra[@]}"
  done
fi
"$py" -m diversed.report outputs/paper --out reports/paper --paper
