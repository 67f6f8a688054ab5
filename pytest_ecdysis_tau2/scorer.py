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
(`PYTHONNOUSERSITE=1`) and `PYTHONSTARTUP`/`PYTHONINSPECT` are dropped (issue 27, item 3).
"""

from __future__ import annotations

import functools
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

#: Interpreter flags of the scorer process where no trusted cache exists: no bytecode written (-B), and
#: looked up only under a private, empty prefix (`-X pycache_prefix`), so none is read (module docstring).
SCORER_FLAGS = ("-B",)
#: Variables the scorer process does not inherit (code loaded before the scorer's own).
SCORER_DROPPED_ENV = ("PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONPYCACHEPREFIX", "PYTHONHOME", "PYTHONEXECUTABLE")

#: τ²'s RewardType values -> our component names (records.RewardComponent).
COMPONENTS = {"DB": "db", "ENV_ASSERTION": "env_assertion", "ACTION": "action",
              "COMMUNICATE": "communicate", "NL_ASSERTION": "nl_assertion"}


def score(domain: str, task_id: str, simulation: dict[str, Any]) -> dict[str, Any]:
    """Score one serialised `SimulationRun` (in this process). Shapes as in the module docstring."""
    from .suite import get_task
    from .tau2lib import load_tau2

    t = load_tau2()
    task = get_task(domain, task_id)
    run = t.SimulationRun.model_validate(simulation)
    info = t.evaluate_simulation(simulation=run, task=task, evaluation_type=t.EvaluationType.ALL,
                                 solo_mode=False, domain=domain)
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
        "env_assertions": [{"env_type": str(getattr(c.env_assertion, "env_type", "")),
                            "func_name": c.env_assertion.func_name, "arguments": dict(c.env_assertion.arguments or {}),
                            "met": bool(c.met)} for c in info.env_assertions or []] or None,
    }
    return {"ok": True, "reward": float(info.reward), "components": components,
            "reward_basis": [getattr(b, "value", str(b)) for b in info.reward_basis or []], "checks": checks}


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
        needle, hit = str(check.info).lower(), {"message_index": None, "matched": None}
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

    from . import cow_scoring

    used = cow_scoring.used_environments(domain)  # the evaluator's own two, in a scoring child
    if used is not None:
        agent_env, gold_env = used
        return _bounded(agent_env.tools.db.model_dump(mode="json"), gold_env.tools.db.model_dump(mode="json"))
    constructor = registry.get_env_constructor(domain)
    initial = task.initial_state
    data = initial.initialization_data if initial else None
    actions = initial.initialization_actions if initial else None
    agent = constructor()
    agent.set_state(initialization_data=data, initialization_actions=actions, message_history=run.messages)
    gold = constructor()
    gold.set_state(initialization_data=data, initialization_actions=actions,
                   message_history=(initial.message_history or []) if initial else [])
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
        return value if len(text) <= DIFF_VALUE_CHARS else text[:DIFF_VALUE_CHARS] + f"… [cut {len(text) - DIFF_VALUE_CHARS} chars]"
    return value


def _fast_environments() -> None:
    """Let τ²'s evaluator build environments from a database loaded once per process (a deep copy of the
    same data `get_environment()` reads from disk: same content, no re-parse per evaluation)."""
    from tau2.registry import registry

    from . import cow_scoring
    from .tau2lib import DOMAINS

    for domain in DOMAINS:  # telecom too: its environments carry the user's phone (user_db) as well
        original = registry.get_env_constructor(domain)

        def constructor(db=None, solo_mode=False, _domain=domain, _original=original):
            if db is not None or solo_mode:
                return _original(db=db, solo_mode=solo_mode)
            return cow_scoring.environment(_domain)

        registry._domains[domain] = constructor



def main() -> None:
    """Serve requests on stdin until EOF; anything tau2 prints goes to stderr, never into the protocol."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    from .tau2lib import load_tau2

    load_tau2()
    _fast_environments()
    from . import cow_scoring

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            domain, task_id, simulation = request["domain"], str(request["task_id"]), request["simulation"]
            if cow_scoring.available():  # τ²'s evaluator in a forked child, over environments built once
                response = cow_scoring.score_in_child(domain, functools.partial(score, domain, task_id, simulation),
                                                      task_id=task_id)
            else:
                response = score(domain, task_id, simulation)
        except Exception as exc:  # the worker turns this into an infrastructure error with the text
            response = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(response) + "\n")
        out.flush()


class ScorerError(RuntimeError):
    """The scorer process failed, timed out or could not score a trajectory."""


class ScorerClient:
    """A worker's handle on its scorer process: started lazily, restarted once if it died."""

    def __init__(self, timeout_s: float = 300.0) -> None:
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.cwd = tempfile.mkdtemp(prefix="ecdysis-scorer-")  # no .env, no harness on the path

    def _start(self) -> subprocess.Popen:
        from . import SUITE_ROOT

        package_root = str(SUITE_ROOT)
        env = {k: v for k, v in os.environ.items() if k not in SCORER_DROPPED_ENV}
        from pytest_ecdysis.validate.pycache import flags

        env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONNOUSERSITE="1")
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # -B where nothing may be written (`flags`)
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        prefix = tempfile.mkdtemp(prefix="pycache-", dir=self.cwd)  # empty: nothing to load from it
        command = [sys.executable, *flags(Path(prefix)), "-m", "pytest_ecdysis_tau2.scorer"]
        return subprocess.Popen(command, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=self.cwd,
                                env=env)

    def start(self) -> None:
        """Start the process now (it imports tau2 while the first trial runs)."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()

    def score(self, domain: str, task_id: str, simulation_json: str) -> dict[str, Any]:
        """Send one trajectory; returns the response dict. Raises ScorerError."""
        line = json.dumps({"domain": domain, "task_id": task_id, "simulation": json.loads(simulation_json)})
        with self.lock:
            for attempt in (1, 2):
                if self.proc is None or self.proc.poll() is not None:
                    self.proc = self._start()
                try:
                    self.proc.stdin.write(line + "\n")
                    self.proc.stdin.flush()
                    ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout_s)
                    if not ready:
                        self.close()
                        raise ScorerError(f"scorer gave no answer within {self.timeout_s:g} s")
                    answer = self.proc.stdout.readline()
                    if not answer:
                        raise BrokenPipeError("scorer exited")
                except (BrokenPipeError, OSError) as exc:
                    self.close()
                    if attempt == 2:
                        raise ScorerError(f"scorer process died twice: {exc}") from None
                    continue
                response = json.loads(answer)
                if not response.get("ok"):
                    raise ScorerError(f"scorer could not score task {task_id}: {response.get('error')}")
                return response
        raise ScorerError("unreachable")

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=5)
            except Exception:
                pass
            self.proc = None


_CLIENT: ScorerClient | None = None


def scorer_client() -> ScorerClient:
    """The worker's scorer (one per process)."""
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = ScorerClient()
        import atexit

        atexit.register(_CLIENT.close)
    return _CLIENT


if __name__ == "__main__":
    main()
