"""The harness's side of the process boundary: a fork server that runs one agent per trial process.

Started once per worker and harness by `agent_wire.AgentProcess` as
`python -m pytest_ecdysis_tau2.harness_process.agent_child --memory-mb N --cpu-s N` (under bubblewrap unless
`--ecdysis-sandbox off` or none can start); the limits are applied (`validate.limits.apply`) after its own
imports and before any harness code. It imports τ² and the suite (never harness code by itself),
listens on a Unix socket `agent.sock` in its scratch directory and answers on stdin/stdout (one JSON object
per line; the process's fd 1 is pointed at its stderr, so a harness that prints cannot corrupt the protocol):

    server -> trial  {"op": "ready", "socket": path}                      (once, at start)
    trial -> server  {"op": "check", "harness_dir"}   -> {"op": "done"} | {"op": "error", "message", ...}
                     {"op": "domain", "domain"}       -> {"op": "done"} | {"op": "error", ...}
                     {"op": "status", "pid"}          -> {"op": "status", "code": exit status | null, "cpu_s"}
                     {"op": "kill", "pid"}            (no answer)

`check` imports the harness here, so every trial process starts from the imported harness; `domain` builds
the domain's tools and policy once. Each connection to the socket is one trial: the server forks, and the
forked process (which closes the server's stdin, stdout and socket before any harness code runs) says
`{"op": "hello", "pid"}` and then serves the trial protocol of `agent_process` on that connection until EOF,
and exits. A trial's agent therefore starts from the same state whatever ran before or beside it (one
trial or C at once, `--ecdysis-concurrency`), and a harness that hangs or dies takes only its own trial
with it. Forked processes share the server's pages copy-on-write (`gc.freeze()` before each fork keeps the
collector from touching them); the extra memory per trial in flight is measured in docs/benchmarks.md.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

SOCKET_NAME = "agent.sock"


def dump(message: Any) -> dict[str, Any] | None:
    """A τ² message as JSON-safe data (None stays None)."""
    return None if message is None else message.model_dump(mode="json")


def _load_message(t: Any, data: dict[str, Any] | None) -> Any:
    if data is None:
        return None
    if "tool_messages" in data:
        return t.MultiToolMessage.model_validate(data)
    kinds = {
        "assistant": t.AssistantMessage,
        "user": t.UserMessage,
        "tool": t.ToolMessage,
        "system": t.SystemMessage,
    }
    return kinds[data["role"]].model_validate(data)


class _Completions:
    def __init__(self, channel: _Channel) -> None:
        self.channel = channel

    def create(self, **kwargs: Any) -> Any:
        import httpx2
        import openai
        from openai._models import construct_type
        from openai.types.chat import ChatCompletion

        kwargs = {
            k: v
            for k, v in kwargs.items()  # headers are the trial side's; a timeout only as seconds
            if k != "extra_headers" and (k != "timeout" or isinstance(v, int | float))
        }
        reply = self.channel.call(json.loads(json.dumps(kwargs, default=_jsonable)))
        if reply.get("ok"):
            return construct_type(type_=ChatCompletion, value=reply["response"])
        # openai's errors carry the request and response types of its own HTTP library (httpx2)
        request = httpx2.Request("POST", "http://trial-side/v1/chat/completions")
        kind, message = reply.get("kind"), reply.get("message", "")
        if kind == "timeout":
            raise openai.APITimeoutError(request=request)
        if kind == "connection":
            raise openai.APIConnectionError(message=message, request=request)
        if kind == "status":
            response = httpx2.Response(int(reply.get("status") or 500), request=request)
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


def serve_trial(channel: _Channel, t: Any, environments: dict[str, Any]) -> None:
    """One trial's protocol (`agent_process` module docstring) until EOF; `environments`: domain -> τ²
    environment (tools and policy only)."""
    from pytest_ecdysis.core.harness import load_harness

    from ..tasks import suite

    agent: Any = None
    state: Any = None
    while True:
        request = channel.read()
        if request is None:
            return
        op = request.get("op")
        try:
            message = None
            if op == "start":
                harness = load_harness(Path(request["harness_dir"]))
                if request["domain"] not in environments:
                    environments[request["domain"]] = suite.get_environment(request["domain"])
                environment = environments[request["domain"]]
                agent = harness.build_agent(
                    tools=environment.get_tools(),
                    domain_policy=environment.get_policy(),
                    client=ProxyClient(channel, request.get("trial", "")),
                    model=request["model"],
                    max_steps_hint=request.get("max_steps_hint"),
                )
                state = None
            elif op == "init_state":
                state = agent.get_init_state(
                    [_load_message(t, m) for m in request.get("history") or []] or None
                )
            elif op == "generate":
                message, state = agent.generate_next_message(_load_message(t, request.get("message")), state)
            elif op == "stop":
                agent.stop(_load_message(t, request.get("message")), state)
            elif op == "seed":
                agent.set_seed(request.get("seed"))
            channel.write(
                {
                    "op": "done",
                    "message": dump(message),
                    "is_stop": bool(message is not None and agent.is_stop(message)),
                    "notes": list(getattr(agent, "harness_notes", []) or []),
                    "usage": dict(getattr(agent, "usage", None) or {}),
                }
            )
        except SystemExit:
            return
        except BaseException as exc:  # noqa: B036 - every failure goes back to the trial side as data
            channel.write(_error(exc, agent))
            if isinstance(exc, KeyboardInterrupt):
                return


def _error(exc: BaseException, agent: Any = None) -> dict[str, Any]:
    return {
        "op": "error",
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc, limit=-3)),
        "notes": list(getattr(agent, "harness_notes", []) or []),
        "usage": dict(getattr(agent, "usage", None) or {}),
    }


class _Lines:
    """Lines from a raw fd (select-friendly: nothing hides in a Python buffer)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, b""

    def take(self) -> list[dict[str, Any]] | None:
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def _fork_trial(
    conn: socket.socket, listener: socket.socket, out: Any, t: Any, environments: dict, limits: Any
) -> int:
    pid = os.fork()
    if pid:
        conn.close()
        return pid
    code = 0
    try:  # the trial's process: nothing of the server's channels stays open for harness code
        from pytest_ecdysis.validate.limits import apply

        apply(limits, server=False)  # its own CPU time (the counter restarted at the fork)
        listener.close()
        out.close()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        channel = _Channel(conn.makefile("r", encoding="utf-8"), conn.makefile("w", encoding="utf-8"))
        channel.write({"op": "hello", "pid": os.getpid()})
        serve_trial(channel, t, environments)
    except BaseException:  # noqa: B036 - the trial side sees EOF and asks for the exit status
        traceback.print_exc()
        code = 70
    finally:
        sys.stderr.flush()
        os._exit(code)


def _limits(argv: list[str]) -> Any:
    """The per-process limits the trial side passed (`--memory-mb N --cpu-s N`; defaults when absent)."""
    import argparse

    from pytest_ecdysis.validate.limits import DEFAULT_CPU_S, DEFAULT_MEMORY_MB, Limits

    parser = argparse.ArgumentParser(prog="agent_child")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB)
    parser.add_argument("--cpu-s", type=int, default=DEFAULT_CPU_S)
    args = parser.parse_args(argv)
    return Limits(args.memory_mb, args.cpu_s)


def main(argv: list[str] | None = None) -> None:
    """Serve the server protocol on stdin / a duplicate of stdout until EOF."""
    limits = _limits(sys.argv[1:] if argv is None else argv)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from pytest_ecdysis.core.harness import load_harness

    from ..tasks import suite
    from ..tasks.tau2lib import load_tau2

    t = load_tau2()
    # what every trial process's proxy client needs (`_Completions.create`), imported once here: imported
    # after the fork it cost each trial process about 0.7 CPU s and 20-40 MB of private memory (litellm
    # used to import it here, before τ² was imported without it; docs/benchmarks.md)
    import httpx2  # noqa: F401
    import openai  # noqa: F401
    from openai._models import construct_type  # noqa: F401
    from openai.types.chat import ChatCompletion  # noqa: F401

    from pytest_ecdysis.validate.limits import apply, protect_this_process

    apply(limits, server=True)  # the trusted imports are done; harness code runs from `check` on
    # non-dumpable (PR_SET_DUMPABLE 0, inherited by every trial process it forks): a trial's harness code
    # cannot ptrace the server nor read its /proc/<pid>/mem, so it cannot reach the other trials it serves
    protect_this_process()
    path = Path.cwd() / SOCKET_NAME
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(256)
    environments: dict[str, Any] = {}
    codes: dict[int, tuple[int, float]] = {}  # (exit status, CPU s) of ended trial processes, until asked for
    waiting: list[int] = []  # `status` asked before the process was reaped
    stdin = _Lines(0)

    def write(doc: dict[str, Any]) -> None:
        out.write(json.dumps(doc, default=_jsonable) + "\n")
        out.flush()

    write({"op": "ready", "socket": str(path)})
    watched: list[int | socket.socket] = [0, listener]  # standard input and new connections
    while True:
        ready, _, _ = select.select(watched, [], [], 0.2)
        while True:  # reap ended trial processes
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            codes[pid] = (os.waitstatus_to_exitcode(status), round(usage.ru_utime + usage.ru_stime, 2))
        for pid in [p for p in waiting if p in codes]:
            waiting.remove(pid)
            code, cpu_s = codes.pop(pid)
            write({"op": "status", "pid": pid, "code": code, "cpu_s": cpu_s})
        if listener in ready:
            conn, _ = listener.accept()
            gc.freeze()  # the collector must not write to every shared page of the forked process
            _fork_trial(conn, listener, out, t, environments, limits)
        if 0 not in ready:
            continue
        requests = stdin.take()
        if requests is None:
            return
        for request in requests:
            op = request.get("op")
            try:
                if op == "check":
                    load_harness(Path(request["harness_dir"]))
                elif op == "domain" and request["domain"] not in environments:
                    environments[request["domain"]] = suite.get_environment(request["domain"])
                elif op == "kill":
                    try:
                        os.kill(int(request["pid"]), signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                    continue
                elif op == "status":
                    waiting.append(int(request["pid"]))
                    continue
                write({"op": "done"})
            except BaseException as exc:  # noqa: B036 - the trial side decides what a failure means
                write(_error(exc))


if __name__ == "__main__":
    main()
