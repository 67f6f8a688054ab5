"""pytest-ecdysis: evolve (train) runtime harnesses for LLM agents on a task suite, and gate changes in CI.

Public API: the record types suites produce and `record_trial`, which a suite's test calls with its
`TrialResult`. Everything else is reached through pytest options (`pytest --help`, group "ecdysis").
"""

from .errors import (
    EcdysisError,
    EditorError,
    EndpointFormatError,
    GitError,
    InfrastructureError,
    RunDirError,
    SpecError,
    TimeBudgetExceeded,
    UsageError,
)
from .records import FailureRecord, ModificationSpec, PatternGroup, RoundResult, ToolCallRecord, TrialResult

__all__ = [
    "EcdysisError",
    "EditorError",
    "EndpointFormatError",
    "FailureRecord",
    "GitError",
    "InfrastructureError",
    "ModificationSpec",
    "PatternGroup",
    "RoundResult",
    "RunDirError",
    "SpecError",
    "TimeBudgetExceeded",
    "ToolCallRecord",
    "TrialResult",
    "UsageError",
    "record_trial",
]


def record_trial(item, result) -> None:  # noqa: ANN001 - thin re-export
    """Attach a suite's `TrialResult` to the running pytest item (see `plugin.record_trial`)."""
    from .plugin import record_trial as _record

    _record(item, result)
