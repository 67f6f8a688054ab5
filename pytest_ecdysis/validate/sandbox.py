"""The optional OS sandbox for harness code (`--ecdysis-sandbox`), built on bubblewrap (`bwrap`).

With the option (env `ECDYSIS_SANDBOX=1`, set by the controller so workers and sub-runs inherit it), a
suite starts its harness process through `wrap_command(...)`: the whole file system read-only, a fresh
empty `/tmp`, no network (model calls already go through the trusted trial process),
its own PID namespace, killed with its parent. Paths in `ECDYSIS_SANDBOX_HIDE` (`os.pathsep`-separated:
run directories, the integrity ledgers, the user's `.git`), the gold data files the suite names, and the
credential files of the home directory (`HOME_SECRETS`) are covered by an empty tmpfs (directories) or
`/dev/null` (files). What the process needs is bound back read-only (`visible`: the
harness, the suite's package root) or writable (`scratch`: its working directory).

Without the option harness code runs with the user's rights, and `status_line()` says so. `bwrap` comes
from Debian's `bubblewrap` package (`apt-get install bubblewrap`); user namespaces must be allowed.
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from pytest_ecdysis.core.errors import UsageError

ENV_ON = "ECDYSIS_SANDBOX"
ENV_HIDE = "ECDYSIS_SANDBOX_HIDE"
#: Files and directories of the home directory that hold credentials or other runs' ledgers: covered.
HOME_SECRETS = (".ssh", ".aws", ".azure", ".config", ".netrc", ".git-credentials", ".docker", ".kube", ".gnupg",
                ".pypirc", ".local/state/pytest-ecdysis", ".cache")


def enabled() -> bool:
    return os.environ.get(ENV_ON) == "1"


def check_available() -> str:
    """The `bwrap` path, after checking that it can start a sandbox here.

    Raises:
        UsageError: bwrap is not installed, or cannot create namespaces on this machine.
    """
    path = shutil.which("bwrap")
    if path is None:
        raise UsageError("--ecdysis-sandbox needs bubblewrap: install it (`apt-get install bubblewrap`), or drop "
                         "--ecdysis-sandbox (harness code then runs with your user's rights)")
    probe = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-net", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise UsageError(f"--ecdysis-sandbox: bubblewrap cannot start a sandbox here ({probe.stderr.strip()}); "
                         "allow unprivileged user namespaces or drop --ecdysis-sandbox")
    return path


def hidden_paths() -> list[Path]:
    return [Path(p) for p in os.environ.get(ENV_HIDE, "").split(os.pathsep) if p]


def wrap_command(command: list[str], *, visible: list[Path], scratch: Path, hide: list[Path] = ()) -> list[str]:
    """`command` run inside the sandbox when it is enabled, else `command` unchanged; `hide` adds paths
    to `ECDYSIS_SANDBOX_HIDE`'s (the caller's own gold data)."""
    if not enabled():
        return command
    bwrap = shutil.which("bwrap") or "bwrap"
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"]
    for path in visible:  # bound back after /tmp was emptied
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    home = Path.home()
    secrets = [home / name for name in HOME_SECRETS] if home != Path("/") else []
    for path in [*hidden_paths(), *hide, *secrets]:  # last: a visible tree may contain them
        if path.is_dir():
            args += ["--tmpfs", str(path)]
        elif path.is_file():
            args += ["--ro-bind", "/dev/null", str(path)]
    args += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch), "--"]
    return args + command


def status_line() -> str:
    """One line for the run output: which protection harness code runs under."""
    if enabled():
        return ("sandbox: harness code runs under bubblewrap (read-only file system, no network, run "
                "directories and gold data hidden)")
    return ("no OS sandbox: harness code runs with your user's rights (it is checked statically, run from a "
            "private copy, and protected files are checked after each stage; --ecdysis-sandbox adds bubblewrap)")
