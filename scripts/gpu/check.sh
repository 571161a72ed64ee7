#!/bin/bash
# The GPU checks of one GPU machine (docs/performance.md): the whole test suite with CUDA visible
# (every Trainer picks `device: auto` = cuda), then the same-process speed benchmarks on the GPU. Data packages
# that are not in the device image travel in .gpu_site (copied from .venv; see docs/performance.md).
# Usage there: bash scripts/gpu/check.sh OUT_DIR
out=${1:-/tmp/gpu_check}
mkdir -p "$out"
source scripts/gpu/env.sh
timeout 200 $py -m pytest -q -n 12 -p no:cacheprovider --timeout 180 tests > "$out/pytest.log" 2>&1
echo "pytest exit $?"; grep -E "passed|failed" "$out/pytest.log" | tail -1
grep -E "^(FAILED|ERROR)" "$out/pytest.log" | cut -c1-230 | head -40
# Each benchmark's tail goes to the terminal and to OUT/bench.log, so a run cut short keeps what finished.
bench() { timeout "$1" $py "${@:2}" 2>&1 | tail -3 | tee -a "$out/bench.log"; }
# Realistic sizes (docs/performance.md): BERT-base bf16 pretraining at 256 x 128 (2 accumulated micro-batches of
# 128) under torch.compile on both sides, the same eager with a profile of where the time goes, then fine-tuning on
# mixed-length text with the unpadded path against length buckets. The earlier per-family figures are in the docs.
bench 170 benchmarks/pretrain_throughput.py --device cuda --preset bert-base --precision bf16 --batch 256 --seq 128 --accum 2 --steps 10 --compile
bench 110 benchmarks/pretrain_throughput.py --device cuda --preset bert-base --precision bf16 --batch 256 --seq 128 --accum 2 --steps 10 --profile
bench 80 benchmarks/finetune_throughput.py --device cuda --precision bf16 --quick
