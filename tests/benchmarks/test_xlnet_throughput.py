"""benchmarks/xlnet_throughput.py runs end to end at tiny sizes: the loss check between bertzoo's PermutationLM and
transformers' XLNetLMHeadModel passes, and the last line is JSON with a positive finite `ratio`. No timing is
asserted (a smoke test of the script, not a measurement)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from helpers.scripts import load_script

pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "xlnet_throughput.py"
TINY = [
    *("--preset xlnet-tiny --xl-preset transfo-xl-tiny --vocab 64 --batch 2 --length 16".split()),
    *("--xl-batch 2 --xl-length 16 --segment 8 --steps 2 --warmup 1 --precision fp32".split()),
]


def test_the_benchmark_runs_tiny_and_ends_with_json(capsys) -> None:
    bench = load_script(SCRIPT)
    bench.main(TINY)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("loss check (fp32)") and lines[0].endswith("ok")
    result = json.loads(lines[-1])
    assert result["loss_check"] is True and result["loss_diff"] <= 1e-4
    assert math.isfinite(result["ratio"]) and result["ratio"] > 0
    for key in ("bertzoo_tokens_per_s", "transformers_tokens_per_s", "transfo_xl_memory_tokens_per_s"):
        assert math.isfinite(result[key]) and result[key] > 0
    assert result["precision"] == "fp32" and result["cpu_capability"]
