"""What a round's stages may use of the loop: `RoundContext`, the protocol `evolve.loop.Evolution` satisfies.

The stage modules (`stages`, `accept`, `paired`, `extra_trials`, `instance`, `alternatives`, `ablation`,
`testsplit`) receive the loop as a `RoundContext` argument and never import `Evolution` back, so the loop
sits above its stages (docs/internals.md). A stage that needs something new of the loop adds it here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from subprocess import Popen
from typing import Any, Protocol

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import IntegrityError
from pytest_ecdysis.core.records import EvolutionRecord, HarnessPoint, ModificationSpec, RoundRecord
from pytest_ecdysis.edit.editors import Editor
from pytest_ecdysis.evolve.state import Compute, SessionState
from pytest_ecdysis.git import snapshot as gitsnapshot
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.report.progress import Ticker
from pytest_ecdysis.validate import integrity
from pytest_ecdysis.validate.subrun import SubRun


class RoundContext(Protocol):
    """The loop's state and services a stage reads or calls (attributes of `Evolution`)."""

    cfg: EcdysisConfig  #: the session's configuration
    state: SessionState  #: the session's `run.state.EcdysisState` (run id, harness id)
    dir: Path  #: the evolution's run directory (absolute)
    harness_dir: Path  #: the harness directory under evolution, in the user's checkout
    summary: dict[str, Any]  #: the session's `summary.json` (the starting run)
    doc: EvolutionRecord  #: `evolution.json` as it is being written
    ledger: integrity.Ledger  #: the integrity ledger of every file the loop wrote
    snapshot: gitsnapshot.Snapshot | None  #: the current candidate's bytes (set by the edit stage)
    editor: Editor  #: the round's editor (`edit.editors.make_editor`)

    @property
    def base_args(self) -> list[str]:
        """The session's command line (what every sub-run's arguments start from)."""

    @property
    def stop_error(self) -> IntegrityError | None:
        """Set when a protected file changed: the loop stops."""

    def say(self, text: str, n: int | None = None) -> None: ...

    def checkpoint(self) -> None: ...

    def stage_json(self, path: Path, compute: Compute) -> dict[str, Any]: ...

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
    ) -> SubRun: ...

    def check_integrity(self, when: str) -> None: ...

    def follow(self, label: str, progress_file: Callable[[], Path | None] | None = None) -> Ticker: ...

    def attempt(
        self,
        spec: ModificationSpec,
        worktree: gitworktree.Worktree,
        adir: Path,
        base: HarnessPoint,
        *,
        label: str,
        run_id: str,
        title: str,
    ) -> tuple[RoundRecord, HarnessPoint | None]: ...

    def finish_round(self, row: RoundRecord, rdir: Path, *, already_written: bool = False) -> RoundRecord: ...
