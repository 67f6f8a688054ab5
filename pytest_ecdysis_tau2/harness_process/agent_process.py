"""The harness's agent in a child process, behind a small JSON-lines protocol (docs/evolution.md, threat model).

The trial process (trusted) owns τ²'s orchestrator, environment, user simulator, the scorer client, the
model client and the trial record; harness code runs only in the harness's processes: one fork server
per worker and harness (`agent_child.py`, started lazily, restarted when it died) and, forked from it,
one process per trial, reached over its own Unix-socket connection. Each side writes one JSON object per
line:

    trial -> child  {"op": "start", "harness_dir", "domain", "model", "max_steps_hint", "trial"}
                    {"op": "init_state", "history": [message...]}   {"op": "generate", "message": message|null}
                    {"op": "stop", "message": message|null}         {"op": "seed", "seed": int}
                    {"op": "completion", "ok": true, "response": <chat completion JSON>}  (answer to a call)
                    {"op": "completion", "ok": false, "kind": "timeout"|"connection"|"status", "status", "message"}
    child -> trial  {"op": "hello", "pid": int}   (first, once)
                    {"op": "call", "kwargs": {...}}   (the agent's chat.completions.create, made by the trial)
                    {"op": "done", "message": message|null, "is_stop": bool, "notes": [...], "usage": {...}}
                    {"op": "error", "type": "<exception class>", "message": "...", "traceback": "..."}

Model calls go through the trial's own openai client (headers, budget, retries, `model_view`), so the
child needs no key and no network. The trial side owns each call's model, headers and routing
(`request_guard.guard_call`: a different model is overwritten and noted, `extra_headers`/`extra_query`
dropped); the harness's notes are redacted of known secrets on arrival (`core.secrets`). The trial
header the child is told is for reading only (a harness that reads it is flagged by the static check: it
names the task). Whether an ending is an infrastructure error is decided by what the trial side saw on
the wire, never by what the harness raised: a harness that raises a timeout the endpoint never had, hangs
(no answer within the trial budget: its process is killed), dies or breaks the protocol is an agent failure. A process per trial means trials in flight at once (`--ecdysis-concurrency`) cannot
reach each other's agent, and each starts from the same state as a trial run alone.

The wire (the fork server, a trial's connection, the JSON lines) is `agent_wire`; this module is the
agent the orchestrator talks to (`build_agent`) and the worker's entry points (`prepare`, `check_harness`).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.errors import (
    EndpointFormatError,
    InfrastructureError,
    TimeBudgetExceeded,
    UnusableReplyError,
)
from pytest_ecdysis.core.secrets import redact_json

from .agent_child import dump as _dump
from .agent_wire import HarnessProcessError, agent_process
from .request_guard import guard_call


def prepare(harness_dir: Path) -> None:
    """Start the worker's child for `harness_dir` now, before the trial's clock and budget start (it
    imports τ², a few seconds, once per worker). No-op with `ECDYSIS_AGENT_PROCESS=0`.

    Raises:
        HarnessProcessError: the child could not start (an infrastructure problem: no harness code ran).
    """
    if os.environ.get("ECDYSIS_AGENT_PROCESS") != "0":
        agent_process(harness_dir).ensure()


def start_early(harness_dir: Path) -> None:
    """Spawn the worker's child for `harness_dir` without waiting for it, so that its τ² import overlaps
    this process's own (collection: `cases.generate_trials`); `check_harness` and `prepare` wait for it.
    No-op with `ECDYSIS_AGENT_PROCESS=0`."""
    if os.environ.get("ECDYSIS_AGENT_PROCESS") != "0":
        agent_process(harness_dir).spawn()


def warm_up_soon(harness_dir: Path, domain: str) -> threading.Thread | None:
    """In a daemon thread, have the worker's harness server load `domain`'s tools (`AgentProcess.warm_up`)
    while this process goes on (collection ends, xdist hands out the cases), so that the first trials'
    connections do not wait for it. A failure is left for the first trial's `connect`, which repeats the
    step and reports it; nothing is lost. Returns the thread (None with `ECDYSIS_AGENT_PROCESS=0`)."""
    if os.environ.get("ECDYSIS_AGENT_PROCESS") == "0":
        return None

    def run() -> None:
        try:
            agent_process(harness_dir).warm_up(domain)
        except Exception:  # noqa: BLE001, S110 - the first trial's connect repeats it and says what failed
            pass

    thread = threading.Thread(target=run, name="ecdysis-harness-warm-up", daemon=True)
    thread.start()
    return thread


def check_harness(harness_dir: Path) -> str | None:
    """Import the harness in its child process (never in this one); None when it imports and defines
    `build_agent`, else the error text. With `ECDYSIS_AGENT_PROCESS=0` it is imported here.

    Raises:
        HarnessProcessError: the child could not start.
    """
    from pytest_ecdysis.core.errors import UsageError
    from pytest_ecdysis.core.harness import load_harness

    if os.environ.get("ECDYSIS_AGENT_PROCESS") == "0":
        try:
            load_harness(harness_dir)
        except UsageError as exc:
            return str(exc)
        return None
    server = agent_process(harness_dir)
    server.ensure()  # started (sandboxed or not) before the path it is told is chosen
    reply = server.request({"op": "check", "harness_dir": str(server.child_harness_dir)})
    return reply.get("message") or "the harness failed to import" if reply.get("op") == "error" else None


def build_agent(
    *,
    harness_dir: Path,
    domain: str,
    model: str,
    client: Any,
    max_steps_hint: int | None,
    trial: str,
    budget: Any,
    environment: Any,
) -> Any:
    """An agent for the orchestrator whose decisions come from the harness in the child process.

    `ECDYSIS_AGENT_PROCESS=0` builds the harness's agent in this process instead (the layout before the
    boundary; `benchmarks/bench_agent_process.py` compares the two). The variable is read in the trusted
    trial process, which harness code never runs in.

    Raises:
        HarnessProcessError: the harness could not build an agent (import error, `build_agent` raised).
    """
    from ..tasks.tau2lib import load_tau2

    if os.environ.get("ECDYSIS_AGENT_PROCESS") == "0":
        from pytest_ecdysis.core.harness import load_harness

        return load_harness(harness_dir).build_agent(
            tools=environment.get_tools(),
            domain_policy=environment.get_policy(),
            client=client,
            model=model,
            max_steps_hint=max_steps_hint,
        )

    t = load_tau2()
    base: Any = t.BaseAgent  # τ² ships no type information: its base class is Any to mypy

    class AgentProxy(base):
        def __init__(self) -> None:
            self.child_notes: list[dict] = []  # the harness's own notes (its whole list, each reply)
            self.trusted_notes: list[dict] = []  # what the trial side changed in its calls (request_guard)
            self.usage: dict[str, int] = {}
            self.stops: dict[int, bool] = {}
            self.infra: BaseException | None = None  # what the trial side saw on the wire
            self.format_error: EndpointFormatError | None = None  # an unusable reply the trial side saw
            self.unusable: UnusableReplyError | None = None  # the last call's reply was not a chat completion
            server = agent_process(harness_dir)
            self.link = server.connect(domain)
            self.request(
                {
                    "op": "start",
                    "harness_dir": str(server.child_harness_dir),
                    "domain": domain,
                    "model": model,
                    "max_steps_hint": max_steps_hint,
                    "trial": trial,
                }
            )

        def request(self, doc: dict[str, Any]) -> dict[str, Any]:
            self.link.send(doc)
            while True:
                reply = self.link.receive(budget.remaining() + 5.0)
                if reply["op"] == "call":
                    self.link.send(self.call(reply.get("kwargs") or {}))
                    continue
                notes = reply.get("notes")
                if isinstance(notes, list) and notes:
                    self.child_notes = [n for n in redact_json(notes) if isinstance(n, dict)]
                self.usage = dict(reply.get("usage") or self.usage)
                if reply["op"] == "error":
                    raise self.failure(reply)
                return reply

        @property
        def harness_notes(self) -> list[dict]:
            """The harness's notes (known secrets redacted), then the trial side's `request_guard` notes."""
            return self.child_notes + self.trusted_notes

        def call(self, kwargs: dict[str, Any]) -> dict[str, Any]:
            import openai

            kwargs, changed = guard_call(kwargs, model)  # the trial side owns model, headers, routing
            for note in changed:
                if not any(n["detail"] == note["detail"] for n in self.trusted_notes):
                    self.trusted_notes.append(note)
            try:
                raw = client.chat.completions.with_raw_response.create(**kwargs)
                self.unusable = None  # the harness asked again and got a usable reply
                return {"op": "completion", "ok": True, "response": json.loads(raw.http_response.text)}
            except UnusableReplyError as exc:  # HTTP 200 that is not a chat completion (deadline.py)
                self.unusable = self.infra = exc
                return {"op": "completion", "ok": False, "kind": "connection", "message": str(exc)}
            except openai.APIStatusError as exc:
                self.infra = exc
                return {
                    "op": "completion",
                    "ok": False,
                    "kind": "status",
                    "status": exc.status_code,
                    "message": exc.message,
                }
            except openai.APITimeoutError as exc:
                self.infra = exc
                return {"op": "completion", "ok": False, "kind": "timeout", "message": str(exc)}
            except openai.APIConnectionError as exc:
                self.infra = exc
                return {"op": "completion", "ok": False, "kind": "connection", "message": str(exc)}
            except EndpointFormatError as exc:  # tool calls written as text, a server parse failure
                self.format_error = exc
                return {"op": "completion", "ok": False, "kind": "format", "message": str(exc)}
            except (TypeError, ValueError) as exc:  # bad arguments from the harness: its own error
                return {"op": "completion", "ok": False, "kind": "arguments", "message": str(exc)}

        def failure(self, reply: dict[str, Any]) -> BaseException:
            kind, text = reply.get("type", ""), reply.get("message", "")
            if budget.exhausted:
                return TimeBudgetExceeded(text)
            if self.unusable is not None:  # whatever the harness made of it: the endpoint's failure
                return self.unusable
            if self.infra is not None and kind in INFRA_TYPES:
                exc = InfrastructureError(text)
                exc.__cause__ = self.infra
                return exc
            if self.format_error is not None:  # decided by what the trial side saw, not by what was raised
                return self.format_error
            if kind == "EndpointFormatError":
                return EndpointFormatError(text)
            limit = self.link.server.limit_reached(raised=kind)
            if limit:
                return HarnessProcessError(f"{limit}: the harness raised {kind}: {text}")
            detail = (
                ""
                if self.infra is not None or kind not in INFRA_TYPES
                else " (no endpoint failure was seen on the wire: an agent failure)"
            )
            return HarnessProcessError(
                f"the harness raised {kind}: {text}{detail}\n{reply.get('traceback', '')}"
            )

        def get_init_state(self, message_history: list | None = None) -> Any:
            self.request({"op": "init_state", "history": [_dump(m) for m in message_history or []]})
            return None

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            reply = self.request({"op": "generate", "message": _dump(message)})
            out = t.AssistantMessage.model_validate(reply["message"])
            self.stops[id(out)] = bool(reply.get("is_stop"))
            return out, state

        def stop(self, message: Any = None, state: Any = None) -> None:
            try:
                self.request({"op": "stop", "message": _dump(message)})
            except HarnessProcessError:
                pass
            finally:
                self.close()

        def close(self) -> None:
            """End the trial's harness process (also called by the runner when τ² did not call `stop`)."""
            self.link.close()

        def is_stop(self, message: Any) -> bool:  # noqa: PLR6301 - the orchestrator calls it on the instance
            if id(message) in self.stops:
                return self.stops[id(message)]
            return bool(getattr(message, "content", None)) and "###STOP###" in message.content

        def set_seed(self, seed: int) -> None:
            self.request({"op": "seed", "seed": seed})

    return AgentProxy()


INFRA_TYPES = {
    "InfrastructureError",
    "TimeBudgetExceeded",
    "APIError",
    "APITimeoutError",
    "APIConnectionError",
    "APIStatusError",
    "RateLimitError",
    "InternalServerError",
}
