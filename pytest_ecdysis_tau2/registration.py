"""What the τ² suite registers with pytest-ecdysis (entry point `pytest_ecdysis: tau2`).

- `ecdysis_harnesses`: the named harnesses `example_harness` (the default) and `direct` (the paper's Direct
  row: model, tools and policy only);
- `ecdysis_templates`: `template/`, the suite's part of a new repository (`ecdysis init --suite tau2`);
- `ecdysis_sim_knowledge`: the simulated model's knowledge of τ² tasks, imported lazily from
  `knowledge/providers.py` (owned by the simulated-model part) only when a simulated server starts;
- `ecdysis_answer_keys`: τ²'s task files (gold actions, evaluation criteria, splits), covered in the editor's
  sandbox as they are in the harness's (`harness_process/agent_env.gold_files`);
- `ecdysis_warm_services`: the session's warm scorer server (`scoring/warm_scorer.py`), with the sandbox on;
- `ecdysis_preflight_request`: the endpoint pre-flight's request in the shape of the suite's trials (τ²'s
  own tool schemas, `tasks/preflight_tools.json`);
- `ecdysis_task_ids`, `ecdysis_case_task`: the task ids of each split, and the task of a case's node id, for
  the controller's checks of `--ecdysis-tasks` and of a gate's baseline right after collection.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pytest_ecdysis import hookimpl

HARNESSES_DIR = Path(__file__).resolve().parent / "harnesses"
#: the example harness, the default `--ecdysis-harness` (the paper's Human-Aug. row), installed with this suite
EXAMPLE_HARNESS = Path(__file__).resolve().parent / "example_harness"


@hookimpl
def ecdysis_harnesses() -> dict[str, str]:
    return {"direct": str(HARNESSES_DIR / "direct"), "example_harness": str(EXAMPLE_HARNESS)}


#: τ²'s own schemas of two airline tools as `Tool.openai_schema` writes them (pydantic's `title` keys
#: included): `get_reservation_details`, the call the pre-flight's message asks for, and `book_reservation`,
#: whose nested `$defs`/`$ref` are the hardest shape the suite's trials send. Kept as data so the controller
#: need not import τ²; tests/test_endpoint_preflight.py checks them against τ²'s.
PREFLIGHT_TOOLS = Path(__file__).resolve().parent / "tasks" / "preflight_tools.json"


@hookimpl
def ecdysis_preflight_request() -> dict[str, Any]:
    """The pre-flight's request as the τ² trials send theirs: τ²'s tool schemas (`PREFLIGHT_TOOLS`) and
    `tool_choice` `"auto"` (the harnesses send none; servers take a request with tools as `auto`)."""
    import json

    doc = json.loads(PREFLIGHT_TOOLS.read_text())
    return {
        "tools": doc["tools"],
        "tool_choice": "auto",
        "messages": [{"role": "user", "content": "Please look up reservation 8JX2WO."}],
    }


@hookimpl
def ecdysis_templates() -> dict[str, str]:
    return {"tau2": str(Path(__file__).resolve().parent / "template")}


@hookimpl
def ecdysis_sim_knowledge() -> dict[str, Any]:
    from .knowledge.providers import providers

    return providers()


@hookimpl
def ecdysis_answer_keys() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec(
        "tau2"
    )  # located, not imported (tau2's import costs most of a CPU second)
    if spec is None or not spec.submodule_search_locations:
        return []
    # τ²'s `tau2.utils.utils.DATA_DIR`: the package's own `data` directory
    domains = Path(next(iter(spec.submodule_search_locations))) / "data" / "tau2" / "domains"
    return sorted(str(p) for p in domains.glob("*/*.json") if p.name.startswith(("tasks", "split_tasks")))


@hookimpl
def ecdysis_warm_services(directory: str) -> list[Any]:
    """The session's warm scorer server (`warm_scorer`; the plugin calls this only when the sandbox is on)."""
    from .scoring.warm_scorer import start

    return [start(directory)]


@hookimpl
def ecdysis_task_ids(split: str) -> dict[str, list[str]]:
    from .tasks.suite import DOMAINS, split_ids, suite_name

    return {suite_name(d): list(split_ids(d, split)) for d in DOMAINS}


#: the τ² cases' node ids: `.../test_airline.py::test_airline[3-t0]` (cases.py), `[NOTSET]` when none selected.
CASE_ID = re.compile(r"::test_(?P<domain>airline|retail|telecom)\[(?:(?P<task>.+)-t\d+|NOTSET)\]$")


@hookimpl
def ecdysis_case_task(nodeid: str) -> tuple[str, str | None] | None:
    match = CASE_ID.search(nodeid)
    if match is None:
        return None
    return f"tau2-{match['domain']}", match["task"]
