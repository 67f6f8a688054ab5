"""What diagnosis reads of an earlier round beside its spec: the candidate's diff, the decision and its per-task
flips (`evidence.context.PastRound`; bounded there: `MAX_HISTORY_DIFFS`, `MAX_DIFF_CHARS`,
`MAX_FLIPS_LISTED`), so a rejected change is not proposed again unchanged and an accepted one is built on.
Reads `rounds/<n>/candidate.diff` and the round's entry in `evolution.json`; no model call.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def lineage_of(rdir: Path, row: Mapping[str, Any]) -> dict[str, Any]:
    """`{"diff", "flips", "decision"}` of a finished round (each None when the round has none)."""
    diff_path = Path(rdir) / "candidate.diff"
    try:
        diff = diff_path.read_text(encoding="utf-8", errors="replace") if diff_path.is_file() else None
    except OSError:
        diff = None
    flips = row.get("flips") if isinstance(row.get("flips"), dict) else None
    decision = row.get("decision") if isinstance(row.get("decision"), dict) else None
    return {"diff": diff or None, "flips": flips, "decision": decision}
