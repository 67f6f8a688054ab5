"""The reward of a trial, computed in a separate process that never imports harness code.

Harness code runs in the trial's process and could patch anything there (README, "Threat model"), so the worker
sends the serialised trajectory to a long-lived scorer subprocess (one per worker, started lazily,
restarted if it dies) over JSON lines on stdin/stdout:

    request:  {"domain": "airline", "task_id": "3", "simulation": <SimulationRun JSON>}
    response: {"ok": true, "reward": 1.0, "components": {"db": 1.0, "communicate": 1.0},
               "reward_basis": ["DB", "COMMUNICATE"], "checks": {"db_match", "db_diff", "communicate",
               "actions", "note"}}   or   {"ok": false, "error": "..."}

The task is loaded from τ²'s data inside the scorer, not taken from the worker. The reward is τ²'s
`evaluate_simulation(..., EvaluationType.ALL, ...)`: DB state x communicate (x action where a task's
reward basis names it; telecom: environment assertions on the user's phone and the account, x action), no
LLM judge; τ²'s environment evaluator replays the recorded tool calls on a
fresh environment. Run with `-X pycache_prefix=<dir>` (`pytest_ecdysis.validate.pycache.flags`): no
bytecode cache of the venv is read, so a `.pyc` a harness planted in τ²'s (or the plugin's) `__pycache__` is
never loaded. `<dir>` is the session's trusted cache where the sandbox is on (made fresh by the controller,
out of harness processes' reach, read-only in validation sub-runs and checked by the evolution after every
editor call and sub-run), else an empty private directory with `-B`: every module compiled from its source,
whose sources are checksummed before and after each validation (`validate.integrity`). User site-packages are off
(`PYTHONNOUSERSITE=1`) and `PYTHONSTARTUP`/`PYTHONINSPECT` are dropped.
"""

from __future__ import annotations

import functools
import json
from typing import Any

#: τ²'s RewardType values -> our component names (records.RewardComponent).
COMPONENTS = {
    "DB": "db",
    "ENV_ASSERTION": "env_assertion",
    "ACTION": "action",
    "COMMUNICATE": "communicate",
    "NL_ASSERTION": "nl_assertion",
}


def score(domain: str, task_id: str, simulation: dict[str, Any]) -> dict[str, Any]:
    """Score one serialised `SimulationRun` (in this process). Shapes as in the module docstring."""
    from ..tasks.suite import get_task
    from ..tasks.tau2lib import load_tau2

    t = load_tau2()
    task = get_task(domain, task_id)
    run = t.SimulationRun.model_validate(simulation)
    info = t.evaluate_simulation(
        simulation=run, task=task, evaluation_type=t.EvaluationType.ALL, solo_mode=False, domain=domain
    )
    components = {}
    for key, value in (info.reward_breakdown or {}).items():
        name = COMPONENTS.get(getattr(key, "value", str(key)).upper())
        if name:
            components[name] = float(value)
    db_match = info.db_check.db_match if info.db_check else None
    checks = {
        "db_match": db_match,
        "db_diff": db_diff(domain, task, run) if db_match is False else None,
        "communicate": communicate_matches(run.messages, info.communicate_checks or []),
        "actions": [{"name": c.action.name, "match": c.action_match} for c in info.action_checks or []],
        "note": (info.info or {}).get("note"),
        "env_assertions": [
            {
                "env_type": str(getattr(c.env_assertion, "env_type", "")),
                "func_name": c.env_assertion.func_name,
                "arguments": dict(c.env_assertion.arguments or {}),
                "met": bool(c.met),
            }
            for c in info.env_assertions or []
        ]
        or None,
    }
    return {
        "ok": True,
        "reward": float(info.reward),
        "components": components,
        "reward_basis": [getattr(b, "value", str(b)) for b in info.reward_basis or []],
        "checks": checks,
    }


#: bounds of a DB diff: entries kept, characters per value shown.
DIFF_ENTRIES, DIFF_VALUE_CHARS = 20, 300
#: characters shown on each side of a communicate match.
MATCH_CONTEXT = 40


def communicate_matches(messages: list[Any], checks: list[Any]) -> list[dict[str, Any]]:
    """τ²'s communicate checks with where each value was found: `[{"info", "met", "message_index",
    "matched"}]`. The rule is τ²'s own (`evaluator_communicate.py`): the value, lower-cased, inside an
    assistant text with commas removed; `matched` is that text around the match, so a value found inside
    a longer token ("4" in "2024-05-14") shows as such."""
    out = []
    for check in checks:
        needle = str(check.info).lower()
        hit: dict[str, Any] = {"message_index": None, "matched": None}
        for index, message in enumerate(messages):
            content = getattr(message, "content", None)
            if getattr(message, "role", None) != "assistant" or not isinstance(content, str) or not content:
                continue
            text = content.lower().replace(",", "")
            at = text.find(needle)
            if at >= 0:
                lo, hi = max(at - MATCH_CONTEXT, 0), at + len(needle) + MATCH_CONTEXT
                hit = {"message_index": index, "matched": text[lo:hi]}
                break
        out.append({"info": check.info, "met": bool(check.met), **hit})
    return out


def db_diff(domain: str, task: Any, run: Any) -> list[dict[str, Any]]:
    """Where the agent's final DB differs from the gold one, as τ²'s environment evaluator builds both
    (the trajectory's tool calls replayed; the gold actions replayed): `[{"path", "agent", "gold"}]`,
    paths like `reservations.JMO1MG.status`, at most `DIFF_ENTRIES` (then `{"path": "…", "more": n}`)."""
    from tau2.registry import registry

    from . import cow_scoring, db_hash

    used = cow_scoring.used_environments(domain)  # the evaluator's own two, in a scoring child
    if used is not None:
        agent_env, gold_env = used  # tracked: only the records either handed out can differ
        include = db_hash.touched_include(agent_env.tools.db, gold_env.tools.db)
        if not include:
            return []
        return _bounded(
            agent_env.tools.db.model_dump(mode="json", include=include),
            gold_env.tools.db.model_dump(mode="json", include=include),
        )
    constructor = registry.get_env_constructor(domain)
    initial = task.initial_state
    data = initial.initialization_data if initial else None
    actions = initial.initialization_actions if initial else None
    agent = constructor()
    agent.set_state(initialization_data=data, initialization_actions=actions, message_history=run.messages)
    gold = constructor()
    gold.set_state(
        initialization_data=data,
        initialization_actions=actions,
        message_history=(initial.message_history or []) if initial else [],
    )
    for action in (task.evaluation_criteria.actions or []) if task.evaluation_criteria else []:
        try:
            gold.make_tool_call(tool_name=action.name, requestor=action.requestor, **action.arguments)
        except Exception:
            pass  # as τ²'s evaluator does (suspect tasks)
    return _bounded(agent.tools.db.model_dump(mode="json"), gold.tools.db.model_dump(mode="json"))


def _bounded(agent: Any, gold: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    _diff(agent, gold, "", out)
    if len(out) > DIFF_ENTRIES:
        return [*out[:DIFF_ENTRIES], {"path": "…", "more": len(out) - DIFF_ENTRIES}]
    return out


def _diff(agent: Any, gold: Any, path: str, out: list[dict[str, Any]]) -> None:
    if len(out) > DIFF_ENTRIES:
        return
    if isinstance(agent, dict) and isinstance(gold, dict):
        for key in sorted(set(agent) | set(gold), key=str):
            _diff(agent.get(key), gold.get(key), f"{path}.{key}" if path else str(key), out)
    elif isinstance(agent, list) and isinstance(gold, list) and len(agent) == len(gold):
        for i, (a, g) in enumerate(zip(agent, gold, strict=True)):
            _diff(a, g, f"{path}[{i}]", out)
    elif agent != gold:
        out.append({"path": path, "agent": _short(agent), "gold": _short(gold)})


def _short(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False)
        return (
            value
            if len(text) <= DIFF_VALUE_CHARS
            else text[:DIFF_VALUE_CHARS] + f"… [cut {len(text) - DIFF_VALUE_CHARS} chars]"
        )
    return value


def _fast_environments() -> None:
    """Let τ²'s evaluator build environments from a database loaded once per process (a deep copy of the
    same data `get_environment()` reads from disk: same content, no re-parse per evaluation)."""
    from tau2.registry import registry

    from ..tasks.tau2lib import DOMAINS
    from . import cow_scoring

    for domain in DOMAINS:  # telecom too: its environments carry the user's phone (user_db) as well
        original = registry.get_env_constructor(domain)

        def constructor(db=None, solo_mode=False, _domain=domain, _original=original):
            if db is not None or solo_mode:
                return _original(db=db, solo_mode=solo_mode)
            return cow_scoring.environment(_domain)

        registry._domains[domain] = constructor


@functools.cache
def ready() -> None:
    """τ² imported and its evaluator's environments served from memory (`_fast_environments`): once per
    process (a worker's own scorer at start, the warm server at its first connection)."""
    from ..tasks.tau2lib import load_tau2

    load_tau2()
    _fast_environments()


def serve_lines(lines: Any, out: Any, scored: Any = None) -> None:
    """Answer each request line of `lines` with one response line on `out` (module docstring), until EOF;
    `scored()` is called after each answer (the warm server's scorer reports new gold hashes there)."""
    from . import cow_scoring

    for line in lines:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            domain, task_id, simulation = request["domain"], str(request["task_id"]), request["simulation"]
            if cow_scoring.available():  # τ²'s evaluator in a forked child, over environments built once
                response = cow_scoring.score_in_child(
                    domain, functools.partial(score, domain, task_id, simulation), task_id=task_id
                )
            else:
                response = score(domain, task_id, simulation)
        except Exception as exc:  # the worker turns this into an infrastructure error with the text
            response = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(response) + "\n")
        out.flush()
        if scored is not None:
            scored()
