"""The simulated model behind the HTTP layer: one completion routed by role and trial (usable without HTTP).

`SimModel.complete(body, role, trial_header)` answers an OpenAI chat-completions body: `agent` and `user`
requests need the trial header `<run-id>/<suite>/<task-id>/<trial>` (`parse_trial`) and are answered by
the trial's `sim.agent.trial.AgentTrial` / `sim.user.trial.UserTrial` (`TrialState`); the diagnosis roles, or
no role and no trial, by `ROLE_HANDLERS` (name -> callable(role, body) -> str; open for extension). A bad
request is a `RequestError` (the HTTP layer, `sim.server`, answers it with its status and an OpenAI error
body). `SimModel.ground_truth(header)` is the trial's ground truth, `SimModel.replay` a failed trial's replay.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.sim.agent.trial import AgentTrial
from pytest_ecdysis.sim.knowledge import SimKnowledge
from pytest_ecdysis.sim.profiles import Profile, known_profiles, load_profile
from pytest_ecdysis.sim.truth.repairs import attribute, note_emitted
from pytest_ecdysis.sim.user.trial import UserTrial

TRIAL_HEADER = "X-Ecdysis-Trial"
ENV_NONCE = "ECDYSIS_SIM_NONCE"
ROLE_HEADER = "X-Ecdysis-Role"
TRIAL_ROLES = ("agent", "user")
DIAGNOSIS_ROLES = ("analyst", "critic", "engineer", "moderator", "editor")


class RequestError(Exception):
    """A bad request: answered with HTTP `status` and an OpenAI-style error body."""

    def __init__(
        self,
        message: str,
        code: str = "invalid_request",
        status: int = 400,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.code, self.status, self.type = message, code, status, type_


def _roles_answer(role: str | None, body: dict[str, Any]) -> str:
    try:
        module = importlib.import_module("pytest_ecdysis.sim.roles.answers")
    except ModuleNotFoundError as exc:
        if exc.name not in ("pytest_ecdysis.sim.roles", "pytest_ecdysis.sim.roles.answers"):
            raise
        raise RequestError(
            f"the simulated model has no answers for role {role!r} "
            "(pytest_ecdysis.sim.roles is not installed)",
            code="role_not_supported",
        ) from None
    return module.answer(role, body)


#: Roles answered without a trial: name -> callable(role, body) -> reply text. Open for extension.
ROLE_HANDLERS: dict[str | None, Callable[[str | None, dict[str, Any]], str]] = {
    name: _roles_answer for name in (*DIAGNOSIS_ROLES, None)
}


@dataclass
class TrialState:
    """Everything the server keeps for one trial header: the agent's and the user's state."""

    suite: str
    task_id: str
    trial: int
    run_id: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    agent: AgentTrial | None = None
    user: UserTrial | None = None
    user_texts: set[str] = field(default_factory=set)
    #: call id -> the tool call the agent emitted (`sim.truth.repairs.note_emitted`): what the model sent,
    #: which the ground truth compares with what the environment executed
    emitted: dict[str, dict[str, Any]] = field(default_factory=dict)


def parse_trial(value: str) -> tuple[str, str, str, int]:
    """`<run-id>/<suite>/<task-id>/<trial>` -> (run_id, suite, task_id, trial). Task ids may contain '/'.

    Raises:
        RequestError: not of that shape, or a trial that is not a non-negative integer.
    """
    parts = value.split("/")
    if len(parts) < 4 or not all(parts[:2]) or not parts[-1].isdigit():
        raise RequestError(
            f"{TRIAL_HEADER} must be '<run-id>/<suite>/<task-id>/<trial>' "
            f"(trial a non-negative integer), got {value!r}",
            code="bad_trial_header",
        )
    return parts[0], parts[1], "/".join(parts[2:-1]), int(parts[-1])


class SimModel:
    """The simulated model behind the HTTP layer (usable without HTTP, e.g. in benchmarks).

    `knowledge`: `{suite: SimKnowledge}`; None loads the installed suites' providers on first use.
    `nonce`: the run nonce of the profiles' noisy draws; None reads `ECDYSIS_SIM_NONCE`, and when that
    is unset too each run id (the first part of the trial header) is its own nonce: every run and
    validation sub-run varies, as a real model's reruns do. Fix it for byte-identical runs.
    """

    def __init__(
        self,
        *,
        default_profile: str = "default",
        latency_s: float = 0.0,
        knowledge: dict[str, SimKnowledge] | None = None,
        nonce: str | None = None,
    ) -> None:
        self.default_profile = load_profile(default_profile).name  # UsageError for an unknown one
        self.latency_s = latency_s
        self.nonce = nonce if nonce is not None else (os.environ.get(ENV_NONCE) or None)
        self._knowledge = knowledge
        self._lock = threading.Lock()
        self._trials: dict[str, TrialState] = {}
        self._replays: dict[str, tuple[str, frozenset[str]]] = {}  # run id -> (nonce, quirk kinds off)

    def replay(self, run_id: str, *, nonce: str, off: frozenset[str] | set[str] = frozenset()) -> None:
        """Serve the trials of run id `run_id` as replays: drawn with `nonce` (the original trial's, from its
        ground truth) and with the quirk kinds `off` switched off (`sim/truth/replay.py`). Python only, never
        over HTTP: the code holding this server decides; a harness cannot reach it."""
        with self._lock:
            self._replays[run_id] = (nonce, frozenset(off))

    # -- lookups -------------------------------------------------------------------------------------

    def knowledge(self) -> dict[str, SimKnowledge]:
        with self._lock:
            if self._knowledge is None:
                from pytest_ecdysis.core.registry import sim_knowledge

                self._knowledge = dict(sim_knowledge())
            return self._knowledge

    def profile_for(self, model: Any) -> Profile:
        if not isinstance(model, str) or not model:
            raise RequestError("'model' is required: 'sim' or 'sim/<profile>'", code="missing_model")
        if model == "sim":
            name = self.default_profile
        elif model.startswith("sim/") and model[4:]:
            name = model[4:]
        else:
            raise RequestError(
                f"model {model!r} is not served here; use 'sim' or 'sim/<profile>' "
                f"(profiles: {', '.join(known_profiles())})",
                code="model_not_found",
            )
        try:
            return load_profile(name)
        except UsageError as exc:
            raise RequestError(str(exc), code="model_not_found") from None

    def trial_state(self, header: str | None) -> TrialState:
        if not header:
            raise RequestError(
                f"agent and user requests need the {TRIAL_HEADER} header "
                "'<run-id>/<suite>/<task-id>/<trial>' (the suite's client sets it)",
                code="missing_trial",
            )
        with self._lock:
            state = self._trials.get(header)
        if state is not None:
            return state
        run_id, suite, task_id, trial = parse_trial(header)
        self.sim_task(suite, task_id)  # an unknown suite or task is a 400 before any state is kept
        with self._lock:
            return self._trials.setdefault(
                header, TrialState(suite=suite, task_id=task_id, trial=trial, run_id=run_id)
            )

    def sim_task(self, suite: str, task_id: str) -> Any:
        providers = self.knowledge()
        if suite not in providers:
            known = ", ".join(sorted(providers)) or "none installed"
            raise RequestError(
                f"unknown suite {suite!r} in {TRIAL_HEADER}; the simulated model knows: {known}",
                code="unknown_suite",
            )
        try:
            return providers[suite].task(task_id)
        except KeyError:
            raise RequestError(
                f"unknown task {task_id!r} of suite {suite!r} in {TRIAL_HEADER}", code="unknown_task"
            ) from None

    # -- completions ---------------------------------------------------------------------------------

    def complete(self, body: Any, role: str | None, trial_header: str | None) -> dict[str, Any]:
        """The chat-completion response for one request body and its two headers.

        Raises:
            RequestError: a malformed body, an unknown profile, role, suite, task or trial.
        """
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        if body.get("stream"):
            raise RequestError(
                "the simulated model does not stream; call without stream=True", code="stream_not_supported"
            )
        model = body.get("model")
        profile = self.profile_for(model)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty list of messages", code="missing_messages")
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise RequestError("every message must be an object with a 'role'", code="bad_message")
        role = role.strip().lower() if role else None
        if role is None and trial_header:
            role = "agent"
        if role in TRIAL_ROLES:
            state = self.trial_state(trial_header)
            tools = body.get("tools") if isinstance(body.get("tools"), list) else None
            message = self._trial_reply(state, role, profile, messages, tools)
        elif role in ROLE_HANDLERS:
            try:
                text = ROLE_HANDLERS[role](role, body)
            except ValueError as exc:  # the role's answerer rejects the prompt (e.g. no evidence in it)
                raise RequestError(str(exc), code="bad_role_request") from None
            message = {"role": "assistant", "content": text}
        else:
            known = ", ".join(r for r in (*TRIAL_ROLES, *ROLE_HANDLERS) if r)
            raise RequestError(f"unknown {ROLE_HEADER} {role!r}; known roles: {known}", code="unknown_role")
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        return _completion(str(model), message, messages)

    def _trial_reply(
        self,
        state: TrialState,
        role: str,
        profile: Profile,
        messages: list[dict[str, Any]],
        tools: list[Any] | None = None,
    ) -> dict[str, Any]:
        task = self.sim_task(state.suite, state.task_id)
        with state.lock:
            if role == "agent":
                if state.agent is None:
                    nonce, off = self._replays.get(state.run_id) or (self.nonce or state.run_id, frozenset())
                    state.agent = AgentTrial(
                        task, profile, state.trial, nonce=nonce, off=off, user_texts=state.user_texts
                    )
                reply = state.agent.respond(messages, tools)
                note_emitted(state.emitted, state.agent.state.step - 1, reply)
                return reply
            if state.user is None:
                nonce, _ = self._replays.get(state.run_id) or (self.nonce or state.run_id, frozenset())
                state.user = UserTrial(task, profile, state.trial, nonce)
            message = state.user.message(messages, tools)  # with tools: may be the user's own tool call
            if message.get("content"):
                state.user_texts.add(message["content"].strip())
            return message

    def ground_truth(
        self, header: str | None, executed: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """The trial's ground truth; an unseen trial of a known task has no quirks. With `executed` (the
        tool calls the environment ran, `[{"id", "name", "arguments"}]`), entries the harness repaired or
        refused in code are marked (`sim.truth.repairs.attribute`).

        Raises:
            RequestError: no header, or an unknown suite or task.
        """
        state = self.trial_state(header)
        with state.lock:
            if state.agent is not None:
                truth = state.agent.draws.ground_truth()
                if executed is not None:
                    truth = attribute(truth, state.emitted, executed, state.agent.state.task.plan)
                return truth
        return {
            "task_id": state.task_id,
            "trial": state.trial,
            "suite": state.suite,
            "profile": None,
            "nonce": None,
            "agent_requests": 0,
            "reached_final": False,
            "closed": False,
            "quirks": [],
            "cause": None,
            "causes": [],
        }


def _completion(model: str, message: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    prompt_chars = sum(
        len(str(m.get("content") or "")) + len(str(m.get("tool_calls") or "")) for m in messages
    )
    out = message.get("content") or json.dumps(message.get("tool_calls"))
    prompt_tokens, completion_tokens = max(1, prompt_chars // 4), max(1, len(out) // 4)
    return {
        "id": f"chatcmpl-sim-{time.monotonic_ns():x}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
