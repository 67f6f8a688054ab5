"""The harness's agent in a child process, behind a small JSON-lines protocol (docs/evolution.md, threat model).

The trial process (trusted) owns τ²'s orchestrator, environment, user simulator, the scorer client, the
model client and the trial record; harness code runs only in this child. Each side writes one JSON object
per line (trial -> child on the child's stdin, child -> trial on a duplicate of its stdout; the child's
fd 1 is pointed at its stderr, so a harness that prints cannot corrupt the protocol):

    trial -> child  {"op": "start", "harness_dir", "domain", "model", "max_steps_hint", "trial"}
                    {"op": "init_state", "history": [message...]}   {"op": "generate", "message": message|null}
                    {"op": "stop", "message": message|null}         {"op": "seed", "seed": int}
                    {"op": "completion", "ok": true, "response": <chat completion JSON>}  (answer to a call)
                    {"op": "completion", "ok": false, "kind": "timeout"|"connection"|"status", "status", "message"}
    child -> trial  {"op": "call", "kwargs": {...}}   (the agent's chat.completions.create, made by the trial)
                    {"op": "done", "message": message|null, "is_stop": bool, "notes": [...], "usage": {...}}
                    {"op": "error", "type": "<exception class>", "message": "...", "traceback": "..."}

Model calls go through the trial's own openai client (headers, budget, retries, `model_view`), so the
child needs no key and no network. Whether an ending is an infrastructure error is decided by what the
trial side saw on the wire, never by what the harness raised: a harness that raises a timeout the endpoint
never had, hangs (no answer within the trial budget), dies or breaks the protocol is an agent failure.
One child per worker process, reused across trials (a new agent per trial); restarted when it died.
Run as `python -m task_suites.tau2.agent_process`.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from pytest_ecdysis.errors import EndpointFormatError, InfrastructureError, TimeBudgetExceeded

#: Seconds the child may take to start (import τ²) before it is declared dead; paid once per worker,
#: outside any trial's budget (`prepare`).
STARTUP_TIMEOUT_S = 300.0
#: Environment variables the child does not get: keys and the run's addresses (it calls nothing itself).
HIDDEN_ENV_PREFIXES = ("OPENAI_", "ECDYSIS_", "ANTHROPIC_", "AWS_", "AZURE_", "GITHUB_", "GH_")


class HarnessProcessError(RuntimeError):
    """The harness's process died, hung, broke the protocol or raised (an agent failure)."""


# --- trial side ------------------------------------------------------------------------------------


class AgentProcess:
    """The trial side's handle on the child: started lazily, restarted when it died."""

    def __init__(self, harness_dir: Path) -> None:
        self.harness_dir = Path(harness_dir).resolve()
        self.proc: subprocess.Popen | None = None
        self.buffer = b""
        self.dir = Path(tempfile.mkdtemp(prefix="ecdysis-agent-"))
        self.log = self.dir / "stderr.log"

    def ensure(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            from pytest_ecdysis.sandbox import hidden_paths, wrap_command

            package_root = Path(__file__).resolve().parents[2]
            env = {k: v for k, v in os.environ.items() if not k.startswith(HIDDEN_ENV_PREFIXES)}
            # this process's own import path (trusted: harness code never ran here), the suite's root first
            path = [str(package_root), *(p for p in sys.path if os.path.isabs(p) and os.path.isdir(p))]
            env.update(PYTHONPATH=os.pathsep.join(dict.fromkeys(path)), PYTHONDONTWRITEBYTECODE="1",
                       LITELLM_LOCAL_MODEL_COST_MAP="True")
            command = wrap_command([sys.executable, "-m", "task_suites.tau2.agent_process"],
                                   visible=[self.harness_dir, package_root], scratch=self.dir,
                                   hide=[*hidden_paths(), *gold_files()])
            self.buffer = b""
            with self.log.open("ab") as err:
                self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                             cwd=self.dir, env=env, bufsize=0, start_new_session=True)
            ready = self.receive(STARTUP_TIMEOUT_S)  # tau2 imported; no harness code has run yet
            if ready.get("op") != "ready":
                self.close()
                raise HarnessProcessError(f"the harness process did not start ({ready})")
        return self.proc

    def send(self, doc: dict[str, Any]) -> None:
        proc = self.ensure()
        try:
            data = memoryview((json.dumps(doc, default=str) + "\n").encode())
            while data:
                data = data[os.write(proc.stdin.fileno(), data):]
        except (BrokenPipeError, OSError) as exc:
            raise HarnessProcessError(f"the harness process died ({self._tail()}): {exc}") from None

    def receive(self, timeout_s: float) -> dict[str, Any]:
        proc = self.proc or self.ensure()
        deadline = time.monotonic() + max(timeout_s, 0.1)
        fd = proc.stdout.fileno()
        while b"\n" not in self.buffer:  # chunked reads: a line can be hundreds of kB (whole conversations)
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                self.close()
                raise HarnessProcessError(f"the harness did not answer within {timeout_s:.0f} s (it hung); its "
                                          "process was ended")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = proc.wait(timeout=5)
                self.proc, self.buffer = None, b""
                raise HarnessProcessError(f"the harness process died (exit status {code}): {self._tail()}")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            doc = json.loads(line)
            if not isinstance(doc, dict) or "op" not in doc:
                raise ValueError("not a protocol message")
        except ValueError:
            self.close()
            raise HarnessProcessError(f"the harness process broke the protocol (wrote {line[:80]!r})") from None
        return doc

    def _tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return " | ".join(lines[-3:]) or "no output"

    def close(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None


_PROCESSES: dict[Path, AgentProcess] = {}


def agent_process(harness_dir: Path) -> AgentProcess:
    """The worker's child process for `harness_dir` (one per harness and worker process)."""
    key = Path(harness_dir).resolve()
    if key not in _PROCESSES:
        for other in _PROCESSES.values():  # a worker runs one harness at a time: end the others' processes
            other.close()
        _PROCESSES[key] = AgentProcess(key)
        import atexit

        atexit.register(_PROCESSES[key].close)
    return _PROCESSES[key]


def prepare(harness_dir: Path) -> None:
    """Start the worker's child for `harness_dir` now, before the trial's clock and budget start (it
    imports τ², a few seconds, once per worker). No-op with `ECDYSIS_AGENT_PROCESS=0`.

    Raises:
        HarnessProcessError: the child could not start (an infrastructure problem: no harness code ran).
    """
    if os.environ.get("ECDYSIS_AGENT_PROCESS") != "0":
        agent_process(harness_dir).ensure()


def check_harness(harness_dir: Path) -> str | None:
    """Import the harness in its child process (never in this one); None when it imports and defines
    `build_agent`, else the error text. With `ECDYSIS_AGENT_PROCESS=0` it is imported here.

    Raises:
        HarnessProcessError: the child could not start.
    """
    from pytest_ecdysis.errors import UsageError
    from pytest_ecdysis.harness import load_harness

    if os.environ.get("ECDYSIS_AGENT_PROCESS") == "0":
        try:
            load_harness(harness_dir)
        except UsageError as exc:
            return str(exc)
        return None
    process = agent_process(harness_dir)
    process.send({"op": "check", "harness_dir": str(harness_dir)})
    reply = process.receive(STARTUP_TIMEOUT_S)
    return reply.get("message") or "the harness failed to import" if reply.get("op") == "error" else None


def gold_files() -> list[Path]:
    """τ²'s task files (evaluation criteria, splits): covered in the sandbox; the child needs only the
    domains' databases and policies."""
    from tau2.utils.utils import DATA_DIR

    domains = Path(DATA_DIR) / "tau2" / "domains"
    return sorted(p for p in domains.glob("*/*.json") if p.name.startswith(("tasks", "split_tasks")))


def build_agent(*, harness_dir: Path, domain: str, model: str, client: Any, max_steps_hint: int | None,
                trial: str, budget: Any, environment: Any) -> Any:
    """An agent for the orchestrator whose decisions come from the harness in the child process.

    `ECDYSIS_AGENT_PROCESS=0` builds the harness's agent in this process instead (the layout before the
    boundary; `benchmarks/bench_agent_process.py` compares the two). The variable is read in the trusted
    trial process, which harness code never runs in.

    Raises:
        HarnessProcessError: the harness could not build an agent (import error, `build_agent` raised).
    """
    from .tau2lib import load_tau2

    if os.environ.get("ECDYSIS_AGENT_PROCESS") == "0":
        from pytest_ecdysis.harness import load_harness

        return load_harness(harness_dir).build_agent(tools=environment.get_tools(),
                                                     domain_policy=environment.get_policy(), client=client,
                                                     model=model, max_steps_hint=max_steps_hint)

    t = load_tau2()

    class AgentProxy(t.BaseAgent):
        def __init__(self) -> None:
            self.harness_notes: list[dict] = []
            self.usage: dict[str, int] = {}
            self.stops: dict[int, bool] = {}
            self.infra: BaseException | None = None  # what the trial side saw on the wire
            self.format_error: EndpointFormatError | None = None  # an unusable reply the trial side saw
            self.process = agent_process(harness_dir)
            self.request({"op": "start", "harness_dir": str(harness_dir), "domain": domain, "model": model,
                          "max_steps_hint": max_steps_hint, "trial": trial})

        def request(self, doc: dict[str, Any]) -> dict[str, Any]:
            self.process.send(doc)
            while True:
                reply = self.process.receive(budget.remaining() + 5.0)
                if reply["op"] == "call":
                    self.process.send(self.call(reply.get("kwargs") or {}))
                    continue
                self.harness_notes = list(reply.get("notes") or self.harness_notes)
                self.usage = dict(reply.get("usage") or self.usage)
                if reply["op"] == "error":
                    raise self.failure(reply)
                return reply

        def call(self, kwargs: dict[str, Any]) -> dict[str, Any]:
            import openai

            try:
                raw = client.chat.completions.with_raw_response.create(**kwargs)
                return {"op": "completion", "ok": True, "response": json.loads(raw.http_response.text)}
            except openai.APIStatusError as exc:
                self.infra = exc
                return {"op": "completion", "ok": False, "kind": "status", "status": exc.status_code,
                        "message": exc.message}
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
            if self.infra is not None and kind in INFRA_TYPES:
                exc = InfrastructureError(text)
                exc.__cause__ = self.infra
                return exc
            if self.format_error is not None:  # decided by what the trial side saw, not by what was raised
                return self.format_error
            if kind == "EndpointFormatError":
                return EndpointFormatError(text)
            detail = "" if self.infra is not None or kind not in INFRA_TYPES else \
                " (no endpoint failure was seen on the wire: an agent failure)"
            return HarnessProcessError(f"the harness raised {kind}: {text}{detail}\n{reply.get('traceback', '')}")

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

        def is_stop(self, message: Any) -> bool:  # noqa: PLR6301 - the orchestrator calls it on the instance
            if id(message) in self.stops:
                return self.stops[id(message)]
            return bool(getattr(message, "content", None)) and "###STOP###" in message.content

        def set_seed(self, seed: int) -> None:
            self.request({"op": "seed", "seed": seed})

    return AgentProxy()


INFRA_TYPES = {"InfrastructureError", "TimeBudgetExceeded", "APIError", "APITimeoutError", "APIConnectionError",
               "APIStatusError", "RateLimitError", "InternalServerError"}


def _dump(message: Any) -> dict[str, Any] | None:
    return None if message is None else message.model_dump(mode="json")


# --- child side ------------------------------------------------------------------------------------


def _load_message(t: Any, data: dict[str, Any] | None) -> Any:
    if data is None:
        return None
    if "tool_messages" in data:
        return t.MultiToolMessage.model_validate(data)
    kinds = {"assistant": t.AssistantMessage, "user": t.UserMessage, "tool": t.ToolMessage,
             "system": t.SystemMessage}
    return kinds[data["role"]].model_validate(data)


class _Completions:
    def __init__(self, channel: _Channel) -> None:
        self.channel = channel

    def create(self, **kwargs: Any) -> Any:
        import httpx
        import openai
        from openai._models import construct_type
        from openai.types.chat import ChatCompletion

        kwargs = {k: v for k, v in kwargs.items()  # headers are the trial side's; a timeout only as seconds
                  if k != "extra_headers" and (k != "timeout" or isinstance(v, int | float))}
        reply = self.channel.call(json.loads(json.dumps(kwargs, default=_jsonable)))
        if reply.get("ok"):
            return construct_type(type_=ChatCompletion, value=reply["response"])
        request = httpx.Request("POST", "http://trial-side/v1/chat/completions")
        kind, message = reply.get("kind"), reply.get("message", "")
        if kind == "timeout":
            raise openai.APITimeoutError(request=request)
        if kind == "connection":
            raise openai.APIConnectionError(message=message, request=request)
        if kind == "status":
            response = httpx.Response(int(reply.get("status") or 500), request=request)
            raise openai.APIStatusError(message, response=response, body=None)
        if kind == "format":  # the trial ends as endpoint_format_error whatever the harness does with this
            raise RuntimeError(f"endpoint format error: {message}")
        raise TypeError(message)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


class ProxyClient:
    """What the harness gets as `client`: `client.chat.completions.create(**kwargs)` like openai's, made by
    the trial side. `default_headers` names the trial (read-only use)."""

    def __init__(self, channel: _Channel, trial: str) -> None:
        self.chat = type("Chat", (), {})()
        self.chat.completions = _Completions(channel)
        self.default_headers = {"X-Ecdysis-Trial": trial, "X-Ecdysis-Role": "agent"}


class _Channel:
    def __init__(self, inp: Any, out: Any) -> None:
        self.inp, self.out = inp, out

    def write(self, doc: dict[str, Any]) -> None:
        self.out.write(json.dumps(doc, default=_jsonable) + "\n")
        self.out.flush()

    def read(self) -> dict[str, Any] | None:
        line = self.inp.readline()
        return json.loads(line) if line else None

    def call(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        self.write({"op": "call", "kwargs": kwargs})
        reply = self.read()
        if reply is None:
            raise SystemExit(0)
        return reply


def main() -> None:
    """Serve the protocol on stdin / a duplicate of stdout until EOF."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    channel = _Channel(sys.stdin, out)
    from pytest_ecdysis.harness import load_harness

    from . import suite
    from .tau2lib import load_tau2

    t = load_tau2()
    channel.write({"op": "ready"})
    agent: Any = None
    state: Any = None
    environments: dict[str, Any] = {}
    while True:
        request = channel.read()
        if request is None:
            return
        op = request.get("op")
        try:
            message = None
            if op == "start":
                harness = load_harness(Path(request["harness_dir"]))
                if request["domain"] not in environments:  # tools and policy only: one per domain
                    environments[request["domain"]] = suite.get_environment(request["domain"])
                environment = environments[request["domain"]]
                agent = harness.build_agent(tools=environment.get_tools(), domain_policy=environment.get_policy(),
                                            client=ProxyClient(channel, request.get("trial", "")),
                                            model=request["model"], max_steps_hint=request.get("max_steps_hint"))
                state = None
            elif op == "check":
                load_harness(Path(request["harness_dir"]))
            elif op == "init_state":
                state = agent.get_init_state([_load_message(t, m) for m in request.get("history") or []] or None)
            elif op == "generate":
                message, state = agent.generate_next_message(_load_message(t, request.get("message")), state)
            elif op == "stop":
                agent.stop(_load_message(t, request.get("message")), state)
            elif op == "seed":
                agent.set_seed(request.get("seed"))
            done = {"op": "done", "message": _dump(message),
                    "is_stop": bool(message is not None and agent.is_stop(message)),
                    "notes": list(getattr(agent, "harness_notes", []) or []),
                    "usage": dict(getattr(agent, "usage", None) or {})}
            channel.write(done)
        except SystemExit:
            return
        except BaseException as exc:  # noqa: B036 - every failure goes back to the trial side as data
            name = type(exc).__name__
            if isinstance(exc, InfrastructureError | TimeBudgetExceeded):
                name = type(exc).__name__
            channel.write({"op": "error", "type": name, "message": str(exc),
                           "traceback": "".join(traceback.format_exception(exc, limit=-3)),
                           "notes": list(getattr(agent, "harness_notes", []) or []),
                           "usage": dict(getattr(agent, "usage", None) or {})})
            if isinstance(exc, KeyboardInterrupt):
                return


if __name__ == "__main__":
    main()
