"""Evolution strategies: how a round turns evidence into edits (docs/diagnosis.md).

One module per strategy; built-ins are listed here, suites may add more through the
`ecdysis_strategies` hook.
"""

from __future__ import annotations

BUILTIN_STRATEGIES = ("ecdysis", "ecdysis-nofdcr", "self-evolution", "harnessfix", "self-harness")


def available_strategies() -> tuple[str, ...]:
    from ..registry import registered_strategies

    return BUILTIN_STRATEGIES + tuple(n for n in registered_strategies() if n not in BUILTIN_STRATEGIES)
