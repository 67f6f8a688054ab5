"""Validation sub-runs: score a harness by running the user's own suite in a `pytest` subprocess.

A sub-run has the same suite arguments and xdist settings as the session (`config.invocation_params.args`),
minus the options that belong to the outer run, plus the candidate and a run directory (`validate.setup`:
arguments, environment, trusted copy). Never in-process: an imported harness module would be reused.

With a `TrustedTree` (what evolution uses; docs/evolution.md, threat model) the sub-run runs from a fresh
private copy of the user's checkout as it was when the evolution started (`integrity.pristine_copy`), with
only the harness directory replaced by the candidate's bytes, files read-only, `-p no:cacheprovider`;
cwd, arguments and `PYTHONPATH` point into that copy, never into the live checkout. Its run directory and
`pytest.log` are written in the same private temporary directory and copied into `run_dir` by the
controller after the process (and its process group) ended, so no path of the outer run is in the
sub-run's arguments, environment or open files (one exception: with the sandbox on, `ECDYSIS_SANDBOX_AT`
names the checkout, where harness processes see the copy: `validate.sandbox.inside`, so a harness cannot
tell validation from a plain run by its own paths). The copy is checked file by file afterwards; a change
is an `IntegrityError`.

Its arguments and environment are `validate.setup`'s; its results are read back from its run directory
(`validate.results`): `trials.jsonl` must parse line by line as trial results and agree with `summary.json`,
else the candidate is broken (`BrokenCandidate`). Callers import those names from those modules.
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.core.secrets import redact, redact_tree
from pytest_ecdysis.edit.editors import import_check
from pytest_ecdysis.validate.results import disagreement, read_run
from pytest_ecdysis.validate.sandbox import ENV_AT as SANDBOX_AT
from pytest_ecdysis.validate.sandbox import SandboxStartError, start_failure
from pytest_ecdysis.validate.sandbox import enabled as sandbox_enabled
from pytest_ecdysis.validate.setup import (
    TrustedTree,
    _check_copy,
    _place_harness,
    _read_only,
    _remap,
    _rmtree,
    strip_args,
    subrun_args,
    subrun_env,
)


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


def run_suite(
    *,
    base_args: list[str] | tuple[str, ...],
    cwd: Path,
    harness_dir: Path,
    run_dir: Path,
    run_id: str,
    sim_url: str | None,
    overrides: dict[str, str | None] | None = None,
    check_import: bool = True,
    trusted: TrustedTree | None = None,
    files: dict[str, bytes | None] | None = None,
    on_start: Callable[[subprocess.Popen], None] | None = None,
    env: dict[str, str] | None = None,
) -> SubRun:
    """Run the suite on a harness in a subprocess and read its run directory `<run_dir>/<run_id>`.

    The harness is `files` (harness-relative path -> bytes, e.g. a `git.snapshot.Snapshot`'s) when given, else
    the files under `harness_dir`. Output goes to `<run_dir>/pytest.log`. Ctrl-C stops the subprocess and
    propagates. `on_start` gets the process (its own process group) once started: a caller running
    sub-runs in threads stops them with it. `env` is added to the sub-run's environment (e.g. a response
    cache directory for this sub-run only).

    Raises:
        BrokenCandidate: the harness does not import, or the sub-run wrote no `summary.json`, malformed
            `trials.jsonl`, or scored no trial.
        IntegrityError: the sub-run changed a file of its trusted copy (outside the harness directory).
        SandboxStartError: bubblewrap could not start a harness process in the sub-run (its log says so):
            an infrastructure error, not the candidate's; the loop stops, resumable.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix="ecdysis-subrun-"))
    try:
        if trusted is not None:
            trusted.ready()  # its bytecode compiled (`setup.compile_tree`)
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
            if sandbox_enabled():  # harness code sees the copy at the checkout's own paths
                env[SANDBOX_AT] = f"{tree}{os.pathsep}{trusted.checkout}"
            _read_only(tree)
        code, wall, log_text = _run(args, run_cwd, env, private / "pytest.log", on_start)
        (run_dir / "pytest.log").write_text(redact(log_text))
        log_path = run_dir / "pytest.log"
        if trusted is not None and tree is not None:
            _check_copy(trusted, tree)
        src = sub_runs / inner_id
        run_path = run_dir / run_id
        if src.is_dir():
            if run_path.exists():
                shutil.rmtree(run_path)
            shutil.copytree(src, run_path, symlinks=False, ignore_dangling_symlinks=True)
            redact_tree(run_path)  # harness code ran in the sub-run: its files are redacted here, trusted
    finally:
        _rmtree(private)
    sandbox_failed = start_failure(log_text)
    if sandbox_failed:  # the tool failed, not the candidate: the loop stops, resumable
        raise SandboxStartError(
            f"a validation sub-run could not start harness code: {sandbox_failed}; see "
            f"{log_path}; fix the sandbox (or pass --ecdysis-sandbox off), then resume"
        )
    try:
        summary, trials = read_run(run_path)
    except RunDirError as exc:
        raise BrokenCandidate(
            f"the sub-run (exit status {code}) wrote no usable results: {exc}; see {log_path}"
        ) from None
    if not summary.get("n_trials"):
        raise BrokenCandidate(f"the sub-run (exit status {code}) scored no trial; see {log_path}")
    problem = disagreement(summary, trials)
    if problem:
        raise BrokenCandidate(f"the sub-run's results do not agree ({problem}); see {run_path}")
    return SubRun(
        run_id=run_id,
        run_path=run_path,
        exit_code=code,
        summary=summary,
        trials=trials,
        wall_s=wall,
        log_path=log_path,
    )


def _run(
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    log_path: Path,
    on_start: Callable[[subprocess.Popen], None] | None = None,
) -> tuple[int, float, str]:
    """Run `python -m pytest args` in its own process group; the group is killed when it ends (a helper
    the harness started in the group does not outlive the sub-run). Returns (exit status, seconds, log)."""
    started = time.monotonic()
    # -P: like the `pytest` command, not `python -m`, keep the start directory off sys.path: a folder there
    # named like a library (a suite's `tau2/`, say) would shadow it in the sub-run and its workers
    command = [sys.executable, "-P", "-m", "pytest", *args]
    with log_path.open("w") as log:
        log.write("$ " + " ".join(command) + "\n\n")
        log.flush()
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
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
    return code, time.monotonic() - started, redact(log_path.read_text(errors="replace"))


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
