"""The guard a candidate passes before validation: only harness files changed, no gold-data reads.

A candidate diff touching anything outside the harness directory, or adding lines that read τ²'s gold
data or patch scoring, is rejected (`guard_rejected`) before any trial runs (docs/evolution.md, threat
model). This module reads diffs and path lists only; it runs nothing.
"""

from __future__ import annotations

import re

#: Added diff lines matching one of these read the benchmark's gold data or patch its scoring
#: (docs/evolution.md, threat model): flagged statically, the candidate is rejected before validation.
GOLD_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"evaluation_criteria", "reads a task's evaluation criteria (gold actions)"),
    (r"tasks\.json|tasks_voice\.json|split_tasks\.json", "opens a τ² task file"),
    (r"tau2[/\\.]data\b|\bDATA_DIR\b|data/tau2|domains[/\\]\w+[/\\](db|tasks)", "reads τ²'s data directory"),
    (r"\b(expected_actions|communicate_info|reward_basis|nl_assertions|env_assertions)\b",
     "reads gold task fields"),
    (r"tau2\.evaluator|\bevaluate_simulation\b|\bEnvironmentEvaluator\b", "touches τ²'s evaluator"),
    (r"\bpytest_ecdysis\b|\btask_suites\b", "touches the plugin or the task suites"),
)


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
