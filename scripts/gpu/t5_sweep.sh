#!/bin/bash
# T5's position question on one GPU (docs/generation.md): how large a pretraining budget, and
# whether the `relative_bias_init: local` start, lets T5-mini with relative positions alone write wiki-titles.
# Each job is `scripts/studies/generation_study.py --families t5 --seeds 0` at one step budget (one --out per budget,
# since a pretraining directory is named by its --set overrides, not its steps); the random-init arm is fine-tuned
# once and shared. Figures from here are GPU figures (bf16 by `precision: auto`) and are reported as such; a lever
# that wins is then confirmed on the CPU. Jobs run in order until the deadline; each job's last JSON line is
# appended to OUT/sweep.jsonl, so a run cut short keeps what finished.
# Usage there: bash scripts/gpu/t5_sweep.sh OUT_DIR [SECONDS]
#   carry .gpu_site and runs/gpu-t5/base (tokenizer/, shards/, dev-shards/ of scripts/demo.py's prepare_wiki at
#   generation_study's 8k vocabulary, made here by any generation_study run and copied in)
out=${1:-/tmp/gpu_t5}
deadline=$((SECONDS + ${2:-480}))
mkdir -p "$out"
source scripts/gpu/env.sh
base=runs/gpu-t5/base
jobs=(
  "300"
  "300 --set relative_bias_init=local"
  "1500 --set relative_bias_init=local"
  "1500"
  "5000"
  "5000 --set relative_bias_init=local"
)
for job in "${jobs[@]}"; do
  left=$((deadline - SECONDS))
  if ((left < 40)); then echo "skipped (deadline): $job"; continue; fi
  steps=${job%% *}
  dir=runs/gpu-t5/s$steps
  mkdir -p "$dir"
  for part in tokenizer shards dev-shards; do [ -e "$dir/$part" ] || ln -s "$PWD/$base/$part" "$dir/$part"; done
  random=runs/gpu-t5/s300/ft-t5-random-0
  [ -e "$random/report.json" ] && [ ! -e "$dir/ft-t5-random-0" ] && ln -s "$PWD/$random" "$dir/ft-t5-random-0"
  start=$SECONDS
  # shellcheck disable=SC2086
  timeout "$left" $py scripts/studies/generation_study.py --families t5 --seeds 0 --steps $job --minutes 6 --ft-minutes 3 \
    --out "$dir" > "$out/job.log" 2>&1
  rc=$?
  tail -1 "$out/job.log" | grep '^{' >> "$out/sweep.jsonl" || { echo "job failed ($rc): $job"; tail -5 "$out/job.log"; }
  echo "$((SECONDS - start)) s, rc $rc: steps $job"
  grep -E "^t5 |it/s|tokens/s" "$out/job.log" | tail -4
  cp "$out/job.log" "$out/job-s${job// /_}.log"
done
