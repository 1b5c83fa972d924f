"""The benchmarks' own plumbing, run small: a benchmark that measures for minutes must still write its report."""

import json
import subprocess
import sys
from pathlib import Path

from spgnn import cost

ROOT = Path(__file__).resolve().parents[1]


def test_bench_model_writes_a_valid_report_against_the_defaults(tmp_path):
    """bench_model at P = 1 and 2 on a small synthetic graph, scored against the built-in rates ("default"): the JSON
    report is written, every layout has a measured step and a prediction, and the rates it records are the defaults,
    a process alone's included (a nested dataclass that once failed the JSON write after every step was measured)."""
    out = tmp_path / "model.json"
    done = subprocess.run([sys.executable, "benchmarks/bench_model.py", "--datasets", "sbm:400:4", "--procs", "1,2",
                           "--epochs", "1", "--calibration", "default", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["calibration"] is None and list(report["scores"]) == ["default"]
    assert {r["P"] for r in report["runs"]} == {1, 2} and len(report["runs"]) > 2
    for r in report["runs"]:
        assert r["measured_s"] > 0 and len(r["predicted_by"]) == 1 and r["predicted_by"][0] == r["predicted_s"] > 0
        assert r["rates"]["flops_per_s"] == cost.DEFAULT_RATES.flops_per_s
        assert r["rates"]["alone"]["spmm_bytes_per_s"] == cost.DEFAULT_RATES.alone.spmm_bytes_per_s
    assert out.with_suffix(".png").stat().st_size > 0
