"""What a round's stages may use of the loop: `RoundContext`, the protocol `evolve.loop.Evolution` satisfies.

The stage modules (`stages`, `accept`, `paired`, `extra_trials`, `instance`, `alternatives`, `ablation`,
`testsplit`) receive the loop as a `RoundContext` argument and never import `Evolution` back, so the loop
sits above its stages (docs/internals.md). A stage that needs something new of the loop adds it here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pytest_ecdysis.core.errors import IntegrityError
from pytest_ecdysis.core.records import ModificationSpec
from pytest_ecdysis.git import snapshot as gitsnapshot
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.validate import integrity
from pytest_ecdysis.validate.subrun import SubRun


class RoundContext(Protocol):
    """The loop's state and services a stage reads or calls (attributes of `Evolution`)."""

    cfg: Any  #: the session's `EcdysisConfig`
    state: Any  #: the session's `EcdysisState` (run id, harness id)
    dir: Path  #: the evolution's run directory (absolute)
    harness_dir: Path  #: the harness directory under evolution, in the user's checkout
    doc: dict[str, Any]  #: `evolution.json` as it is being written
    ledger: integrity.Ledger  #: the integrity ledger of every file the loop wrote
    snapshot: gitsnapshot.Snapshot | None  #: the current candidate's bytes (set by the edit stage)
    stop_error: IntegrityError | None  #: set when a protected file changed: the loop stops
    editor: Any  #: the round's editor (`edit.editors.make_editor`)

    def say(self, text: str, n: int | None = None) -> None: ...

    def checkpoint(self) -> None: ...

    def stage_json(self, path: Path, compute: Any) -> dict[str, Any]: ...

    def subrun(self, harness_dir: Path, run_dir: Path, run_id: str,
               overrides: dict[str, str | None] | None = None,
               files: dict[str, bytes | None] | None = None, on_start: Any = None,
               env: dict[str, str] | None = None, label: str | None = None) -> SubRun: ...

    def check_integrity(self, when: str) -> None: ...

    def follow(self, label: str, progress_file: Any = None) -> Any: ...

    def attempt(self, spec: ModificationSpec, worktree: gitworktree.Worktree, adir: Path, base: dict[str, Any], *,
                label: str, run_id: str, title: str) -> tuple[dict[str, Any], dict[str, Any] | None]: ...

    def finish_round(self, row: dict[str, Any], rdir: Path, *, already_written: bool = False) -> dict[str, Any]: ...
