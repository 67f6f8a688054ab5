"""pytest-ecdysis: evolve (train) runtime harnesses for LLM agents on a task suite, and gate changes in CI.

Public API: the record types suites produce, `hookimpl` (the marker of the `pytest_ecdysis` entry-point hooks a
suite implements: `core/hookspecs.py`), `record_trial`, which a suite's test calls with its
`TrialResult`, and `get_state`, the session's resolved options for a suite's parametrisation (a suite of
one's own: docs/own-suite.md). Everything else is reached through pytest options (`pytest --help`, group
"ecdysis").
"""

from pytest_ecdysis.core.errors import (
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
from pytest_ecdysis.core.hookspecs import hookimpl
from pytest_ecdysis.core.records import (
    FailureRecord,
    ModificationSpec,
    PatternGroup,
    RoundResult,
    ToolCallRecord,
    TrialResult,
)

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
    "get_state",
    "hookimpl",
    "record_trial",
]


def record_trial(item, result) -> None:  # noqa: ANN001 - thin re-export
    """Attach a suite's `TrialResult` to the running pytest item (see `plugin.record_trial`)."""
    from pytest_ecdysis.plugin import record_trial as _record

    _record(item, result)


def get_state(config):  # noqa: ANN001, ANN201 - thin re-export
    """The session's resolved options (`.cfg`: `trials`, `tasks`, `split`, `threshold`, `model`, ...), harness
    and run id, from a pytest `Config` (see `plugin.get_state`); a suite's `pytest_generate_tests` reads
    `--ecdysis-trials` and `--ecdysis-tasks` here. Tests get the same object as the `ecdysis` fixture."""
    from pytest_ecdysis.plugin import get_state as _get

    return _get(config)
