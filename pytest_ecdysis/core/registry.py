"""Lookup of what suites register through the `pytest_ecdysis` entry-point group (see `hookspecs`).

Registries look things up by name and reject duplicates with a clear error. Loading is lazy: nothing
is imported until a name is asked for, so workers that do not need the simulated model's knowledge
never import it.
"""

from __future__ import annotations

import functools
import importlib.metadata
from typing import Any

import pluggy

from pytest_ecdysis.core import hookspecs
from pytest_ecdysis.core.errors import UsageError

ENTRY_POINT_GROUP = "pytest_ecdysis"


@functools.lru_cache(maxsize=1)
def plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("ecdysis")
    pm.add_hookspecs(hookspecs)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            plugin = ep.load()
        except Exception as exc:
            raise UsageError(
                f"the suite plugin {ep.name!r} ({ep.value}) failed to import: {type(exc).__name__}: {exc}; "
                "reinstall it (pip install -e '.[tau2]') or uninstall the distribution that declares it"
            ) from exc
        if pm.get_plugin(ep.name) is None:
            pm.register(plugin, name=ep.name)
    return pm


def _merged(results: list[dict[str, Any] | None], what: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for result in results:
        for name, value in (result or {}).items():
            if name in merged and merged[name] != value:
                raise UsageError(f"two suites register the {what} {name!r}; uninstall one of them")
            merged[name] = value
    return merged


def registered_harnesses() -> dict[str, str]:
    """Named harnesses of every installed suite: ``{name: directory}``."""
    return _merged(plugin_manager().hook.ecdysis_harnesses(), "harness")


def sim_knowledge() -> dict[str, Any]:
    """The simulated model's knowledge of every installed suite: ``{suite: provider}``."""
    return _merged(plugin_manager().hook.ecdysis_sim_knowledge(), "suite")


def registered_templates() -> dict[str, str]:
    """Repository templates of every installed suite (`ecdysis init`): ``{name: directory}``."""
    return _merged(plugin_manager().hook.ecdysis_templates(), "template")


def warm_services(directory: str) -> list[Any]:
    """Start every installed suite's warm services (`hookspecs.ecdysis_warm_services`): the `Popen`s."""
    return [
        p
        for started in plugin_manager().hook.ecdysis_warm_services(directory=directory)
        for p in started or ()
    ]


def registered_strategies() -> dict[str, Any]:
    return _merged(plugin_manager().hook.ecdysis_strategies(), "strategy")


class _PytestPlugin:
    """A pytest plugin (a `conftest.py`) that defines `ecdysis_strategies()`, as an ecdysis hook implementation."""

    def __init__(self, function: Any) -> None:
        self.function = function

    @hookspecs.hookimpl
    def ecdysis_strategies(self) -> dict[str, Any]:
        return self.function()


def register_pytest_plugins(pluginmanager: Any) -> None:
    """Let pytest plugins (a `conftest.py`) register strategies: each that defines a function
    `ecdysis_strategies()` returning `{"name": factory}` joins the registry (once per plugin object)."""
    found = [
        (p, p.ecdysis_strategies)
        for p in pluginmanager.get_plugins()
        if callable(getattr(p, "ecdysis_strategies", None))
    ]
    if not found:
        return  # the usual case: no need to load the suites' entry points here
    pm = plugin_manager()
    for plugin, function in found:
        name = f"pytest-plugin-{id(plugin)}"
        if pm.get_plugin(name) is None and not pm.is_registered(plugin):
            pm.register(_PytestPlugin(function), name=name)


def task_ids(split: str) -> dict[str, list[str]]:
    """Task ids in `split` of every installed suite that tells: ``{suite: [task_id, ...]}``."""
    return _merged(plugin_manager().hook.ecdysis_task_ids(split=split), "suite")


def case_task(nodeid: str) -> tuple[str, str | None] | None:
    """`(suite, task_id or None)` of a collected node id, or None when no installed suite claims it."""
    return plugin_manager().hook.ecdysis_case_task(nodeid=nodeid)


def answer_keys() -> list[str]:
    """Paths every installed suite declares as its answer key (`hookspecs.ecdysis_answer_keys`), deduplicated."""
    return list(
        dict.fromkeys(p for result in plugin_manager().hook.ecdysis_answer_keys() for p in result or ())
    )


def preflight_request() -> dict[str, Any] | None:
    """The installed suite's pre-flight request shape (`hookspecs.ecdysis_preflight_request`), or None when
    no suite gives one."""
    result: dict[str, Any] | None = plugin_manager().hook.ecdysis_preflight_request()
    return result


#: The strategies this package ships (`pytest_ecdysis/diagnose/strategies/`, one module each).
BUILTIN_STRATEGIES = ("ecdysis", "ecdysis-nofdcr", "self-evolution", "harnessfix", "self-harness")


def available_strategies() -> tuple[str, ...]:
    return BUILTIN_STRATEGIES + tuple(n for n in registered_strategies() if n not in BUILTIN_STRATEGIES)
