"""What a Landlock ruleset would hold of the harness sandbox where bubblewrap cannot start (user namespaces
unavailable), measured route by route against bubblewrap on this machine.

The harness process's sandbox (`pytest_ecdysis.validate.sandbox.wrap_command`) needs unprivileged user
namespaces. Landlock (Linux >= 5.13, an LSM a process applies to itself, no privilege) restricts file
access beneath allowed directories; its later ABIs add TCP bind/connect (4), abstract unix sockets and
signals (6). This script applies the allowlist the bubblewrap sandbox uses (the system directories, the
interpreter's prefixes, the harness directory read-only, a scratch directory writable) with the PyPI
binding `landlock` (`pip install landlock`; file-system rules only) and runs each route in a child, then
the same route under bubblewrap. One line per route:

    landlock route=<name> bwrap=<blocked|open|n/a> landlock=<blocked|open|n/a>

Routes: reading another τ² install's answer key beside the checkout (`other_install`), reading a
credential file in a directory not on the allowlist (`secret_file`), writing into the checkout
(`write_checkout`), an ancestor's environment through /proc (`proc_environ`), a TCP connection to a
local port (`tcp_connect`), a unix socket of the session's trusted services (`unix_socket`), a signal to
an ancestor (`signal_parent`), and whether the harness sees the checkout's own path in validation
(`same_path`, "open" when it does: bubblewrap binds the private copy there; Landlock cannot move a path, so
a harness under it could tell validation from use by its `__file__`).

    .venv/bin/python benchmarks/bench_landlock.py
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from pytest_ecdysis.validate import sandbox

WORK = Path(__file__).resolve().parents[2]  # beside the checkout: where a second checkout would live

LANDLOCK_CHILD = textwrap.dedent(
    """
    import os, sys
    import landlock
    read, write, code = sys.argv[1].split(os.pathsep), sys.argv[2], sys.argv[3]
    rs = landlock.Ruleset()
    rs.allow(*[p for p in read if os.path.exists(p)], rules=landlock.FSAccess.EXECUTE
             | landlock.FSAccess.READ_FILE | landlock.FSAccess.READ_DIR)
    rs.allow(write)
    rs.apply()
    exec(code)
    """
)


def probe_code(route: str, target: str) -> str:
    """Python that prints `open` when `route` succeeds against `target`, `blocked` when it is refused."""
    body = {
        "other_install": f"open({target!r}).read(10)",
        "secret_file": f"open({target!r}).read(10)",
        "write_checkout": f"open({target!r}, 'w').write('x')",
        "proc_environ": f"open('/proc/{os.getpid()}/environ', 'rb').read(10)",
        "tcp_connect": f"import socket; socket.create_connection(('127.0.0.1', {target}), timeout=2).close()",
        "unix_socket": f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({target!r}); s.close()",
        "signal_parent": f"import os; os.kill({os.getpid()}, 0)",
        "same_path": f"import os; assert os.path.isdir({target!r})",
    }[route]
    return f"try:\n    {body}\n    print('open')\nexcept Exception:\n    print('blocked')\n"


def run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    out = done.stdout.strip().splitlines()
    return out[-1] if out and out[-1] in ("open", "blocked") else f"error({done.stderr.strip()[-80:]!r})"


def reached(route: str, target: str, said: str) -> str:
    """A write counts where it lands on the real disk (inside bubblewrap a parent of a bound path is on the
    sandbox's own tmpfs: a write there succeeds and reaches nothing)."""
    if route != "write_checkout" or said != "open":
        return said
    landed = Path(target).exists()
    Path(target).unlink(missing_ok=True)
    return "open" if landed else "blocked"


def main() -> int:
    try:
        import landlock
    except ImportError:
        print("bench_landlock: the Landlock binding is not installed: pip install landlock", file=sys.stderr)
        return 2
    print(f"landlock abi={landlock.landlock_abi_version()} kernel={os.uname().release}")
    why = sandbox.probe()
    with tempfile.TemporaryDirectory(dir=WORK, prefix="landlock-bench-") as tmp:
        root = Path(tmp)
        # a validation sub-run's private copy holding the harness, and the checkout it was copied from
        copy, scratch, checkout = root / "copy", root / "scratch", root / "checkout"
        harness = copy / "harness"
        for d in (harness, scratch, checkout):
            d.mkdir(parents=True)
        other = root / "other-venv" / "tau2" / "tasks.json"
        other.parent.mkdir(parents=True)
        other.write_text('[{"id": "0"}]')
        secret = root / "home" / ".netrc"
        secret.parent.mkdir()
        secret.write_text("machine api login x password y")
        listener = socket.create_server(("127.0.0.1", 0))
        unix_path = str(root / "svc.sock")
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(unix_path)
        unix.listen()
        targets = {
            "other_install": str(other),
            "secret_file": str(secret),
            "write_checkout": str(checkout / "written"),
            "proc_environ": "",
            "tcp_connect": str(listener.getsockname()[1]),
            "unix_socket": unix_path,
            "signal_parent": "",
            "same_path": str(checkout / "harness"),
        }
        allowed = [*sandbox.SYSTEM_DIRS, *map(str, sandbox.interpreter_paths()), str(harness), "/dev"]
        for route, target in targets.items():
            code = probe_code(route, target)
            os.environ[sandbox.ENV_AT] = f"{copy}{os.pathsep}{checkout}"  # as validate.subrun sets it
            try:
                wrapped = sandbox.wrap_command(
                    [sys.executable, "-S", "-c", code], visible=[harness], scratch=scratch, force=True
                )
            finally:
                del os.environ[sandbox.ENV_AT]
            bwrap = run(wrapped) if why is None else "n/a"
            bwrap = reached(route, target, bwrap)
            land = run([sys.executable, "-c", LANDLOCK_CHILD, os.pathsep.join(allowed), str(scratch), code])
            land = reached(route, target, land)
            print(f"landlock route={route} bwrap={bwrap} landlock={land}")
        listener.close()
        unix.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
