"""The near-miss benchmark harness, built at run time: a copy of a harness (the example by default) with
the generic near-miss check of `benchmarks/harnesses/near_miss/` added, so that it is always the example
of this tree plus the check and nothing else.

The copy gets `grounding.py` beside its modules and `agent_addon.py` appended to its `agent.py` (which
wraps `HarnessAgent._emit_calls`; the way tests/test_sim_repairs.py adds its repair). Used by
`benchmarks/sim_trials.py --near-miss`; on its own it prints the built harness's directory, for any
benchmark's `--harness`:

    python benchmarks/sim_trials.py --trials 4 --nonce world-1 --near-miss --out near_miss.jsonl
    python benchmarks/bench_harness_gap.py --harness "$(python benchmarks/near_miss_harness.py)"
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "pytest_ecdysis_tau2" / "example_harness"
ADDITION = Path(__file__).resolve().parent / "harnesses" / "near_miss"
#: The directory name of the built harness: the summary's `harness` and the trials' harness id name it.
NAME = "near_miss_harness"


def build(parent: Path | None = None, base: Path = EXAMPLE) -> Path:
    """Copy `base` (a harness directory shaped like the example: `agent.py` with `HarnessAgent._emit_calls`
    and `tools as tool_interface`) to `<parent>/near_miss_harness` (a new temporary directory when `parent`
    is None), without `recipes/` and `__pycache__`, and add the near-miss check. Returns the new directory.

    Raises ValueError when `base` has no such `agent.py` (the check could not wrap it), FileExistsError when
    the target exists."""
    agent = base / "agent.py"
    source = agent.read_text(encoding="utf-8") if agent.is_file() else ""
    if "def _emit_calls(" not in source or "tool_interface" not in source:
        raise ValueError(
            f"{base} has no agent.py with HarnessAgent._emit_calls and `tools as tool_interface`: the near-miss "
            "check wraps those; pass a harness shaped like pytest_ecdysis_tau2/example_harness"
        )
    target = Path(parent if parent is not None else tempfile.mkdtemp(prefix="ecdysis-near-miss-")) / NAME
    shutil.copytree(base, target, ignore=shutil.ignore_patterns("__pycache__", "recipes"))
    shutil.copy2(ADDITION / "grounding.py", target / "grounding.py")
    addon = (ADDITION / "agent_addon.py").read_text(encoding="utf-8")
    (target / "agent.py").write_text(source + "\n\n" + addon, encoding="utf-8")
    return target


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
