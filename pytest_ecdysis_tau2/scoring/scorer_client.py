"""A worker's handle on its scorer (`scorer.py`): the session's warm scorer server where there is one,
else a scorer process of its own.

Where the session's sandbox is on, its controller keeps one scorer server for the whole evolution
(`warm_scorer.py`, started through `pytest_ecdysis.validate.warm`); its socket is `ECDYSIS_WARM_DIR/scorer.sock`.
The client then connects to it (one connection per client; the server forks a scorer for it) and speaks
the same JSON lines as to its own process, with the same timeouts and error texts. A server that cannot
be reached, or whose scorer dies, is left for the rest of the process (said once on stderr) and the client
starts its own scorer process, as without the sandbox: never a wrong reward, never a lost trial.
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
from pathlib import Path
from typing import Any

#: Interpreter flags of the scorer process where no trusted cache exists: no bytecode written (-B), and
#: looked up only under a private, empty prefix (`-X pycache_prefix`), so none is read (module docstring).
SCORER_FLAGS = ("-B",)
#: Variables the scorer process does not inherit (code loaded before the scorer's own).
SCORER_DROPPED_ENV = (
    "PYTHONSTARTUP",
    "PYTHONINSPECT",
    "PYTHONPYCACHEPREFIX",
    "PYTHONHOME",
    "PYTHONEXECUTABLE",
)
#: the socket's name inside `ECDYSIS_WARM_DIR` (`pytest_ecdysis.validate.warm.ENV_DIR`).
SOCKET_NAME = "scorer.sock"
#: seconds to connect to the warm server.
CONNECT_TIMEOUT_S = 10.0


def socket_path() -> str | None:
    """`ECDYSIS_WARM_DIR/scorer.sock` where the session's sandbox is on, else None (the socket is bound
    before the variable is exported: a missing one means the server is gone, and the client says so)."""
    from pytest_ecdysis.validate import sandbox, warm

    directory = os.environ.get(warm.ENV_DIR)
    if not directory or not sandbox.enabled():
        return None
    return os.path.join(directory, SOCKET_NAME)


class ScorerError(RuntimeError):
    """The scorer process failed, timed out or could not score a trajectory."""


def scorer_env() -> dict[str, str]:
    """The environment of a scorer process (or server): this one's, without `SCORER_DROPPED_ENV`, with the
    suite's package root first on the path, user site-packages off."""
    from .. import SUITE_ROOT

    env = {k: v for k, v in os.environ.items() if k not in SCORER_DROPPED_ENV}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONNOUSERSITE="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # -B where nothing may be written (`flags`)
    env["PYTHONPATH"] = str(SUITE_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def scorer_command(cwd: str, *args: str) -> list[str]:
    """`python <bytecode flags> -m pytest_ecdysis_tau2.scoring *args` (the scorer process, `scoring.__main__`;
    flags: `pytest_ecdysis.validate.pycache.flags`, an empty private prefix under `cwd` where the session has
    no trusted cache)."""
    from pytest_ecdysis.validate.pycache import flags

    prefix = tempfile.mkdtemp(prefix="pycache-", dir=cwd)  # empty: nothing to load from it
    return [sys.executable, *flags(Path(prefix)), "-m", "pytest_ecdysis_tau2.scoring", *args]


class ScorerClient:
    """A worker's handle on its scorer: the warm server's (module docstring) or its own process, started
    lazily, restarted once if it died."""

    #: said once per process when the warm server could not be used
    _fallback_said = False

    def __init__(self, timeout_s: float = 300.0) -> None:
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None
        self.conn: socket.socket | None = None
        self._io: tuple[Any, Any] | None = None  # (writer, reader) of the process or the connection
        self.warm_failed = False  # the warm server failed once: this client uses its own process from then on
        self.lock = threading.Lock()
        self.cwd = tempfile.mkdtemp(prefix="ecdysis-scorer-")  # no .env, no harness on the path

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(
            scorer_command(self.cwd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=self.cwd,
            env=scorer_env(),
        )

    def _connect(self, path: str, domain: str | None) -> bool:
        """Connect to the warm server (saying which domain comes first); False, said once, when it fails."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(path)
            sock.settimeout(None)
            sock.sendall((json.dumps({"hello": 1, "domain": domain}) + "\n").encode())
        except OSError as exc:
            sock.close()
            self._warm_failed(f"cannot be reached ({exc})")
            return False
        self.conn = sock
        self._io = (sock.makefile("w", encoding="utf-8"), sock.makefile("r", encoding="utf-8"))
        return True

    def _warm_failed(self, what: str) -> None:
        self.warm_failed = True
        if not ScorerClient._fallback_said:
            ScorerClient._fallback_said = True
            print(
                f"ecdysis: the warm scorer server {what}; this worker starts its own scorer process",
                file=sys.stderr,
            )

    def _ensure(self, domain: str | None) -> None:
        """Have a live channel (lock held): the warm server's connection, else a running own process."""
        if self.conn is not None:
            return
        if self.proc is not None and self.proc.poll() is None:
            return
        path = None if self.warm_failed else socket_path()
        if path is not None and self._connect(path, domain):
            return
        self.proc = self._start()
        self._io = (self.proc.stdin, self.proc.stdout)

    def start(self, domain: str | None = None) -> None:
        """Start the scorer now (it imports tau2 while the first trial runs); `domain` lets a warm server
        build that domain's environments before the first trajectory arrives."""
        with self.lock:
            self._ensure(domain)

    def score(self, domain: str, task_id: str, simulation_json: str) -> dict[str, Any]:
        """Send one trajectory; returns the response dict. Raises ScorerError."""
        line = json.dumps({"domain": domain, "task_id": task_id, "simulation": json.loads(simulation_json)})
        with self.lock:
            for attempt in (1, 2):
                self._ensure(domain)
                warm = self.conn is not None
                assert self._io is not None, "_ensure leaves a connection or a process, or raises"
                writer, reader = self._io
                try:
                    writer.write(line + "\n")
                    writer.flush()
                    ready, _, _ = select.select([reader], [], [], self.timeout_s)
                    if not ready:
                        self.close()
                        raise ScorerError(f"scorer gave no answer within {self.timeout_s:g} s")
                    answer = reader.readline()
                    if not answer:
                        raise BrokenPipeError("scorer exited")
                except (BrokenPipeError, OSError) as exc:
                    self.close()
                    if warm:  # the server's scorer died: this trajectory goes to an own process
                        self._warm_failed(f"closed the connection ({exc})")
                        continue
                    if attempt == 2:
                        raise ScorerError(f"scorer process died twice: {exc}") from None
                    continue
                response = json.loads(answer)
                if not response.get("ok"):
                    raise ScorerError(f"scorer could not score task {task_id}: {response.get('error')}")
                return response
        raise ScorerError(
            "unreachable"
        )  # attempt 2 returns or raises: after a warm failure it is an own process

    def close(self) -> None:
        if self.conn is not None:
            for part in (*(self._io or ()), self.conn):
                try:
                    part.close()
                except Exception:
                    pass
            self.conn = None
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=5)
            except Exception:
                pass
            self.proc = None
        self._io = None


_CLIENT: ScorerClient | None = None
_CLIENT_LOCK = threading.Lock()


def scorer_client() -> ScorerClient:
    """The worker's scorer (one per process, also when its trial threads ask at once: the benchmark's rounds
    showed 3 scorers for 2 workers before the lock)."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            _CLIENT = ScorerClient()
            import atexit

            atexit.register(_CLIENT.close)
        return _CLIENT
