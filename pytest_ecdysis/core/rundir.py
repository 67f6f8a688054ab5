"""Reading and writing the files of a run directory that the evolution stages share.

JSON files are written atomically (a temporary file, then a rename) and always carry `schema_version`;
a file that cannot be read is a `RunDirError` naming it. This module does no git, model or suite work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.core.records import SCHEMA_VERSION, FailureRecord, PatternGroup, Tokens
from pytest_ecdysis.core.secrets import redact_json


def read_json(path: Path, ledger: Any = None) -> dict[str, Any]:
    """The JSON object in `path`; with a `ledger` (`integrity.Ledger`) its digest is checked first.

    Raises:
        RunDirError: the file is missing or is not valid JSON.
        IntegrityError: the controller did not write the file, or it changed since (with a ledger).
    """
    try:
        data = ledger.read(path) if ledger is not None else path.read_bytes()
        return json.loads(data)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from None


def write_json(path: Path, doc: Mapping[str, Any], ledger: Any = None) -> None:
    """Write `doc` to `path` atomically, adding `schema_version` when it has none; with a `ledger`
    (`integrity.Ledger`) its digest is recorded."""
    body = doc if "schema_version" in doc else {"schema_version": SCHEMA_VERSION, **doc}
    data = (json.dumps(redact_json(body), indent=2, ensure_ascii=False) + "\n").encode()
    if ledger is not None:
        ledger.write(path, data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def load_evidence(run_path: Path) -> tuple[list[FailureRecord], list[PatternGroup]]:
    """Failure records and pattern groups of a run directory (`failures.jsonl`, `groups.json`).

    Raises:
        RunDirError: `failures.jsonl` missing (the run was not written by pytest-ecdysis).
    """
    path = run_path / "failures.jsonl"
    if not path.is_file():
        raise RunDirError(f"{path} is missing; the evidence of run {run_path.name} cannot be read")
    records = [
        FailureRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()
    ]
    groups_path = run_path / "groups.json"
    groups = []
    if groups_path.is_file():
        groups = [PatternGroup.model_validate(g) for g in read_json(groups_path).get("groups", [])]
    return records, groups


def spec_of(rdir: Path) -> dict[str, Any] | None:
    """The round's `spec.json`, or None when the round wrote none."""
    path = rdir / "spec.json"
    return read_json(path) if path.is_file() else None


def add_tokens(total: Tokens, more: Mapping[str, Any]) -> None:
    """Add the `prompt`, `completion` and `total` token counts of `more` to `total`, in place."""
    total["prompt"] = total.get("prompt", 0) + int(more.get("prompt", 0) or 0)
    total["completion"] = total.get("completion", 0) + int(more.get("completion", 0) or 0)
    total["total"] = total.get("total", 0) + int(more.get("total", 0) or 0)


def slug(model: str | None) -> str:
    """A model name made safe for a directory or run-id part (`sim/strong` -> `sim_strong`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model or "")


#: the lock file an evolution session holds in its run directory while it runs.
LOCK_NAME = ".session.lock"
_held: dict[Path, Any] = {}  # run directory -> the open lock file, held until the process exits


def lock_run(run_path: Path, what: str) -> None:
    """Hold an exclusive lock on `run_path` for the rest of this process (released when it exits, also on a
    crash), so that two sessions never write one run directory (a resume of a run that is still going).

    Raises:
        UsageError: another process holds it; `what` names the option that chose this run (e.g.
            `--ecdysis-resume RUN_ID`).
    """
    import fcntl
    import os

    from pytest_ecdysis.core.errors import UsageError

    run_path = run_path.absolute()
    if run_path in _held:
        return
    run_path.mkdir(parents=True, exist_ok=True)
    handle = open(run_path / LOCK_NAME, "a+")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UsageError(
            f"{what}: the run {run_path} is in use by {holder}, which is still running; wait for it "
            "to finish (or stop it), then resume, or start a new run"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()}")
    handle.flush()
    _held[run_path] = handle
