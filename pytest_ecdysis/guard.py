"""The guard a candidate passes before validation: only harness files changed, no gold-data reads.

A candidate diff touching anything outside the harness directory, or adding lines that read τ²'s gold
data or patch scoring, is rejected (`guard_rejected`) before any trial runs (docs/evolution.md, threat
model). This module reads diffs and path lists only; it runs nothing.
"""

from __future__ import annotations

import re

from .staticcheck import GOLD_PATTERNS

#: The gold-data patterns are the static check's own (one list): `staticcheck.GOLD_PATTERNS`.


def gold_data_flags(diff_text: str) -> list[str]:
    """Static check of a candidate diff: one finding per added line that reads gold data or patches scoring.

    Only added lines (`+`, not `+++`) are read; a finding is `"<file>: <reason>: <line>"`.
    """
    findings: list[str] = []
    current = ""
    for line in diff_text.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else line[4:]
            continue
        if not line.startswith("+"):
            continue
        for pattern, reason in GOLD_PATTERNS:
            if re.search(pattern, line[1:]):
                findings.append(f"{current}: {reason}: {line[1:].strip()[:120]}")
                break
    return findings


def outside_harness(changed: list[str], harness_rel: str) -> list[str]:
    """The repository-relative paths of `changed` that are not under `harness_rel` ('' or '.': the root)."""
    if harness_rel in ("", "."):
        return []
    return [p for p in changed if not p.startswith(harness_rel + "/")]
