"""How the evolution loop runs a suite it does not trust: validation sub-runs from the trusted copy of the
checkout, the protected-file check after each, and the progress lines while a stage runs.

`TrustedRuns` is a part of `evolve.loop.Evolution`, given what it uses in its constructor (the stage
lines come from `evolve.state.RunState`). The sub-run itself is `validate.subrun.run_suite`; the copy it starts from is
`integrity.pristine_copy`; the checks are docs/evolution.md's threat model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from subprocess import Popen
from typing import Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import IntegrityError, shown
from pytest_ecdysis.evolve.state import SessionState
from pytest_ecdysis.report.progress import Count, Ticker, is_terminal, read_count
from pytest_ecdysis.validate import integrity, pycache
from pytest_ecdysis.validate.setup import TrustedTree
from pytest_ecdysis.validate.subrun import SubRun, run_suite


class TrustedRuns:
    """Sub-runs, integrity checks and progress lines of an `Evolution`.

    Making one copies the checkout (`trusted`) and compiles the copy in the background."""

    def __init__(
        self,
        *,
        cfg: EcdysisConfig,
        state: SessionState,
        summary: dict[str, Any],
        run_dir: Path,
        harness_dir: Path,
        ledger: integrity.Ledger,
        roots: dict[str, Any],
        checkout: Path,
        base_args: list[str],
        cwd: Path,
        pycache_start: dict[str, str],
        say: Callable[[str], None],
        last_said: Callable[[], str],
    ) -> None:
        self.cfg, self.state, self.summary = cfg, state, summary
        self.dir, self.harness_dir = run_dir, harness_dir
        self.ledger, self.roots, self.checkout = ledger, roots, checkout
        self.base_args, self.cwd = base_args, cwd  #: the session's command line and directory
        self.pycache_start = pycache_start  #: the scorers' bytecode cache when the loop started
        self.say, self.last_said = say, last_said
        self.stop_error: IntegrityError | None = None  #: set when a protected file changed: the loop stops
        self.trusted = self._trusted_tree()

    def subrun(
        self,
        harness_dir: Path,
        run_dir: Path,
        run_id: str,
        overrides: dict[str, str | None] | None = None,
        files: dict[str, bytes | None] | None = None,
        on_start: Callable[[Popen[Any]], None] | None = None,
        env: dict[str, str] | None = None,
        label: str | None = None,
    ) -> SubRun:
        """A validation sub-run of the session's suite on `files` (default: those under `harness_dir`),
        from the trusted copy (see `validate.subrun.run_suite`; `env` is added to its environment), with
        progress lines (`label`, default: the last stage line said) from the sub-run's `progress.json` while
        it runs; its run files are recorded in the ledger and the protected files checked after it.

        Raises:
            BrokenCandidate: see `validate.subrun.run_suite`.
            IntegrityError: a protected file changed (also recorded in `self.stop_error`).
        """
        progress: dict[str, Path] = {}

        def started(
            proc: Any,
        ) -> None:  # the sub-run writes its run directory privately: find its progress.json
            args = [str(a) for a in proc.args]
            if "--ecdysis-run-dir" in args:
                at = len(args) - 1 - args[::-1].index("--ecdysis-run-dir")
                progress["runs"] = Path(args[at + 1])  # the sub-run's own run id is private: one run in there
            if on_start is not None:
                on_start(proc)

        try:
            with self.follow(
                label or self.last_said().split(" (")[0],
                lambda: next(progress["runs"].glob("*/progress.json"), None) if progress else None,
            ):
                sub = run_suite(
                    base_args=self.base_args,
                    cwd=self.cwd,
                    harness_dir=harness_dir,
                    run_dir=run_dir,
                    run_id=run_id,
                    sim_url=self.state.sim_url,
                    overrides=overrides,
                    trusted=self.trusted,
                    files=files,
                    on_start=started,
                    env=env,
                )
        except IntegrityError as exc:  # it changed the trusted copy it ran from
            self.stop_error = exc
            raise
        finally:
            if self.stop_error is None:
                self.check_integrity("the validation sub-run")
        self.ledger.record_files(sub.run_path)
        return sub

    def check_integrity(self, when: str) -> None:
        """Compare the protected files with their checksums at the start of the evolution, and the
        scorers' bytecode cache with its state then (`validate.pycache`).

        Raises:
            IntegrityError: something changed (named); kept in `self.stop_error`: the loop stops.
        """
        problems = integrity.changes(self.ledger.start or {}, integrity.take(self.roots))
        # the scorers' bytecode cache of this session (`validate.pycache`), kept in memory only: a new
        # session (a resume) makes a new one
        problems += pycache.changes(self.pycache_start, pycache.digests())
        damage = [p for p in problems if p.startswith(integrity.GIT_OBJECTS + ":")]
        if damage:  # nothing suggested that writes the repository (gc, prune, fetch) before it is restored
            self.stop_error = IntegrityError(
                f"{when} damaged your repository's object store: " + shown(problems, 8, "; ") + ". The "
                "candidate is rejected and the evolution stops. Until the objects are back, run no git command "
                "that writes the repository (gc, prune, repack, fetch, commit): a file listed as added may be "
                "an object moved aside (move it back to the name listed as removed); else restore the files "
                "listed as removed from a backup or another clone"
            )
            raise self.stop_error
        if problems:
            self.stop_error = IntegrityError(
                f"protected files changed during {when}: " + shown(problems, 8, "; ") + ". The candidate is "
                "rejected and the evolution stops; restore them (git status / git diff in your checkout, "
                "pip install --force-reinstall for an installed package) and start a new run"
            )
            raise self.stop_error

    def _trusted_tree(self) -> TrustedTree:
        """The private copy of the checkout that validation sub-runs start from (`integrity.pristine_copy`)."""
        pristine = integrity.pristine_copy(self.checkout, exclude=(self.dir.parent,))
        tracked = integrity.checkout_files(self.checkout, untracked=False)
        pythonpath: set[str] = set()
        for name in ("pytest_ecdysis", *integrity.suite_packages()):
            path = integrity.package_dir(name)
            if path is not None and path.is_relative_to(self.checkout):
                rel = path.relative_to(self.checkout).as_posix()
                if any(p.startswith(rel + "/") for p in tracked):
                    pythonpath.add(Path(rel).parent.as_posix())
        tree = TrustedTree(
            checkout=self.checkout,
            pristine=pristine,
            harness_rel=self.harness_dir.resolve().relative_to(self.checkout).as_posix(),
            digests=integrity.tree_digests(pristine),
            pythonpath=sorted(pythonpath),
        )
        tree.compile_in_background()  # done before the first sub-run starts (`run_suite` waits)
        return tree

    def follow(self, label: str, progress_file: Callable[[], Path | None] | None = None) -> Ticker:
        """Progress lines while a stage runs (`progress.Ticker`); `progress_file()` names the sub-run's
        `progress.json` once known. The pace of the starting run estimates a sub-run's time before its first
        trial ends."""
        n, wall = self.summary.get("n_trials"), self.summary.get("wall_s")

        def count() -> Count | None:
            path = progress_file() if progress_file else None
            return read_count(path) if path else None

        return Ticker(
            self.say,
            label,
            count=count,
            interval_s=self.cfg.progress_s,
            seconds_per_trial=wall / n if n and wall else None,
            live=is_terminal(),
        )
