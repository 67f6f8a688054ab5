"""The session's one `endpoint.limiter.Limiter`, shared with its workers and sub-runs over a unix socket.

The top controller starts it (`start`): a private `0700` directory (`tempfile.mkdtemp`) holding
`limiter.sock`, a random token, and `ECDYSIS_LIMITER` exported as the settings' JSON with `socket` and
`token`, inherited by xdist workers, validation sub-runs (which start no service of their own) and the
role clients' process. Harness processes never see it: they get no `ECDYSIS_*` variable
(`pytest_ecdysis_tau2.harness_process.agent_env`), the directory is in `ECDYSIS_SANDBOX_HIDE`, and a
connection without the token is closed unanswered. Only the trusted side's transport
(`endpoint.deadline.DeadlineTransport`) reports replies to it, so what a harness sends cannot change it but
through the endpoint's own answers.

Protocol: one JSON line each way, one connection per call. `{"token", "op": "acquire", "timeout_s",
"tokens"}` -> `{"ok": true, "id", "epoch"}` (the connection then is the lease: `{"op": "release", "status",
"latency_s", "retry_after_s", "rate", "tokens"}` -> `{"ok": true}`; a connection that closes without it
releases the slot with no signal, so a killed worker leaks none) or `{"ok": false}`; `{"op": "room",
"timeout_s"}` -> `{"ok": bool}`; `{"op": "status"}` -> `Limiter.status()`.
`current()` is this process's limiter: the session's service when `ECDYSIS_LIMITER` names one, a local
`Limiter` with its settings when the service cannot be reached, None when the session runs no limiter (the
simulated model by default).
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_ecdysis.endpoint.limiter import (
    ENV_LIMITER,
    Lease,
    Limiter,
    LimiterLike,
    Outcome,
    RateHeaders,
    Settings,
)

#: seconds a client waits to connect or for a reply that is not an acquire's or a room's.
CONNECT_TIMEOUT_S = 5.0


def _send(sock: socket.socket, doc: dict[str, Any]) -> None:
    sock.sendall(json.dumps(doc).encode() + b"\n")


def _receive(stream: Any) -> dict[str, Any] | None:
    line = stream.readline()
    if not line:
        return None
    doc = json.loads(line)
    return doc if isinstance(doc, dict) else None


class LimiterService:
    """The server: a thread per connection around one `Limiter`."""

    def __init__(self, limiter: Limiter, directory: Path, token: str) -> None:
        self.limiter, self.directory, self.token = limiter, directory, token
        self.path = directory / "limiter.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self.sock.listen(256)
        self.closed = False
        self._stall_said = False
        threading.Thread(target=self._accept, name="ecdysis-limiter", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        lease: Lease | None = None
        try:
            stream = conn.makefile("rb")
            doc = _receive(stream)
            if doc is None or doc.get("token") != self.token:
                return  # not ours: closed unanswered
            op = doc.get("op")
            if op == "status":
                _send(conn, self.limiter.status())
            elif op == "room":
                _send(conn, {"ok": self.limiter.wait_room(float(doc.get("timeout_s", 0)))})
            elif op == "acquire":
                lease = self.limiter.acquire(float(doc.get("timeout_s", 0)), int(doc.get("tokens", 0)))
                if lease is None:
                    _send(conn, {"ok": False})
                    return
                _send(conn, {"ok": True, "id": lease.id, "epoch": lease.epoch})
                done = _receive(stream)
                outcome = _outcome(done) if done and done.get("op") == "release" else Outcome(0)
                self.limiter.release(lease, outcome)
                lease = None
                _send(conn, {"ok": True})
        except (OSError, ValueError, TypeError):
            pass
        finally:
            if lease is not None:
                self.limiter.release(lease, Outcome(0))
            conn.close()

    def stall_once(self) -> str | None:
        """The stall line the first time it is asked for after the limiter stalled, else None (the
        controller prints it once, not once per trial)."""
        line = self.limiter.status().get("stalled")
        if not line or self._stall_said:
            return None
        self._stall_said = True
        return str(line)

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def _outcome(doc: dict[str, Any]) -> Outcome:
    rate = doc.get("rate")
    return Outcome(
        status=int(doc.get("status", 0)),
        latency_s=float(doc.get("latency_s", 0.0)),
        retry_after_s=None if doc.get("retry_after_s") is None else float(doc["retry_after_s"]),
        rate=RateHeaders(**rate) if isinstance(rate, dict) else None,
        tokens=int(doc.get("tokens", 0)),
    )


class RemoteLimiter:
    """The client in a worker, a sub-run or a role's process (`endpoint.limiter.LimiterLike`)."""

    def __init__(self, path: str, token: str, settings: Settings) -> None:
        self.path, self.token, self.settings = path, token, settings
        self.pid = os.getpid()
        self._open: dict[int, socket.socket] = {}
        self._lock = threading.Lock()

    @property
    def adaptive(self) -> bool:
        return not self.settings.fixed

    def _ask(self, doc: dict[str, Any], wait_s: float) -> tuple[socket.socket, dict[str, Any] | None]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        sock.connect(self.path)
        _send(sock, {"token": self.token, **doc})
        sock.settimeout(wait_s + CONNECT_TIMEOUT_S)
        return sock, _receive(sock.makefile("rb"))

    def acquire(self, timeout_s: float, tokens: int = 0) -> Lease | None:
        try:
            sock, reply = self._ask({"op": "acquire", "timeout_s": timeout_s, "tokens": tokens}, timeout_s)
        except (OSError, ValueError):
            return None
        if not reply or not reply.get("ok"):
            sock.close()
            return None
        lease = Lease(int(reply["id"]), int(reply["epoch"]), tokens, 0.0)
        with self._lock:
            self._open[id(lease)] = sock
        return lease

    def release(self, lease: Lease, outcome: Outcome) -> None:
        with self._lock:
            sock = self._open.pop(id(lease), None)
        if sock is None:
            return
        try:
            doc = asdict(outcome)
            _send(sock, {"op": "release", **doc})
            _receive(sock.makefile("rb"))
        except (OSError, ValueError):
            pass
        finally:
            sock.close()

    def wait_room(self, timeout_s: float) -> bool:
        try:
            sock, reply = self._ask({"op": "room", "timeout_s": timeout_s}, timeout_s)
            sock.close()
        except (OSError, ValueError):
            return True
        return bool(reply and reply.get("ok"))

    def status(self) -> dict[str, Any]:
        try:
            sock, reply = self._ask({"op": "status"}, CONNECT_TIMEOUT_S)
            sock.close()
        except (OSError, ValueError):
            return {}
        return reply or {}


def connect(path: str, token: str, settings: Settings) -> RemoteLimiter | None:
    """The service's client, None when nothing answers at `path`."""
    remote = RemoteLimiter(path, token, settings)
    try:
        sock, reply = remote._ask({"op": "status"}, CONNECT_TIMEOUT_S)
        sock.close()
    except (OSError, ValueError):
        return None
    return remote if reply is not None else None


def start(settings: Settings) -> LimiterService:
    """Start the session's service and export `ECDYSIS_LIMITER` (module docstring)."""
    directory = Path(tempfile.mkdtemp(prefix="ecdysis-limiter-"))
    service = LimiterService(Limiter(settings), directory, secrets.token_urlsafe(24))
    os.environ[ENV_LIMITER] = settings.to_env(socket=str(service.path), token=service.token)
    with _LOCK:  # the controller's own calls (roles, the editor) use the limiter itself, not the socket
        _CURRENT[:] = [os.getpid(), service.limiter]
    return service


def stop(service: LimiterService) -> None:
    """Close the service and drop `ECDYSIS_LIMITER` when it is this service's."""
    service.close()
    value = os.environ.get(ENV_LIMITER, "")
    if str(service.path) in value:
        del os.environ[ENV_LIMITER]
    reset_current()


_CURRENT: list[Any] = []  # [pid, limiter]: a forked child reads its own
_LOCK = threading.Lock()


def current() -> LimiterLike | None:
    """This process's limiter (module docstring); read from `ECDYSIS_LIMITER` once per process."""
    with _LOCK:
        if not _CURRENT or _CURRENT[0] != os.getpid():
            _CURRENT[:] = [os.getpid(), _from_env(os.environ.get(ENV_LIMITER))]
        return _CURRENT[1]


def reset_current() -> None:
    """Forget this process's limiter (tests; a controller that started or stopped the service)."""
    with _LOCK:
        _CURRENT.clear()


def _from_env(value: str | None) -> LimiterLike | None:
    if not value:
        return None
    try:
        doc = json.loads(value)
        settings = Settings.from_doc(doc)
    except (ValueError, TypeError):
        print(f"ecdysis: {ENV_LIMITER} is not the limiter's settings; calls are not limited", file=sys.stderr)
        return None
    if doc.get("socket"):
        remote = connect(str(doc["socket"]), str(doc.get("token", "")), settings)
        if remote is not None:
            return remote
        print(
            f"ecdysis: the session's limiter at {doc['socket']} cannot be reached; this process limits "
            "its own calls",
            file=sys.stderr,
        )
    local = Limiter(settings)
    return local
