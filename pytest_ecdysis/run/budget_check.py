"""The budget checks before any trial: `--ecdysis-max-cost` / `--ecdysis-max-tokens` smaller than one starting run
is a usage error once the cases are collected (`evolve/budget.check_start`, from an earlier run's tokens per
trial; without an earlier run of the same model the budget is checked after the starting run instead), and
so is an adaptive acceptance budget that cannot detect a gain below +30 points (`evolve/looks.check_before_trials`).

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
        from pytest_ecdysis.evolve.looks import check_before_trials

        cfg = self.state.cfg
        try:
            if cfg.max_tokens is not None or cfg.max_cost_usd is not None:
                check_start(cfg, n_cases, cfg.run_dir)
            check_before_trials(cfg, n_cases // max(1, cfg.trials))
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
    capped = cfg.max_tokens is not None or cfg.max_cost_usd is not None
    if cfg.evolve and capped:
        from pytest_ecdysis.evolve.budget import check_priced

        try:
            check_priced(cfg)
        except EcdysisError as exc:
            raise pytest.UsageError(str(exc)) from None
    if cfg.evolve and (capped or cfg.accept == "adaptive"):
        config.pluginmanager.register(StartBudgetCheck(state), "ecdysis-start-budget-check")
