"""The calibration's cured harness is example_harness plus a hand-written patch: it must keep applying."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from pytest_ecdysis.core.harness import load_harness

ROOT = Path(__file__).resolve().parents[1]


def test_cures_patch_applies_to_the_example_harness_and_imports(tmp_path):
    """benchmarks/cured_harness.patch applies cleanly to the current example_harness, the result is a
    harness that provides build_agent, and it differs from the example only in the documented cure knobs."""
    spec = importlib.util.spec_from_file_location(
        "bench_sim_calibration", ROOT / "benchmarks" / "bench_sim_calibration.py"
    )
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_sim_calibration"] = bench
    spec.loader.exec_module(bench)
    cured = bench.materialise_cured(tmp_path)
    assert not (cured / "recipes").exists()
    module = load_harness(cured)
    assert callable(module.build_agent)
    config = (cured / "config.py").read_text()
    assert "MAX_TOOL_RESULT_CHARS = 20000" in config
    assert "seen_errors" in (cured / "feedback.py").read_text()
