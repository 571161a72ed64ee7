#!/bin/bash
# The GPU checks of one GPU machine (docs/performance.md): the whole test suite with CUDA visible
# (every Trainer picks `device: auto` = cuda), then the same-process speed benchmarks on the GPU. Data packages
# that are not in the device image travel in .gpu_site (copied from .venv; see docs/performance.md).
# Usage there: bash scripts/gpu/check.sh OUT_DIR
out=${1:-/tmp/gpu_check}
mkdir -p "$out"
source scripts/gpu/env.sh
timeout 220 $py -m pytest -q -n 12 -p no:cacheprovider --timeout 200 tests > "$out/pytest.log" 2>&1
echo "pytest exit $?"; grep -E "passed|failed" "$out/pytest.log" | tail -1
grep -E "^(FAILED|ERROR)" "$out/pytest.log" | cut -c1-230 | head -40
# Each benchmark's tail goes to the terminal and to OUT/bench.log, so a run cut short keeps what finished.
bench() { timeout "$1" $py "${@:2}" 2>&1 | tail -3 | tee -a "$out/bench.log"; }
bench 150 benchmarks/pretrain_throughput.py --device cuda --preset bert-base --precision bf16 --steps 20 --compile
for b in gpt_throughput generate_throughput xlnet_throughput; do bench 90 benchmarks/$b.py --device cuda; done
bench 100 benchmarks/pretrain_throughput.py --device cuda --preset bert-base --precision both --steps 20
bench 60 benchmarks/pretrain_throughput.py --device cuda --preset bert-mini --precision bf16
bench 100 benchmarks/t5_throughput.py --device cuda
