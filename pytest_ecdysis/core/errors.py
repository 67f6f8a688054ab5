"""One error hierarchy for pytest-ecdysis. Every error says what was wrong and what to do.

    EcdysisError
    ├── UsageError            bad option, ini value, missing dependency, failed pre-flight check
    │   │                     (raised at configure time; pytest shows it as a usage error, exit 4)
    │   └── ActionInputError  a GitHub Action input that cannot work (one line naming the input to set)
    ├── InfrastructureError   endpoint down, timeout, rate limit after retries: never a failure record
    │   ├── TimeBudgetExceeded   the trial's total time budget ran out
    │   └── UnusableReplyError   HTTP 200 whose body is not a chat completion (not JSON, no choices/message)
    ├── ContextOverflowError  the server said a request does not fit the model's context window
    ├── EndpointFormatError   the endpoint's reply cannot be used (ends a trial as `endpoint_format_error`)
    ├── SpecError             a modification spec that does not validate, or names files outside the harness
    ├── EditorError           an editor failed, timed out, or wrote outside the harness
    ├── GitError              a git operation the evolution loop needs failed
    ├── RunDirError           a run directory is missing, unreadable, or of another suite
    └── IntegrityError        a file a candidate must not change did change, or a checkpoint is not what
                              the controller wrote (the evolution stops)

This module must not import anything heavy: it is imported by workers, the scorer and the CLI.
"""

from __future__ import annotations


class EcdysisError(Exception):
    """Base of every error raised on purpose by pytest-ecdysis."""


class UsageError(EcdysisError):
    """A wrong option, ini value or environment; the message names the fix."""


class ActionInputError(UsageError):
    """An input of the GitHub Action (`action.yml`) that cannot work: the message names the input to set."""


class InfrastructureError(EcdysisError):
    """The model endpoint failed for reasons that are not the agent's (down, timeout, 429/5xx after retries)."""

    termination_reason = "infrastructure_error"


class TimeBudgetExceeded(InfrastructureError):
    """A trial used up its total wall-clock budget (seconds) across all calls and retries."""

    termination_reason = "time_budget_exceeded"


class UnusableReplyError(InfrastructureError):
    """The endpoint answered HTTP 200 with a body that is not a chat completion (not JSON, truncated JSON,
    no `choices[0].message`): a proxy's HTML page, a wrong path. Raised by `deadline.DeadlineTransport` for
    every role (agent, user simulator, FDCR roles, editor); the message names the URL and the first 200
    characters that came back. Never the agent's failure."""


class ContextOverflowError(EcdysisError):
    """The endpoint refused a request because it does not fit the model's context window (the server's
    own words are in the message). Never retried; not infrastructure: the prompt is too long for the model."""


class EndpointFormatError(EcdysisError):
    """The endpoint answered, but its reply cannot be turned into an agent message."""

    termination_reason = "endpoint_format_error"


class SpecError(EcdysisError):
    """A modification spec that does not validate, or that names files outside the harness."""


class EditorError(EcdysisError):
    """An editor failed, timed out, produced no change, or wrote outside the harness directory."""


class GitError(EcdysisError):
    """A git operation of the evolution loop failed; the user's checkout is left as it was."""


class RunDirError(EcdysisError):
    """A run directory that is missing, unreadable, not writable, or of a different suite."""


class IntegrityError(EcdysisError):
    """A protected file (τ², the plugin, the suites, the user's checkout) changed during a validation, or a
    checkpoint read back is not what the controller wrote. The evolution stops; the message names the file."""


def shown(items: list[str], limit: int = 5, sep: str = ", ", max_chars: int = 240) -> str:
    """The first `limit` of `items` joined by `sep`, then "and N more" when some were left off ("none" when
    empty), so a message never passes a cut list off as the whole one. At most about `max_chars` characters
    of items: fewer are shown when they are long (τ² telecom ids run to 70 characters, a confirmation look's
    line printed 1,200), and an item longer than that alone is cut with "…"."""
    out: list[str] = []
    used = 0
    for item in items[:limit]:
        if out and used + len(sep) + len(item) > max_chars:
            break
        out.append(item if len(item) <= max_chars else item[: max_chars - 1] + "…")
        used += len(out[-1]) + (len(sep) if len(out) > 1 else 0)
    more = len(items) - len(out)
    return (sep.join(out) or "none") + (f" and {more} more" if more > 0 else "")
