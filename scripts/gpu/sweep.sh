#!/bin/bash
# A recipe sweep on one GPU (docs/performance.md): each job is `scripts/studies/family_vs_random.py` at a CPU
# token budget, pretrained against random init with one fine-tuning recipe, so 15 minutes of one GPU try the
# levers a 2-core CPU needs an hour each for. A lever that wins here is then confirmed on the CPU over seeds;
# figures from this sweep are GPU figures and are reported as such. Jobs run in order until the deadline; each
# job's last JSON line is appended to OUT/sweep.jsonl, so a run cut short keeps what finished.
# Usage there: bash scripts/gpu/sweep.sh OUT_DIR [SECONDS]   (carry .gpu_site; the shards are built on first use,
# and carrying runs/gpu_sweep/shards-* from an earlier run saves building them there)
out=${1:-/tmp/gpu_sweep}
deadline=$((SECONDS + ${2:-420}))
mkdir -p "$out"
source scripts/gpu/env.sh
# The table's budget (benchmarks/objectives_small.py: 16,000 sequences of 128 tokens) with a larger fine-tuning
# recipe than the table's (every training example, 128 tokens, lr 5e-4; the table: 2,000 examples, 64, 1e-3).
table="--tokens ${TABLE_TOKENS:-2048000} --seeds 0 1 --ft-lr 5e-4 --ft-examples ${FT_EXAMPLES:-0} --ft-len 128 \
--ft-epochs 2 --ft-pooling mean"
# XLNet's own study (docs/families.md): 1.8M tokens, the script's default fine-tuning recipe.
xlnet="--tokens ${XLNET_TOKENS:-1800000} --seeds 0 1 --ft-examples ${FT_EXAMPLES:-2000}"
jobs=(
  "configs/pretrain/electra-mini.yaml $table"
  "configs/pretrain/xlnet-mini.yaml $xlnet --set word_embedding_init=ppmi-svd"
  "configs/pretrain/electra-mini.yaml $table --set objective_args.generator_size=0.5"
  "configs/pretrain/electra-mini.yaml $table --set objective_args.rtd_weight=10"
  "configs/pretrain/electra-mini.yaml $table --set train.lr=5e-4"
  "configs/pretrain/electra-mini.yaml $table --set objective_args.generator_size=0.5 objective_args.rtd_weight=10"
  "configs/pretrain/electra-mini.yaml $table --set objective_args.generator_size=0.5 \
objective_args.embedding_sharing=disentangled"
  "configs/pretrain/xlnet-mini.yaml $xlnet --set word_embedding_init=random"
)
for job in "${jobs[@]}"; do
  left=$((deadline - SECONDS))
  if ((left < 45)); then echo "skipped (deadline): $job"; continue; fi
  start=$SECONDS
  # shellcheck disable=SC2086
  timeout "$left" $py scripts/studies/family_vs_random.py $job --out runs/gpu_sweep > "$out/job.log" 2>&1
  rc=$?
  tail -1 "$out/job.log" | grep '^{' >> "$out/sweep.jsonl" || { echo "job failed ($rc): $job"; tail -5 "$out/job.log"; }
  echo "$((SECONDS - start)) s, rc $rc: $job"
  grep '^{"task"' "$out/job.log"
done
