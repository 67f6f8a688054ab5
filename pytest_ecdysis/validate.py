"""Validation sub-runs: score a harness by running the user's own suite in a `pytest` subprocess.

A sub-run has the same suite arguments and xdist settings as the session (`config.invocation_params.args`),
minus the options that belong to the outer run (evolution, gate, baseline, resume, run dir, harness,
junit), plus `--ecdysis-harness <candidate>` and `--ecdysis-run-dir <dir>`. Never in-process: an imported
harness module would be reused.

With a `TrustedTree` (what evolution uses; docs/evolution.md, threat model) the sub-run runs from a fresh
private copy of the user's checkout as it was when the evolution started (`integrity.pristine_copy`), with
only the harness directory replaced by the candidate's bytes, files read-only, `-p no:cacheprovider`;
cwd, arguments and `PYTHONPATH` point into that copy, never into the live checkout. Its run directory and
`pytest.log` are written in the same private temporary directory and copied into `run_dir` by the
controller after the process (and its process group) ended, so no path of the outer run is in the
sub-run's arguments, environment or open files. The copy is checked file by file afterwards; a change is
an `IntegrityError`.

Environment: inherited from the controller (never from harness code) without the user's repository-local
git variables (`gitenv.child_env`), minus the routes that load code
before the suite does (`PYTHONPATH`, `PYTHONSTARTUP`, `PYTHONHOME`, `PYTHONUSERBASE`, `PYTEST_ADDOPTS` and
`PYTEST_PLUGINS`, whose values become explicit arguments, outer options stripped), plus
`PYTHONNOUSERSITE=1` (no user site-packages `.pth` files), `PYTHONDONTWRITEBYTECODE=1`, a fresh
`ECDYSIS_RUN_ID` and the running simulated server's `ECDYSIS_SIM_URL`.

Its results are read back from its run directory: `trials.jsonl` must parse line by line as trial results
and agree with `summary.json`, else the candidate is broken (`BrokenCandidate`).
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .edit import import_check
from .errors import RunDirError
from .gitenv import child_env
from .sandbox import enabled as sandbox_enabled

#: Outer-run options a sub-run must not inherit: name -> takes a value.
STRIPPED_OPTIONS: dict[str, bool] = {
    "--ecdysis-evolve": False,
    "--ecdysis-ablate": False,
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
    "--ecdysis-html": True,
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


@dataclass
class SubRun:
    """A finished sub-run: its run directory and what it wrote there."""

    run_id: str
    run_path: Path
    exit_code: int
    summary: dict[str, Any]
    trials: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    log_path: Path | None = None

    @property
    def score(self) -> float:
        return float(self.summary["suite_score"])


class BrokenCandidate(Exception):
    """The candidate does not import, or its sub-run produced no scores (the round ends `broken_candidate`)."""


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


def subrun_args(base_args: list[str] | tuple[str, ...], *, harness_dir: Path, run_dir: Path,
                overrides: dict[str, str | None] | None = None) -> list[str]:
    """The sub-run's pytest arguments: the suite arguments, the candidate, the run dir, and overrides
    (e.g. `{"--ecdysis-split": "test", "--ecdysis-trials": "3", "--ecdysis-tasks": None}`), which replace
    any given value (None: drop the option)."""
    overrides = overrides or {}
    args = strip_args(base_args, {**STRIPPED_OPTIONS, **{k: True for k in overrides}})
    args += ["--ecdysis-harness", str(harness_dir), "--ecdysis-run-dir", str(run_dir)]
    for name, value in overrides.items():
        if value is not None:
            args += [name, value]
    return args


#: Environment variables that would load code before (or instead of) the trusted suite and plugin.
SCRUBBED_ENV = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT",
                "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")


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

    def map_path(self, path: Path) -> Path | None:
        """`path` (in the live checkout) inside a copy rooted at `self.pristine`; None when outside."""
        try:
            return self.pristine / Path(path).resolve().relative_to(self.checkout.resolve())
        except ValueError:
            return None

    def remove(self) -> None:
        _rmtree(self.pristine.parent)


def run_suite(*, base_args: list[str] | tuple[str, ...], cwd: Path, harness_dir: Path, run_dir: Path,
              run_id: str, sim_url: str | None, overrides: dict[str, str | None] | None = None,
              check_import: bool = True, trusted: TrustedTree | None = None,
              files: dict[str, bytes | None] | None = None,
              on_start: Callable[[subprocess.Popen], None] | None = None,
              env: dict[str, str] | None = None) -> SubRun:
    """Run the suite on a harness in a subprocess and read its run directory `<run_dir>/<run_id>`.

    The harness is `files` (harness-relative path -> bytes, e.g. a `gitops.Snapshot`'s) when given, else
    the files under `harness_dir`. Output goes to `<run_dir>/pytest.log`. Ctrl-C stops the subprocess and
    propagates. `on_start` gets the process (its own process group) once started: a caller running
    sub-runs in threads stops them with it. `env` is added to the sub-run's environment (e.g. a response
    cache directory for this sub-run only).

    Raises:
        BrokenCandidate: the harness does not import, or the sub-run wrote no `summary.json`, malformed
            `trials.jsonl`, or scored no trial.
        IntegrityError: the sub-run changed a file of its trusted copy (outside the harness directory).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix="ecdysis-subrun-"))
    try:
        if trusted is not None:
            tree = private / "tree"
            shutil.copytree(trusted.pristine, tree, symlinks=True)
            target = tree / trusted.harness_rel
        else:
            tree, target = None, private / "harness" / harness_dir.name
        _place_harness(target, harness_dir, files)
        inner_id = "sub-" + uuid.uuid4().hex[:12]  # no outer run id or path in the sub-run's environment
        env = {**subrun_env(inner_id, sim_url), **(env or {})}
        if trusted is None and os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # the fallback runs from the live checkout anyway
        if check_import and not sandbox_enabled():  # sandboxed: the suite imports it in the sandbox
            problem = import_check(target, env=env)
            if problem:
                raise BrokenCandidate(f"the candidate does not import: {problem}")
        sub_runs = private / "runs"
        args = subrun_args(base_args, harness_dir=target, run_dir=sub_runs, overrides=overrides)
        addopts = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
        plugins = [x.strip() for x in os.environ.get("PYTEST_PLUGINS", "").split(",") if x.strip()]
        args = [*strip_args(addopts), *[a for p in plugins for a in ("-p", p)], *args]
        run_cwd = cwd
        if trusted is not None and tree is not None:
            args = ["-p", "no:cacheprovider", *[_remap(a, trusted, tree) for a in args]]
            mapped = trusted.map_path(cwd)
            run_cwd = tree / mapped.relative_to(trusted.pristine) if mapped is not None else tree
            env["PYTHONPATH"] = os.pathsep.join(str(tree / p) for p in trusted.pythonpath)
            _read_only(tree)
        code, wall, log_text = _run(args, run_cwd, env, private / "pytest.log", on_start)
        (run_dir / "pytest.log").write_text(log_text)
        log_path = run_dir / "pytest.log"
        if trusted is not None and tree is not None:
            _check_copy(trusted, tree)
        src = sub_runs / inner_id
        run_path = run_dir / run_id
        if src.is_dir():
            if run_path.exists():
                shutil.rmtree(run_path)
            shutil.copytree(src, run_path, symlinks=False, ignore_dangling_symlinks=True)
    finally:
        _rmtree(private)
    try:
        summary, trials = read_run(run_path)
    except RunDirError as exc:
        raise BrokenCandidate(f"the sub-run (exit status {code}) wrote no usable results: {exc}; see {log_path}") \
            from None
    if not summary.get("n_trials"):
        raise BrokenCandidate(f"the sub-run (exit status {code}) scored no trial; see {log_path}")
    problem = disagreement(summary, trials)
    if problem:
        raise BrokenCandidate(f"the sub-run's results do not agree ({problem}); see {run_path}")
    return SubRun(run_id=run_id, run_path=run_path, exit_code=code, summary=summary, trials=trials,
                  wall_s=wall, log_path=log_path)


def subrun_env(run_id: str, sim_url: str | None) -> dict[str, str]:
    """The sub-run's environment: the controller's, scrubbed (module docstring); `run_id` is the id the
    sub-run writes its run directory under."""
    env = {k: v for k, v in child_env().items()  # ECDYSIS_SESSION_PID dropped: the ids below are given
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST")) and k not in SCRUBBED_ENV
           and k != "ECDYSIS_SESSION_PID"}
    env.update(ECDYSIS_RUN_ID=run_id, PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1",
               LITELLM_LOCAL_MODEL_COST_MAP="True")
    if sim_url:
        env["ECDYSIS_SIM_URL"] = sim_url
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str], log_path: Path,
         on_start: Callable[[subprocess.Popen], None] | None = None) -> tuple[int, float, str]:
    """Run `python -m pytest args` in its own process group; the group is killed when it ends (a helper
    the harness started in the group does not outlive the sub-run). Returns (exit status, seconds, log)."""
    started = time.monotonic()
    # -P: like the `pytest` command, not `python -m`, keep the start directory off sys.path: started from
    # task_suites/, its tau2/ folder would shadow the τ² library in the sub-run and its workers
    command = [sys.executable, "-P", "-m", "pytest", *args]
    with log_path.open("w") as log:
        log.write("$ " + " ".join(command) + "\n\n")
        log.flush()
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        if on_start is not None:
            on_start(proc)
        try:
            code = proc.wait()
        except BaseException:
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc.pid, signal.SIGKILL)
            raise
        _kill_group(proc.pid, signal.SIGKILL)
    return code, time.monotonic() - started, log_path.read_text(errors="replace")


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _place_harness(target: Path, harness_dir: Path, files: dict[str, bytes | None] | None) -> None:
    from .harness import harness_files

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
    from .errors import IntegrityError
    from .integrity import changes, tree_digests

    prefix = "" if trusted.harness_rel in ("", ".") else trusted.harness_rel + "/"
    now = {p: d for p, d in tree_digests(tree).items() if not (prefix and p.startswith(prefix))}
    before = {p: d for p, d in trusted.digests.items() if not (prefix and p.startswith(prefix))}
    problems = changes({"the trusted copy": before}, {"the trusted copy": now})
    if problems:
        raise IntegrityError("the validation sub-run changed the trusted copy of your checkout it ran from: "
                             + "; ".join(problems) + "; the candidate is rejected and the evolution stops")


def read_run(run_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`(summary.json, trials.jsonl lines)` of a run directory.

    Raises:
        RunDirError: `summary.json` missing or unreadable, or a line of `trials.jsonl` that is not a JSON
            object with `task_id` and `termination_reason`.
    """
    try:
        summary = json.loads((run_path / "summary.json").read_text())
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read {run_path / 'summary.json'}: {exc}") from None
    trials_path = run_path / "trials.jsonl"
    trials = []
    if trials_path.is_file():
        for n, line in enumerate(trials_path.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                trial = json.loads(line)
                if not isinstance(trial, dict) or "task_id" not in trial or "termination_reason" not in trial:
                    raise ValueError("not a trial result (no task_id or termination_reason)")
            except ValueError as exc:
                raise RunDirError(f"{trials_path} line {n} is malformed: {exc}") from None
            trials.append(trial)
    return summary, trials


def disagreement(summary: dict[str, Any], trials: list[dict[str, Any]]) -> str | None:
    """Why `summary.json` does not match `trials.jsonl` (trial count, infrastructure errors, mean reward),
    or None. A summary edited after the fact, or trials dropped, shows here."""
    from .records import INFRA_REASONS

    scored = [t.get("reward") for t in trials if t.get("termination_reason") not in INFRA_REASONS]
    if any(not isinstance(r, int | float) for r in scored):
        return "a scored trial has no numeric reward"
    infra = len(trials) - len(scored)
    if summary.get("n_trials") != len(trials):
        return f"summary says {summary.get('n_trials')} trials, trials.jsonl has {len(trials)}"
    if summary.get("n_infra_errors") is not None and summary.get("n_infra_errors") != infra:
        return f"summary says {summary.get('n_infra_errors')} infrastructure errors, trials.jsonl has {infra}"
    mean = sum(scored) / len(scored) if scored else None
    got = summary.get("suite_score")
    if (mean is None) != (got is None) or (mean is not None and abs(float(got) - mean) > 1e-9):
        return f"summary score {got} is not the mean reward of trials.jsonl ({mean})"
    return None


def infra_drift(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """Why the candidate's run is not comparable with the incumbent's (more infrastructure errors, fewer
    scored trials, more missing cases), or None. `before`/`after` are run summaries (`summary.json`)."""
    def n(summary: dict[str, Any], key: str) -> int:
        value = summary.get(key)
        return len(value) if isinstance(value, list) else int(value or 0)

    if n(after, "n_infra_errors") > n(before, "n_infra_errors"):
        return (f"infrastructure drift: {n(after, 'n_infra_errors')} infrastructure error(s) against the "
                f"incumbent's {n(before, 'n_infra_errors')}")
    if n(after, "n_scored") < n(before, "n_scored"):
        return f"infrastructure drift: {n(after, 'n_scored')} scored trial(s) against the incumbent's {n(before, 'n_scored')}"
    if n(after, "missing") > n(before, "missing"):
        return (f"infrastructure drift: {n(after, 'missing')} case(s) never reported against the incumbent's "
                f"{n(before, 'missing')}")
    return None


def solved_tasks(trials: list[dict[str, Any]], threshold: float) -> set[str]:
    """Tasks whose trials all reached `threshold` (*solved*); infrastructure errors do not
    count as solved. Keys are `<suite>/<task_id>` when trials carry a suite, else the task id."""
    by_task: dict[str, list[bool]] = {}
    for t in trials:
        key = f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"])
        reward = t.get("reward")
        by_task.setdefault(key, []).append(reward is not None and reward >= threshold)
    return {k for k, oks in by_task.items() if all(oks)}


def flips(before: list[dict[str, Any]], after: list[dict[str, Any]], threshold: float) -> dict[str, list[str]]:
    """Per-task changes between two runs of the same tasks: `solved_to_failed`, `failed_to_solved`."""
    tasks = {f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"]) for t in before}
    a, b = solved_tasks(before, threshold), solved_tasks(after, threshold)
    return {"solved_to_failed": sorted(t for t in tasks if t in a and t not in b),
            "failed_to_solved": sorted(t for t in tasks if t not in a and t in b)}
