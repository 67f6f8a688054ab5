"""The session's warm scorer server: τ² imported once and each domain's pristine environments built once
for a whole evolution, its validation and other sub-runs included.

Started by the top session's controller only when the sandbox is on (`start`, through the plugin's
`pytest_ecdysis.validate.warm` and `registration.ecdysis_warm_services`), as
`python <bytecode flags> -m pytest_ecdysis_tau2.scoring --serve <dir>/scorer.sock`, with the environment and
flags of a worker's own scorer process (`scorer_client.scorer_env`, `scorer_command`). It listens on a Unix
socket in the controller's private `0700` directory, which harness processes and the editor cannot see
(`ECDYSIS_SANDBOX_HIDE`). Its life is the controller's: it exits when its standard input (a pipe from
the controller) reaches end of file, and removes the directory then.

Per connection (one per worker's `ScorerClient`) the server reads one hello line `{"hello": 1, "domain":
"airline"}`, imports τ² and builds that domain's two pristine environments if it has not yet (in itself,
so every later connection's scorer shares them), then forks a dedicated scorer for the connection, which
serves it exactly as a worker's own scorer process serves its pipe (`scorer.serve_lines`: JSON lines, each
request scored in a forked grandchild by `cow_scoring`, so nothing a scoring run changes survives). The
gold hashes a scorer computes (they depend only on τ²'s data and the task: `cow_scoring._GOLD_HASHES`,
keyed by (domain, task id)) are sent back to the server over a pipe, so later connections' scorers reuse
them. No harness code runs here or in any process forked from here.

Bytecode: the server reads and fills the session's trusted cache like the scorer processes it replaces
(`pytest_ecdysis.validate.pycache`), but only while it imports τ² for its first connection (the top
session's first suite run) and never after the evolution said `freeze` on its standard input
(`validate.warm.freeze`, right before the loop records the cache's state): from then on it and its forks
write none (`sys.dont_write_bytecode`), so the cache an evolution checks after every editor call and
sub-run (`TrustedRuns.check_integrity`) does not change under it, whatever a later scoring imports, also
in a resumed evolution whose first connection comes from a sub-run.

`ECDYSIS_SCORER_SERVER_LOG` (a file path, tests and benchmarks) makes the server append one line when it serves, one per
connection, per gold hash received, and its CPU seconds at exit (with its reaped scorers').
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
from typing import Any

ENV_LOG = "ECDYSIS_SCORER_SERVER_LOG"
#: seconds the server waits for a new connection's hello line (the client sends it with the connection).
HELLO_TIMEOUT_S = 30.0


def start(directory: str) -> subprocess.Popen:
    """Start the server on `directory/scorer.sock` (the controller's; module docstring); returns at once."""
    from .scorer_client import SOCKET_NAME, scorer_command, scorer_env

    cwd = os.path.join(directory, "cwd")
    os.mkdir(cwd, 0o700)  # no .env, no harness on the path; its empty bytecode prefix lives here too
    path = os.path.join(directory, SOCKET_NAME)
    listener = _listen(path)  # bound here, so a worker never finds no socket; only the server keeps it open
    try:
        command = scorer_command(cwd, "--serve", path, str(listener.fileno()))
        return subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=scorer_env(),
            pass_fds=[listener.fileno()],
        )
    finally:
        listener.close()  # a dead server then refuses connections (the clients fall back) instead of queueing them


def _listen(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(64)
    return listener


def _log(text: str) -> None:
    path = os.environ.get(ENV_LOG)
    if path:
        with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {text}\n")


def serve(path: str, fd: int | None = None) -> None:
    """Accept connections on `path` (listening already on `fd` where given: `start`) until standard input
    ends (module docstring); removes `path`'s directory."""
    sys.stdout = sys.stderr  # τ²'s prints never reach a protocol
    directory = os.path.dirname(path)
    listener = socket.socket(fileno=fd) if fd is not None else _listen(path)
    pipes: dict[int, bytes] = {}  # a scorer's gold-hash pipe -> bytes not yet a whole line
    _log("serving")
    try:
        while True:
            ready, _, _ = select.select([listener, sys.stdin.fileno(), *pipes], [], [], 1.0)
            _reap()
            if sys.stdin.fileno() in ready:
                if not os.read(sys.stdin.fileno(), 4096):
                    return  # the controller closed its end or died
                sys.dont_write_bytecode = True  # `freeze`: the evolution records the cache now
                _log("frozen")
            for fd in (fd for fd in ready if fd in pipes):
                _receive(fd, pipes)
            if listener in ready:
                conn, _ = listener.accept()
                fd = _fork_scorer(conn, listener, pipes)
                if fd is not None:
                    pipes[fd] = b""
    finally:
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)
        _reap()
        import resource

        used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        _log(f"exit cpu_s {sum(u.ru_utime + u.ru_stime for u in used):.2f} (with the reaped scorers)")


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _receive(fd: int, pipes: dict[int, bytes]) -> None:
    """Read a scorer's gold-hash lines `[domain, task id, [db hash, user db hash]]` into the server's cache."""
    from . import cow_scoring

    data = os.read(fd, 65536)
    if not data:
        os.close(fd)
        del pipes[fd]
        return
    *lines, pipes[fd] = (pipes[fd] + data).split(b"\n")
    for line in lines:
        with contextlib.suppress(ValueError, TypeError):
            domain, task_id, hashes = json.loads(line)
            cow_scoring._GOLD_HASHES.setdefault((str(domain), str(task_id)), list(hashes))
            _log(f"gold {domain} {task_id}")


def _fork_scorer(conn: socket.socket, listener: socket.socket, pipes: dict[int, bytes]) -> int | None:
    """Read the connection's hello, prepare its domain here, fork its scorer; the read end of the scorer's
    gold-hash pipe, or None when the hello was unusable (the connection is closed: the client falls back)."""
    from ..tasks.tau2lib import DOMAINS
    from . import cow_scoring, scorer

    reader = conn.makefile("r", encoding="utf-8")
    try:
        conn.settimeout(HELLO_TIMEOUT_S)
        hello = json.loads(reader.readline() or "null")
        domain = hello.get("domain") if isinstance(hello, dict) else None
        conn.settimeout(None)
        scorer.ready()
        sys.dont_write_bytecode = (
            True  # from now on nothing is written to the session's cache (module docstring)
        )
        if domain in DOMAINS and cow_scoring.available():
            cow_scoring.prepare(domain)
    except Exception as exc:
        _log(f"refused a connection: {type(exc).__name__}: {exc}")
        reader.close()
        conn.close()
        return None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the connection's scorer
        status = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            listener.close()
            os.close(read_fd)
            for fd in pipes:
                os.close(fd)
            _serve_connection(conn, reader, write_fd, domain)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    reader.close()
    conn.close()
    _log(f"connection {pid} {domain}")
    return read_fd


def _serve_connection(conn: socket.socket, reader: Any, write_fd: int, domain: Any) -> None:
    from . import cow_scoring, scorer

    known = set(cow_scoring._GOLD_HASHES)
    report = os.fdopen(write_fd, "w", buffering=1)

    def scored() -> None:  # new gold hashes go back to the server, for later connections' scorers
        for key in set(cow_scoring._GOLD_HASHES) - known:
            known.add(key)
            with contextlib.suppress(OSError):
                report.write(json.dumps([key[0], key[1], cow_scoring._GOLD_HASHES[key]]) + "\n")

    with conn.makefile("w", encoding="utf-8") as out:
        scorer.serve_lines(reader, out, scored)
