"""The strategy protocol: one required method turning a round's evidence into a diagnosis.

    class Strategy(Protocol):
        name: str
        instance_level: bool      # True: one spec per failure, patched one by one
        def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis: ...

`Diagnosis.spec` is the one spec of an aggregated strategy; an instance-level strategy returns its specs
in `Diagnosis.specs` (in patch order) with `instance_level=True`. Built-in strategies are modules of this
package; suites add more through the `ecdysis_strategies` hook (`{"name": factory}`, a factory returning
a `Strategy`). This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.records import FailureRecord, PatternGroup

if TYPE_CHECKING:
    from pytest_ecdysis.diagnose.transcript import Diagnosis
    from pytest_ecdysis.endpoint.role_client import RoleClient

#: Built-in strategy name -> module of this package.
MODULES = {
    "ecdysis": "ecdysis",
    "ecdysis-nofdcr": "ecdysis_nofdcr",
    "self-evolution": "self_evolution",
    "harnessfix": "harnessfix",
    "self-harness": "self_harness",
}


@dataclass
class RoundInput:
    """What a strategy gets for one round (see `diagnose.round.diagnose` for each field's meaning)."""

    records: list[FailureRecord]
    groups: list[PatternGroup]
    harness_dir: Path | None
    history: list[Any] = field(default_factory=list)
    solved_tasks: Any = ()
    cfg: Any = None
    round_dir: Path | None = None
    #: the incumbent run's weak passes (`summary.json` `weak_passes`: `{"task", "trial", "reasons"}`)
    weak_passes: list[dict[str, Any]] = field(default_factory=list)


class Strategy(Protocol):
    name: str
    instance_level: bool

    def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis:
        """Turn a round's evidence into a `Diagnosis` (a spec, or specs for instance-level strategies)."""
        ...


def get_strategy(name: str) -> Strategy:
    """The strategy called `name`: a built-in module's `STRATEGY`, else one a suite registered.

    Raises:
        UsageError: no such strategy (the message lists the available ones).
    """
    if name in MODULES:
        return importlib.import_module(f"{__package__}.{MODULES[name]}").STRATEGY
    from pytest_ecdysis.core.registry import registered_strategies

    registered: Mapping[str, Any] = registered_strategies()
    if name in registered:
        factory = registered[name]
        # a factory (a class or a function) is called; a ready strategy object is used as it is
        return factory() if isinstance(factory, type) or not hasattr(factory, "propose") else factory
    from pytest_ecdysis.diagnose.strategies import available_strategies

    raise UsageError(f"unknown strategy {name!r}; available: {', '.join(available_strategies())}")
