"""The budget check before any trial: `--ecdysis-max-cost` / `--ecdysis-max-tokens` smaller than one starting run
is a usage error once the cases are collected (`evolve/budget.check_start`, from an earlier run's tokens per
trial; without an earlier run of the same model the budget is checked after the starting run instead).

Registered by `plugin.pytest_configure` on the controller of an evolution with a budget; under xdist the
controller learns the cases from the first worker's collection.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_ecdysis.core.errors import EcdysisError
from pytest_ecdysis.run.state import EcdysisState


class StartBudgetCheck:
    """A pytest plugin: checks the budgets against one starting run of the collected cases, once."""

    def __init__(self, state: EcdysisState) -> None:
        self.state = state
        self.done = False

    def _check(self, n_cases: int) -> None:
        if self.done:
            return
        self.done = True
        from pytest_ecdysis.evolve.budget import check_start

        try:
            check_start(self.state.cfg, n_cases, self.state.cfg.run_dir)
        except EcdysisError as exc:
            raise pytest.UsageError(str(exc)) from None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        items = [i for i in session.items if i.get_closest_marker("ecdysis_trial")]
        if items:
            self._check(len(items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        from pytest_ecdysis.run.selection import classify

        self._check(sum(map(len, classify(ids).cases.values())) or len(ids))


def register(config: Any, state: EcdysisState) -> None:
    """Register the check when this session evolves with a budget; `--ecdysis-max-cost` with a model that has
    no price is a usage error here (`evolve/budget.check_priced`)."""
    cfg = state.cfg
    if cfg.evolve and (cfg.max_tokens is not None or cfg.max_cost_usd is not None):
        from pytest_ecdysis.evolve.budget import check_priced

        try:
            check_priced(cfg)
        except EcdysisError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.pluginmanager.register(StartBudgetCheck(state), "ecdysis-start-budget-check")
