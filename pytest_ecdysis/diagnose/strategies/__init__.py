"""Evolution strategies: how a round turns evidence into edits (docs/diagnosis.md).

One module per strategy; built-ins are listed here, suites may add more through the
`ecdysis_strategies` hook.
"""

from __future__ import annotations

from pytest_ecdysis.core.registry import BUILTIN_STRATEGIES, available_strategies

__all__ = ["BUILTIN_STRATEGIES", "available_strategies"]
