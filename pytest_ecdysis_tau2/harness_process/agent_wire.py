"""The trial side's wire to the harness's processes: the worker's fork server and one connection per trial.

`agent_process(harness_dir)` is the worker's `AgentProcess` for a harness (one per harness and worker,
started lazily, restarted when it died, ended at exit); `AgentProcess.connect(domain)` forks a process for
one trial and returns its `TrialLink`. Both speak JSON lines (`_Wire`; the protocol is in
`agent_process`'s docstring); a peer that dies, hangs past the timeout or breaks the protocol is a
`HarnessProcessError` (an agent failure); a sandbox that does not start is a `SandboxStartError` (an
infrastructure error). The child gets only the variables `CHILD_ENV` names (no key, no `ECDYSIS_*`, no
URL), the per-process limits as arguments (`validate.limits`) and, sandboxed, does not see τ²'s task
files (`gold_files`).
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

from .agent_env import CHILD_ENV, HIDDEN_ENV_PREFIXES, child_env, gold_files

__all__ = [
    "CHILD_ENV",
    "HIDDEN_ENV_PREFIXES",
    "STARTUP_TIMEOUT_S",
    "AgentProcess",
    "HarnessProcessError",
    "TrialLink",
    "agent_process",
    "child_env",
    "gold_files",
]

#: Seconds the child may take to start (import τ²) before it is declared dead; paid once per worker,
#: outside any trial's budget (`prepare`).
STARTUP_TIMEOUT_S = 300.0


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
                data = data[os.write(fd, data) :]
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
        self.sandboxed = False  # the running server was started under bubblewrap
        self.limits: Any = None  # its `limits.Limits`, set at start

    @property
    def child_harness_dir(self) -> Path:
        """The harness directory as the child sees it (`validate.sandbox.inside`: a validation sub-run's copy
        at the checkout's own path when the running server is sandboxed)."""
        from pytest_ecdysis.validate.sandbox import inside

        return inside(self.harness_dir) if self.sandboxed else self.harness_dir

    def fds(self) -> tuple[int, int]:
        proc = self.proc or self.ensure()
        assert proc.stdout is not None and proc.stdin is not None, "the server is started with pipes"
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
        """The running server, started (or restarted) and waited for as needed."""
        with self.lock:
            self._restart_if_decision_changed()
            if self.proc is None or self.proc.poll() is not None:
                self._spawn()
            if not self.socket:
                self._await_ready()
            assert self.proc is not None, "_spawn starts the server or raises"
            return self.proc

    def spawn(self) -> None:
        """Start the server's process without waiting for it (it imports τ² while the caller goes on);
        `ensure` waits for it."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._spawn()

    def _restart_if_decision_changed(self) -> None:
        """A server started under the other sandbox decision (`ECDYSIS_SANDBOX` changed: tests) is ended."""
        from pytest_ecdysis.validate.sandbox import enabled

        if self.proc is not None and self.proc.poll() is None and self.sandboxed != enabled():
            self.close()

    def _spawn(self) -> None:
        from pytest_ecdysis.validate.limits import from_env as limits_from_env
        from pytest_ecdysis.validate.limits import protect_this_process
        from pytest_ecdysis.validate.sandbox import enabled, hidden_paths, inside, wrap_command

        protect_this_process()  # this process's environment (keys) unreadable by the child's user
        from .. import SUITE_ROOT as package_root

        env = child_env(os.environ)
        # this process's own import path (trusted: harness code never ran here), the suite's root first;
        # not the interpreter's bin directory (`pytest` puts it first, `python -m pytest` does not)
        bin_dir = os.path.dirname(os.path.abspath(sys.executable))
        path = [
            str(package_root),
            *(p for p in sys.path if os.path.isabs(p) and os.path.isdir(p) and p != bin_dir),
        ]
        seen = inside if enabled() else Path  # in a validation sub-run: the checkout's own paths
        env.update(
            PYTHONPATH=os.pathsep.join(dict.fromkeys(str(seen(Path(p))) for p in path)),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONNOUSERSITE="1",  # as in validation sub-runs, so a plain run's child starts the same
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        self.limits = limits_from_env()
        command = wrap_command(
            [
                sys.executable,
                "-m",
                "pytest_ecdysis_tau2.harness_process.agent_child",
                "--memory-mb",
                str(self.limits.memory_mb),
                "--cpu-s",
                str(self.limits.cpu_s),
            ],
            visible=[self.harness_dir, package_root, *map(Path, dict.fromkeys(path))],
            scratch=self.dir,
            hide=[*hidden_paths(), *gold_files()],
        )
        self.sandboxed = command[0] != sys.executable
        self.buffer, self.warm, self.socket = b"", set(), ""
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=self.dir,
                env=env,
                bufsize=0,
                start_new_session=True,
            )

    def _await_ready(self) -> None:
        try:
            ready = self.receive(STARTUP_TIMEOUT_S)  # tau2 imported; no harness code has run yet
        except HarnessProcessError as exc:
            if self.sandboxed and "bwrap:" in str(exc):  # bubblewrap's own message: no harness code ran
                from pytest_ecdysis.validate.sandbox import START_FAILURE_MARK, SandboxStartError

                said = str(exc)[str(exc).index("bwrap:") :]
                raise SandboxStartError(
                    f"{START_FAILURE_MARK}: {said} (an infrastructure error, not the "
                    "harness's; see docs/evolution.md, threat model)"
                ) from None
            raise
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
            self.warm_up(domain)
            where = self.socket
        return TrialLink(self, where)

    def warm_up(self, domain: str) -> None:
        """Have the server import the harness and load `domain`'s tools now (what `connect` needs first;
        each step once per server). Raises `HarnessProcessError` as `request` does."""
        with self.lock:
            self.ensure()
            for op, key, value in (
                ("check", "harness_dir", str(self.child_harness_dir)),
                ("domain", "domain", domain),
            ):
                if value not in self.warm:
                    self.request({"op": op, key: value})
                    self.warm.add(value)

    def kill(self, pid: int) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    self.send({"op": "kill", "pid": pid})
                except HarnessProcessError:
                    pass

    def exit_status(self, pid: int) -> int | None:
        return self.ended(pid).get("code")

    def ended(self, pid: int) -> dict[str, Any]:
        """How a trial process ended: `{"code": exit status (negative: the signal) | None, "cpu_s": CPU
        seconds it used | None}` ({} when the server does not answer)."""
        with self.lock:
            self.quiet = True
            try:
                return self.request({"op": "status", "pid": pid}, timeout_s=10)
            except HarnessProcessError:
                return {}
            finally:
                self.quiet = False

    def limit_reached(self, **seen: Any) -> str | None:
        """The per-process limit a harness process ran into (`limits.exceeded`), or None."""
        from pytest_ecdysis.validate.limits import exceeded

        return exceeded(self.limits, **seen) if self.limits is not None else None

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
            raise HarnessProcessError(
                f"the harness process does not accept trials ({exc}): {server._tail()}"
            ) from None
        hello = self.receive(STARTUP_TIMEOUT_S)
        self.pid = hello.get("pid")

    def fds(self) -> tuple[int, int]:
        return self.sock.fileno(), self.sock.fileno()

    def lost(self, why: str) -> HarnessProcessError:
        self.close(kill=why.startswith(("hung", "broke")))
        if why == "died" and self.pid is not None:
            end = self.server.ended(self.pid)
            code = end.get("code")
            limit = self.server.limit_reached(exit_code=code, cpu_s=end.get("cpu_s"))
            if limit:
                return HarnessProcessError(f"{limit}: it was ended (exit status {code})")
            return HarnessProcessError(
                f"the harness process died (exit status {code}): {self.server._tail()}"
            )
        if why.startswith("hung"):
            return HarnessProcessError(
                f"the harness did not answer within the trial budget ({why}); its process was ended"
            )
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
