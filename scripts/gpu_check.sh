#!/bin/bash
# The GPU checks of one lent device session (docs/performance.md, "GPU"): the whole test suite with CUDA visible
# (every Trainer picks `device: auto` = cuda), then the same-process speed benchmarks on the GPU. Data packages
# that are not in the device image travel in .gpu_site (copied from .venv; see docs/performance.md).
# Usage there: bash scripts/gpu_check.sh OUT_DIR
out=${1:-/tmp/gpu_check}
mkdir -p "$out"
export PYTHONPATH=$PWD:$PWD/.gpu_site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), 'transformers', transformers.__version__)"
timeout 300 python3 -m pytest -q -n 12 -p no:cacheprovider --timeout 240 tests > "$out/pytest.log" 2>&1
echo "pytest exit $?"; grep -E "passed|failed" "$out/pytest.log" | tail -1
grep -E "^(FAILED|ERROR)" "$out/pytest.log" | cut -c1-230 | head -40
for args in "--preset bert-base --precision both --steps 20" "--preset bert-mini --precision bf16"; do
  timeout 100 python3 benchmarks/pretrain_throughput.py --device cuda $args 2>&1 | tail -4
done
timeout 100 python3 benchmarks/t5_throughput.py --device cuda 2>&1 | tail -4
