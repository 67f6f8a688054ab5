"""What the τ² suite registers with pytest-ecdysis (entry point `pytest_ecdysis: tau2`).

- `ecdysis_harnesses`: the named harness `direct` (the paper's Direct row: model, tools and policy only);
- `ecdysis_sim_knowledge`: the simulated model's knowledge of τ² tasks, imported lazily from
  `sim_knowledge.py` (owned by the simulated-model part) only when a simulated server starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_ecdysis.hookspecs import hookimpl

HARNESSES_DIR = Path(__file__).resolve().parent / "harnesses"


@hookimpl
def ecdysis_harnesses() -> dict[str, str]:
    return {"direct": str(HARNESSES_DIR / "direct")}


@hookimpl
def ecdysis_sim_knowledge() -> dict[str, Any]:
    from .sim_knowledge import providers

    return providers()
