"""What a validation sub-run starts from: its arguments, its environment and its trusted copy.

Arguments (`subrun_args`): the session's suite arguments and xdist settings, minus the options that belong
to the outer run (`STRIPPED_OPTIONS`: evolution, gate, baseline, resume, run dir, harness, junit, and every
option only an evolution or a gate reads), plus
`--ecdysis-harness <candidate>`, `--ecdysis-run-dir <dir>` and `-o ecdysis_html=` (`SUBRUN_INI`: the HTML page
is the controller's, whether the ini file or a `-o` names it). Ini-only settings (`options.INI_ONLY`) reach a
sub-run as they reached the controller: from the ini file of the trusted copy, or from the `-o` arguments,
which are passed on.

Environment (`subrun_env`): inherited from the controller (never from harness code) without the user's
repository-local git variables (`gitenv.child_env`), minus the routes that load code before the suite does
(`SCRUBBED_ENV`: `PYTHONPATH`, `PYTHONSTARTUP`, `PYTHONHOME`, `PYTHONUSERBASE`, `PYTEST_ADDOPTS` and
`PYTEST_PLUGINS`, whose values `validate.subrun.run_suite` makes explicit arguments, outer options stripped),
plus `PYTHONNOUSERSITE=1` (no user site-packages `.pth` files), `PYTHONDONTWRITEBYTECODE=1`, a fresh
`ECDYSIS_RUN_ID`, the running simulated server's `ECDYSIS_SIM_URL`, and the session's scorer bytecode
cache read-only (`ECDYSIS_TRUSTED_PYCACHE_WRITE=0`, `validate.pycache`); the session's warm services'
directory (`ECDYSIS_WARM_DIR`) is kept and marked a sub-run's (`ECDYSIS_WARM_SUBRUN=1`, `validate.warm`).

The trusted copy (`TrustedTree`, docs/evolution.md, threat model): a private copy of the user's checkout
as it was when the evolution started (`integrity.pristine_copy`); `_place_harness` writes the candidate's
bytes into it, `_remap` points path arguments into it, `_read_only` makes it read-only and `_check_copy`
checks it file by file after the sub-run (a change is an `IntegrityError`). `compile_tree` compiles the
pristine copy's modules once, so sub-runs load the plugin and the suite from bytecode; the cache files of
each sub-run's copy are checked against the pristine ones too.
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import hashlib
import os
import py_compile
import shutil
import stat
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.options import OPTIONS
from pytest_ecdysis.git.env import child_env

#: Parts of a path whose files `compile_tree` leaves alone (as `integrity.SKIP_PARTS`).
SKIP_PARTS = {"__pycache__", ".git", ".pytest_cache", ".ruff_cache", ".mypy_cache"}

#: Outer-run options a sub-run must not inherit: name -> takes a value.
STRIPPED_OPTIONS: dict[str, bool] = {
    "--ecdysis-evolve": False,
    "--ecdysis-gate": False,
    "--ecdysis-resume": True,
    "--ecdysis-save-baseline": True,
    "--ecdysis-baseline": True,
    "--ecdysis-gate-tolerance": True,
    "--ecdysis-gate-max-regressions": True,
    "--ecdysis-rounds": True,
    "--ecdysis-harness": True,
    "--ecdysis-run-dir": True,
    "--ecdysis-test-model": True,
    "--junitxml": True,
    "--junit-xml": True,
    "--lf": False,
    "--last-failed": False,
    "--ff": False,
    "--failed-first": False,
    "-x": False,
    "--exitfirst": False,
    "--maxfail": True,
    "--sw": False,
    "--stepwise": False,
}
#: ... and every option only an evolution or a gate reads (`options.Option.needs`): a sub-run does neither,
#: and would refuse them (`config_values.check_needs`); the controller reads them.
STRIPPED_OPTIONS.update({"--ecdysis-" + o.name: o.action != "store_true" for o in OPTIONS if o.needs})
#: Ini overrides every sub-run gets after the session's own `-o` (the last `-o` of a key wins): blank
#: `ecdysis_html`, so a sub-run writes no page (into its read-only trusted copy, or over the controller's).
SUBRUN_INI: tuple[str, ...] = ("-o", "ecdysis_html=")


def strip_args(args: list[str] | tuple[str, ...], drop: dict[str, bool] | None = None) -> list[str]:
    """`args` without the options in `drop` (default `STRIPPED_OPTIONS`), in `--opt v` and `--opt=v` forms."""
    drop = STRIPPED_OPTIONS if drop is None else drop
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in drop:
            skip = drop[name] and "=" not in arg
            continue
        out.append(arg)
    return out


def workers_each(args: list[str] | tuple[str, ...], runs: int) -> str | None:
    """The `-n` of each of `runs` sub-runs started together, so that together they use the session's xdist
    workers instead of each starting as many: the session's count divided among them, "0" (trials in the
    sub-run's own process) when each would get one; None where nothing changes (one run, no `-n` given,
    `-n 0`, or `-n auto` / `logical`: left as given).

    Each worker pays its own start (τ² imported, the harness's fork server, a scorer, collection): on 2
    cores a sub-run of 10 airline trials took 15.8 CPU s with `-n 2`, 10.6 s with `-n 1` and 7.1 s with
    `-n 0` (the simulated model, docs/benchmarks.md), while two such sub-runs side by side keep both cores
    busy either way."""
    if runs <= 1:
        return None
    value: str | None = None
    take = False
    for arg in args:
        if take:
            value, take = arg, False
        elif arg in ("-n", "--numprocesses"):
            take = True
        elif arg.startswith("--numprocesses="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-n") and not arg.startswith("--") and len(arg) > 2:
            value = arg[2:].lstrip("=")
    if value is None or not value.isdigit() or int(value) == 0:
        return None
    each = int(value) // runs
    return str(each) if each > 1 else "0"


def subrun_args(
    base_args: list[str] | tuple[str, ...],
    *,
    harness_dir: Path,
    run_dir: Path,
    overrides: dict[str, str | None] | None = None,
) -> list[str]:
    """The sub-run's pytest arguments: the suite arguments, the candidate, the run dir, and overrides
    (e.g. `{"--ecdysis-split": "test", "--ecdysis-trials": "3", "--ecdysis-tasks": None}`), which replace
    any given value (None: drop the option)."""
    overrides = overrides or {}
    args = strip_args(base_args, {**STRIPPED_OPTIONS, **{k: True for k in overrides}})
    args += ["--ecdysis-harness", str(harness_dir), "--ecdysis-run-dir", str(run_dir), *SUBRUN_INI]
    for name, value in overrides.items():
        if value is not None:
            args += [name, value]
    return args


#: Environment variables that would load code before (or instead of) the trusted suite and plugin.
SCRUBBED_ENV = (
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONINSPECT",
    "PYTHONEXECUTABLE",
    "PYTHONPLATLIBDIR",
    "PYTHONPYCACHEPREFIX",
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
)


@dataclass
class TrustedTree:
    """The pristine copy a sub-run is started from (`integrity.pristine_copy`) and how paths map into it.

    `checkout`: the user's repository root; `pristine`: its copy; `harness_rel`: the harness directory
    relative to both; `digests`: `integrity.tree_digests(pristine)` (checked against each sub-run's copy);
    `pythonpath`: directories relative to the root that hold the plugin or suite packages (editable
    installs), put first on the sub-run's `PYTHONPATH` so they are imported from the copy.
    """

    checkout: Path
    pristine: Path
    harness_rel: str
    digests: dict[str, str]
    pythonpath: list[str] = field(default_factory=list)
    #: sha256 of each `__pycache__/*.pyc` of the pristine copy (`compile_tree`), checked in each sub-run's copy
    bytecode: dict[str, str] = field(default_factory=dict)
    compiling: threading.Thread | None = None

    def compile_in_background(self) -> None:
        """Compile the copy's modules once (`compile_tree`) while the evolution diagnoses; `ready` waits."""
        self.compiling = threading.Thread(
            target=compile_tree, args=(self,), daemon=True, name="ecdysis-compile-trusted-copy"
        )
        self.compiling.start()

    def ready(self) -> None:
        if self.compiling is not None:
            self.compiling.join()

    def map_path(self, path: Path) -> Path | None:
        """`path` (in the live checkout) inside a copy rooted at `self.pristine`; None when outside."""
        try:
            return self.pristine / Path(path).resolve().relative_to(self.checkout.resolve())
        except ValueError:
            return None

    def remove(self) -> None:
        self.ready()
        _rmtree(self.pristine.parent)


def subrun_env(run_id: str, sim_url: str | None) -> dict[str, str]:
    """The sub-run's environment: the controller's, scrubbed (module docstring); `run_id` is the id the
    sub-run writes its run directory under."""
    env = {
        k: v
        for k, v in child_env().items()  # ECDYSIS_SESSION_PID dropped: the ids below are given
        if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))
        and k not in SCRUBBED_ENV
        and k != "ECDYSIS_SESSION_PID"
    }
    env.update(
        ECDYSIS_RUN_ID=run_id,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    if env.get("ECDYSIS_TRUSTED_PYCACHE"):  # the session's scorer cache, read-only here (`validate.pycache`)
        env["ECDYSIS_TRUSTED_PYCACHE_WRITE"] = "0"
    if env.get("ECDYSIS_WARM_DIR"):  # the session's warm scorer server, used by this sub-run's workers too
        env["ECDYSIS_WARM_SUBRUN"] = "1"  # (`validate.warm`)
    if sim_url:
        env["ECDYSIS_SIM_URL"] = sim_url
    return env


def compile_tree(trusted: TrustedTree) -> None:
    """Compile the modules sub-runs import from the pristine copy (the packages on `trusted.pythonpath`,
    the harness excepted, and every `conftest.py`) into their `__pycache__` (this interpreter's tag), once
    per evolution, and keep the files' sha256 in `trusted.bytecode`. Every process of a sub-run (controller,
    workers, harness fork servers) then loads the plugin and the suite from bytecode instead of compiling
    them from source (about 1.5 CPU s each; sub-runs write no bytecode). `_check_copy` compares each sub-run's
    copy with these digests: a planted or changed cache file is an integrity change, as a changed source is."""
    tag, root = sys.implementation.cache_tag, trusted.pristine
    harness = (root / trusted.harness_rel).resolve()
    packages = [
        d
        for p in trusted.pythonpath
        for d in sorted((root / p).iterdir())
        if (d / "__init__.py").is_file() and d.resolve() != harness
    ]  # what sub-runs import from it
    sources = {*(f for d in packages for f in d.rglob("*.py")), *root.rglob("conftest.py")}
    for source in sorted(sources):
        if SKIP_PARTS & set(source.relative_to(root).parts) or source.is_symlink():
            continue
        target = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        try:
            py_compile.compile(str(source), cfile=str(target), doraise=True)
        except (py_compile.PyCompileError, OSError):
            continue  # compiled from source in the sub-run, as before
    trusted.bytecode = _bytecode_digests(trusted.pristine)


def _bytecode_digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("__pycache__/*.pyc"))
        if not p.is_symlink()
    }


def _place_harness(target: Path, harness_dir: Path, files: dict[str, bytes | None] | None) -> None:
    from pytest_ecdysis.core.harness import harness_files

    if target.exists():
        _rmtree(target)
    target.mkdir(parents=True)
    if files is None:
        files = {p.as_posix(): (harness_dir / p).read_bytes() for p in harness_files(harness_dir)}
    for rel, data in files.items():
        if data is None:  # a symlink: never followed, never copied
            continue
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _remap(arg: str, trusted: TrustedTree, tree: Path) -> str:
    """An argument that is an absolute path into the live checkout, pointed into the copy instead."""
    name, eq, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    if not os.path.isabs(value):
        return arg
    mapped = trusted.map_path(Path(value))
    if mapped is None:
        return arg
    inside = tree / mapped.relative_to(trusted.pristine)
    return f"{name}{eq}{inside}" if eq else str(inside)


def _read_only(tree: Path) -> None:
    for path in [tree, *tree.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _rmtree(path: Path) -> None:
    def writable(func: Any, name: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(name), stat.S_IRWXU)
            os.chmod(name, stat.S_IRWXU)
            func(name)
        except OSError:
            pass

    if path.exists():
        shutil.rmtree(path, onerror=writable)


def _check_copy(trusted: TrustedTree, tree: Path) -> None:
    from pytest_ecdysis.core.errors import IntegrityError
    from pytest_ecdysis.validate.integrity import changes, tree_digests

    prefix = "" if trusted.harness_rel in ("", ".") else trusted.harness_rel + "/"
    now = {p: d for p, d in tree_digests(tree).items() if not (prefix and p.startswith(prefix))}
    before = {p: d for p, d in trusted.digests.items() if not (prefix and p.startswith(prefix))}
    problems = changes({"the trusted copy": before}, {"the trusted copy": now})
    if trusted.bytecode or trusted.compiling is not None:
        cached = {p: d for p, d in _bytecode_digests(tree).items() if not (prefix and p.startswith(prefix))}
        kept = {p: d for p, d in trusted.bytecode.items() if not (prefix and p.startswith(prefix))}
        problems += changes({"the trusted copy's bytecode": kept}, {"the trusted copy's bytecode": cached})
    if problems:
        raise IntegrityError(
            "the validation sub-run changed the trusted copy of your checkout it ran from: "
            + "; ".join(problems)
            + "; the candidate is rejected and the evolution stops"
        )
