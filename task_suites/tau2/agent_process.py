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
child needs no key and no network. Whether an ending is an infrastructure error is decided by what the
trial side saw on the wire, never by what the harness raised: a harness that raises a timeout the endpoint
never had, hangs (no answer within the trial budget: its process is killed), dies or breaks the protocol
is an agent failure. A process per trial means trials in flight at once (`--ecdysis-concurrency`) cannot
reach each other's agent, and each starts from the same state as a trial run alone.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pytest_ecdysis.errors import EndpointFormatError, InfrastructureError, TimeBudgetExceeded

from .agent_child import dump as _dump

#: Seconds the child may take to start (import τ²) before it is declared dead; paid once per worker,
#: outside any trial's budget (`prepare`).
STARTUP_TIMEOUT_S = 300.0
#: Environment variables the child does not get: keys and the run's addresses (it calls nothing itself).
HIDDEN_ENV_PREFIXES = ("OPENAI_", "ECDYSIS_", "ANTHROPIC_", "AWS_", "AZURE_", "GITHUB_", "GH_")


class HarnessProcessError(RuntimeError):
    """The harness's process died, hung, broke the protocol or raised (an agent failure)."""


class _Wire:
    """JSON lines over a pair of raw fds (a pipe pair or one socket), read in chunks: a line can be
    hundreds of kB (whole conversations)."""

    def __init__(self) -> None:
        self.buffer = b""

    def fds(self) -> tuple[int, int]:  # (read, write)
        raise NotImplementedError

    def lost(self, why: str) -> HarnessProcessError:  # the peer hung, died or broke the protocol
        raise NotImplementedError

    def send(self, doc: dict[str, Any]) -> None:
        try:
            data = memoryview((json.dumps(doc, default=str) + "\n").encode())
            fd = self.fds()[1]
            while data:
                data = data[os.write(fd, data):]
        except (BrokenPipeError, OSError) as exc:
            raise self.lost(f"died: {exc}") from None

    def receive(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + max(timeout_s, 0.1)
        fd = self.fds()[0]
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise self.lost(f"hung: no answer within {timeout_s:.0f} s")
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                raise self.lost("died")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            doc = json.loads(line)
            if not isinstance(doc, dict) or "op" not in doc:
                raise ValueError("not a protocol message")
        except ValueError:
            raise self.lost(f"broke the protocol (wrote {line[:80]!r})") from None
        return doc


class AgentProcess(_Wire):
    """The trial side's handle on the harness's fork server (`agent_child.py`): started lazily, restarted
    when it died; `connect()` gives a trial its own process. Thread-safe (C trials of a worker share it)."""

    def __init__(self, harness_dir: Path) -> None:
        super().__init__()
        self.harness_dir = Path(harness_dir).resolve()
        self.proc: subprocess.Popen | None = None
        self.dir = Path(tempfile.mkdtemp(prefix="ecdysis-agent-"))
        self.log = self.dir / "stderr.log"
        self.socket = ""
        self.warm: set[str] = set()  # domains and harness dirs the running server has loaded
        self.lock = threading.RLock()
        self.quiet = False  # a `status` request that times out leaves the server running

    def fds(self) -> tuple[int, int]:
        proc = self.proc or self.ensure()
        return proc.stdout.fileno(), proc.stdin.fileno()

    def lost(self, why: str) -> HarnessProcessError:
        if self.quiet:
            return HarnessProcessError(why)
        code = self.proc.poll() if self.proc is not None else None
        self.close()
        if why == "died":
            return HarnessProcessError(f"the harness process died (exit status {code}): {self._tail()}")
        if why.startswith("hung"):
            return HarnessProcessError(f"the harness process {why} (it hung); its process was ended")
        return HarnessProcessError(f"the harness process {why}")

    def ensure(self) -> subprocess.Popen:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            return self.proc

    def _start(self) -> None:
        from pytest_ecdysis.sandbox import hidden_paths, wrap_command

        package_root = Path(__file__).resolve().parents[2]
        env = {k: v for k, v in os.environ.items() if not k.startswith(HIDDEN_ENV_PREFIXES)}
        # this process's own import path (trusted: harness code never ran here), the suite's root first
        path = [str(package_root), *(p for p in sys.path if os.path.isabs(p) and os.path.isdir(p))]
        env.update(PYTHONPATH=os.pathsep.join(dict.fromkeys(path)), PYTHONDONTWRITEBYTECODE="1",
                   LITELLM_LOCAL_MODEL_COST_MAP="True")
        command = wrap_command([sys.executable, "-m", "task_suites.tau2.agent_child"],
                               visible=[self.harness_dir, package_root], scratch=self.dir,
                               hide=[*hidden_paths(), *gold_files()])
        self.buffer, self.warm = b"", set()
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         cwd=self.dir, env=env, bufsize=0, start_new_session=True)
        ready = self.receive(STARTUP_TIMEOUT_S)  # tau2 imported; no harness code has run yet
        if ready.get("op") != "ready":
            self.close()
            raise HarnessProcessError(f"the harness process did not start ({ready})")
        self.socket = ready["socket"]

    def request(self, doc: dict[str, Any], timeout_s: float = STARTUP_TIMEOUT_S) -> dict[str, Any]:
        """Send a server request (`check`, `domain`, `status`) and wait for its answer."""
        with self.lock:
            self.ensure()
            self.send(doc)
            while True:
                reply = self.receive(timeout_s)
                if doc["op"] != "status" and reply["op"] != "status":
                    return reply
                if doc["op"] == "status" and reply.get("pid") == doc["pid"]:
                    return reply  # (a late answer to an earlier `status` is skipped)

    def connect(self, domain: str) -> TrialLink:
        """A process of its own for one trial, forked by the server once it has imported the harness
        (an import error is reported by the trial's own `start`) and loaded `domain`'s tools."""
        with self.lock:
            self.ensure()
            for op, key, value in (("check", "harness_dir", str(self.harness_dir)), ("domain", "domain", domain)):
                if value not in self.warm:
                    self.request({"op": op, key: value})
                    self.warm.add(value)
            where = self.socket
        return TrialLink(self, where)

    def kill(self, pid: int) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    self.send({"op": "kill", "pid": pid})
                except HarnessProcessError:
                    pass

    def exit_status(self, pid: int) -> int | None:
        with self.lock:
            self.quiet = True
            try:
                return self.request({"op": "status", "pid": pid}, timeout_s=10).get("code")
            except HarnessProcessError:
                return None
            finally:
                self.quiet = False

    def _tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return " | ".join(lines[-3:]) or "no output"

    def close(self) -> None:
        with self.lock:
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


class TrialLink(_Wire):
    """One trial's connection to its own harness process; a hang kills that process only."""

    def __init__(self, server: AgentProcess, path: str) -> None:
        super().__init__()
        self.server, self.pid = server, None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except OSError as exc:
            self.sock.close()
            raise HarnessProcessError(f"the harness process does not accept trials ({exc}): "
                                      f"{server._tail()}") from None
        hello = self.receive(STARTUP_TIMEOUT_S)
        self.pid = hello.get("pid")

    def fds(self) -> tuple[int, int]:
        return self.sock.fileno(), self.sock.fileno()

    def lost(self, why: str) -> HarnessProcessError:
        self.close(kill=why.startswith(("hung", "broke")))
        if why == "died" and self.pid is not None:
            code = self.server.exit_status(self.pid)
            return HarnessProcessError(f"the harness process died (exit status {code}): {self.server._tail()}")
        if why.startswith("hung"):
            return HarnessProcessError(f"the harness did not answer within the trial budget ({why}); its "
                                       "process was ended")
        return HarnessProcessError(f"the harness process {why}")

    def close(self, kill: bool = False) -> None:
        """Close the connection (the process ends at EOF); `kill`: end it now (it hung or broke the protocol)."""
        if kill and self.pid is not None and self.sock.fileno() >= 0:
            self.server.kill(self.pid)
        self.sock.close()


_PROCESSES: dict[Path, AgentProcess] = {}


_PROCESSES_LOCK = threading.Lock()


def agent_process(harness_dir: Path) -> AgentProcess:
    """The worker's fork server for `harness_dir` (one per harness and worker process)."""
    key = Path(harness_dir).resolve()
    with _PROCESSES_LOCK:
        return _PROCESSES.get(key) or _new_process(key)


def _new_process(key: Path) -> AgentProcess:
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
    reply = agent_process(harness_dir).request({"op": "check", "harness_dir": str(harness_dir)})
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
            self.link = agent_process(harness_dir).connect(domain)
            self.request({"op": "start", "harness_dir": str(harness_dir), "domain": domain, "model": model,
                          "max_steps_hint": max_steps_hint, "trial": trial})

        def request(self, doc: dict[str, Any]) -> dict[str, Any]:
            self.link.send(doc)
            while True:
                reply = self.link.receive(budget.remaining() + 5.0)
                if reply["op"] == "call":
                    self.link.send(self.call(reply.get("kwargs") or {}))
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


INFRA_TYPES = {"InfrastructureError", "TimeBudgetExceeded", "APIError", "APITimeoutError", "APIConnectionError",
               "APIStatusError", "RateLimitError", "InternalServerError"}
