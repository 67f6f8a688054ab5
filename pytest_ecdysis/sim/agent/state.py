"""What one trial of the simulated agent holds, shared by the parts of `sim.agent.trial.AgentTrial`.

`AgentState` is the trial's identity (task, profile, trial, nonce, the quirk kinds a replay switched off),
what the request being answered shows (`tools`, `request`, and `user_texts`: what the user simulator wrote,
the server's set), the rules the prompt gives (`rules`, `addressed`), where the model is (`pos`, `step`,
`calls`, `pending`), what it saw and means (`seen`, `intended`) and the ground-truth entries drawn so far
with what they damaged (`quirks`, `bent_by`, `wrong_at`, `effects`, `verbose_quirk`, `reached_final`,
`closed`). Every part (`draws`, `rules`, `intent`, `emit`, `user_steps`) is given this one object and keeps
only its own bookkeeping beside it. `Pending` is what the model sent last and waits to see answered. This
module must not import tau2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_ecdysis.sim.knowledge import IdBend, SimTask
from pytest_ecdysis.sim.profiles import Profile


@dataclass
class Pending:
    """What the model sent last and is waiting to see answered."""

    kind: str  # call | confirm | early_end | final | giveup | ask_user
    call_id: str = ""
    plan_index: int = -1
    args: dict[str, Any] = field(default_factory=dict)
    raw_args: str = ""
    bend: IdBend | None = None
    bend_quirk: int | None = None
    malformed_quirk: int | None = None
    reread: bool = False
    repeat_quirk: int | None = None
    first_error: str | None = None
    repeats: int = 0
    quirk: int | None = None  # early_end / forget_communicate index
    text: str = ""


@dataclass
class AgentState:
    """The state the parts of one agent trial share (module docstring)."""

    task: SimTask
    profile: Profile
    trial: int
    nonce: str = ""
    off: frozenset[str] = frozenset()  # quirk kinds switched off (a replay: did one of them cause a failure?)
    user_texts: set[str] = field(default_factory=set)  # what the user simulator wrote in this trial
    tools: list[Any] = field(default_factory=list)  # the tool schemas of the current request
    request: list[dict[str, Any]] = field(default_factory=list)  # the messages of the request being answered
    rules: tuple[Any, ...] = ()  # the prompt's rules (sim/agent/instructions.py), read at every request
    addressed: frozenset[str] = frozenset()  # quirk kinds a rule of the prompt addresses
    pos: int = 0  # the plan step the model is at
    step: int = 0  # agent requests answered
    calls: int = 0  # tool calls sent (numbers the call ids)
    pending: Pending | None = None
    seen: dict[int, str] = field(default_factory=dict)  # plan index -> the latest tool result the model saw
    intended: dict[int, dict[str, Any]] = field(default_factory=dict)  # plan index -> the arguments it means
    quirks: list[dict[str, Any]] = field(default_factory=list)  # the ground-truth entries drawn so far
    bent_by: dict[int, int] = field(default_factory=dict)  # plan index -> the entry that bent its arguments
    #: (plan index, argument path) -> the entry that made that value wrong
    wrong_at: dict[tuple[int, str], int] = field(default_factory=dict)
    effects: dict[int, str] = field(default_factory=dict)  # ground-truth entry -> how it damaged the outcome
    verbose_quirk: int | None = None  # the verbose_rereads entry (its cure is settled at trial end)
    reached_final: bool = False
    closed: bool = False  # the model sent a closing text (final answer, early end or giving up)
