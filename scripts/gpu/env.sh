# Sourced by the scripts run on a GPU machine (check.sh, sweep.sh, t5_sweep.sh; docs/performance.md): the
# import path with the data packages carried in .gpu_site, the interpreter ($py), and what the machine
# is, printed first so that every log names its device. Call it from the repository root.
export PYTHONPATH=$PWD:$PWD/.gpu_site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
$py -c "import torch, transformers; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available(), \
'transformers', transformers.__version__)"
