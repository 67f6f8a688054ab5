"""What the simulated model knows of a task suite: the protocol a suite implements, and its nouns.

A suite registers one provider per suite name through the `ecdysis_sim_knowledge` hook
(`pytest_ecdysis.core.registry.sim_knowledge()`); the server asks it for a `SimTask` the first time a trial
of that task is seen. The provider owns everything suite-specific: the gold plan (lookups + gold
actions, in order), which write arguments take their value from an earlier tool result, how a quirk
bends a tool call of this suite (which arguments are ids, what a wrong case or a dropped prefix looks
like), the user scenario and the `communicate_info` values.

This module must not import tau2, the task suites or any harness: it is the plugin side of the seam.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: `Dependency.source_step` of a value the user states in its own words (first turn or when asked).
USER_SOURCE = -1


@dataclass(frozen=True)
class Dependency:
    """A value the model must read in the request before it can send it (an argument or a figure).

    `path` is the argument name, `name[i]` / `a[0].b` inside a list or object argument, or
    `communicate_info[i]` for a figure of the final answer; `value` the gold value as a string;
    `source_step` the index of the plan step whose result first contains it, or `USER_SOURCE` (-1)
    when the user states it; `offset` the character offset of the value in that result (how far a
    truncation must reach) or in the user's words. A planned value with no `Dependency` is the
    model's own (a date it converts, a reason it words): it comes from its intent, not the request.
    """

    path: str
    value: str
    source_step: int
    offset: int


@dataclass(frozen=True)
class IdBend:
    """How a quirk bends one id argument of a call: `kind` (`id_case` or `id_prefix`), the argument
    name, and the bent value the model sends instead of the gold one."""

    kind: str
    arg: str
    bent: Any


@dataclass(frozen=True)
class PlanStep:
    """One tool call of the gold plan. `write` is True for calls that change the environment's state;
    `dependencies` are the argument values the model must read in the request (from the user or an
    earlier result) to send this call right. `actor` "user" marks a step of a dual-control suite (τ²
    telecom) the user runs with their own tools: the agent asks for it in words (`sim.agent.user_steps`)
    and the simulated user makes the call (`sim.user.tools`)."""

    name: str
    arguments: dict[str, Any]
    write: bool = False
    gold: bool = True  # False for a lookup the provider added (τ² airline gold lists few reads)
    dependencies: tuple[Dependency, ...] = ()
    id_bends: tuple[IdBend, ...] = ()
    result_chars: int = 0  # length of the gold result text (what a harness may truncate)
    actor: str = (
        "agent"  # "user": a step the user runs on their own device when the agent asks (dual control)
    )


@dataclass(frozen=True)
class Scenario:
    """The user side of a task, in the suite's words (τ²: second person, 'You are ...')."""

    reason_for_call: str
    known_info: str = ""
    unknown_info: str = ""
    task_instructions: str = ""
    persona: str = ""


@dataclass(frozen=True)
class SimTask:
    """Everything the simulated agent and user need for one task.

    `plan`: ordered tool calls (lookups and gold actions); `communicate_info`: values the agent must
    state in its final answer (τ²'s communicate check: case-insensitive substring, commas removed);
    `figures`: the `Dependency` of each communicate_info value found in a tool result of the plan
    (a figure found nowhere is computed by the model); `policy`: the domain policy the model must be given
    to act by it (τ²: the environment's policy; "" when the suite has none): a request whose system text
    carries too little of it (`reading.policy_coverage`) gets writes the policy would have decided wrong;
    `extra`: anything else a suite wants to pass to its own policies (not read by the generic server).
    """

    suite: str
    task_id: str
    plan: tuple[PlanStep, ...]
    scenario: Scenario
    communicate_info: tuple[str, ...] = ()
    figures: tuple[Dependency, ...] = ()
    policy: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def writes(self) -> list[int]:
        """Indices of the write steps of the plan."""
        return [i for i, step in enumerate(self.plan) if step.write]


@runtime_checkable
class SimKnowledge(Protocol):
    """A suite's knowledge provider: one per suite name (e.g. `tau2-airline`).

    `task(task_id)` returns the task's `SimTask` and raises `KeyError` for an unknown id. It may be
    slow the first time (a provider may replay the gold plan on a fresh environment) and must be
    cached by the provider; it is called from server threads, so it must be thread-safe.
    """

    def task(self, task_id: str) -> SimTask: ...


#: Words that make a tool message a refusal by the harness (it did not execute the call): read like an
#: error, as a real model reads "blocked: ..." or "not executed" (the harness's own refusals and notes).
_REFUSAL = re.compile(
    r"\b(refus\w*|rejected|blocked|denied|not executed|was not (sent|run|executed)|not allowed|invalid)\b"
)


def is_error_text(content: str) -> bool:
    """Whether a tool message reads as an error to the model: it starts with `Error`/`[error`, is a
    JSON object with an `error` key, says `not found` near the start, or is a refusal by the harness
    (`refused`, `rejected`, `blocked`, `not executed`, ... near the start). Harness-agnostic on purpose:
    it reads what the harness sent, whatever wrapper it used."""
    head = content.lstrip()[:200].lower()
    return (
        head.startswith("error")
        or head.startswith("[error")
        or head.startswith('{"error"')
        or "not found" in head
        or head.startswith("tool error")
        or (not head.startswith(("{", "[")) and _REFUSAL.search(head[:120]) is not None)
    )


def leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every scalar inside an arguments object with its path (`a`, `a[0]`, `a[0].b`), in order."""
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in leaves(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in leaves(v, f"{path}[{i}]")]
    return [(path, value)]


def id_like(value: Any) -> bool:
    """An identifier-looking string (no spaces, at least 5 characters, a digit or all upper-case
    letters and digits): what a model copies from a tool result rather than from common words."""
    return (
        isinstance(value, str)
        and len(value) >= 5
        and " " not in value
        and (any(c.isdigit() for c in value) or (value.isalnum() and value.isupper()))
    )
