"""Hook specifications through which task suites register what they offer.

A suite package exposes a module in the `pytest_ecdysis` entry-point group implementing some of these
hooks (the τ² suite: `pytest_ecdysis_tau2.registration`). The plugin package never imports a suite directly.
"""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("ecdysis")
hookimpl = pluggy.HookimplMarker("ecdysis")


@hookspec
def ecdysis_harnesses() -> dict[str, str]:
    """Named harnesses this suite offers: ``{"direct": "/abs/path/to/harness_dir"}``.

    `--ecdysis-harness NAME` resolves a name that is not an existing directory through these.
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


@hookspec
def ecdysis_sim_knowledge() -> dict[str, Any]:
    """What the simulated model knows of this suite's tasks: ``{"tau2-airline": provider, ...}``.

    A provider implements `pytest_ecdysis.sim.knowledge.SimKnowledge` (gold plans, user scenarios).
    Called lazily, only when a simulated server starts.
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


@hookspec
def ecdysis_strategies() -> dict[str, Any]:
    """Extra evolution strategies: ``{"name": factory}`` (see `pytest_ecdysis.diagnose.strategies`)."""
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


@hookspec
def ecdysis_task_ids(split: str) -> dict[str, list[str]]:
    """Task ids of this suite's tasks in `split` ('train', 'test' or 'all'): ``{"tau2-airline": ["0", ...]}``.

    Only read to say where a `--ecdysis-tasks` id that selected nothing lives (another split or suite).
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


@hookspec(firstresult=True)
def ecdysis_case_task(nodeid: str) -> tuple[str, str | None] | None:
    """`(suite, task_id)` when `nodeid` is a trial case of this suite, `(suite, None)` when it is this suite's
    test that `--ecdysis-tasks` left without a case (pytest's `[NOTSET]` item), None when it is not this suite's.

    Lets the controller check the task selection and a gate's baseline right after collection, before any
    trial runs (under xdist it sees node ids only). Must be cheap: no imports of the benchmark.
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


@hookspec
def ecdysis_templates() -> dict[str, str]:
    """Repository templates this suite offers to `ecdysis init --suite NAME`: ``{"tau2": "/abs/path/to/dir"}``.

    The directory's files are laid over the plugin's generic template (`pytest_ecdysis/ci/repo_template/`:
    pytest.ini, the workflows, .gitignore): typically the test module that runs the suite with the new
    repository's harness. Same naming as the generic template: a `.tmpl` suffix is dropped, a path part
    `dot_x` becomes `.x`.
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


@hookspec
def ecdysis_answer_keys() -> list[str]:
    """Absolute paths (files or directories) of what scores a candidate and what no candidate may read: gold
    tasks, expected actions, evaluation criteria (τ²: each domain's `tasks*.json` and `split_tasks.json`).

    Covered (an empty directory, `/dev/null` for a file) in the sandbox of every untrusted process: the
    harness's processes and the editor's command (`validate.sandbox.ENV_HIDE`). Must be cheap: no import of
    the benchmark itself.
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


@hookspec
def ecdysis_warm_services(directory: str) -> list[Any]:
    """Trusted processes this suite keeps warm for a whole session (its sub-runs included), started now.

    Called once by a top session's controller, and only when the sandbox is on (`validate.warm`):
    `directory` is a fresh private (`0700`) directory for the processes' sockets, hidden from harness
    processes and the editor; workers and sub-runs find it in `ECDYSIS_WARM_DIR`. Returns the started
    `subprocess.Popen` objects, each with `stdin=PIPE`: the process must exit when its standard input
    reaches end of file (the controller closed it or died). No harness code may run in them.
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


@hookspec(firstresult=True)
def ecdysis_preflight_request() -> dict[str, Any] | None:
    """The request shape of this suite's trials for the endpoint's pre-flight (`endpoint.preflight`):
    ``{"tools": [one OpenAI function tool, as the suite sends its tools], "tool_choice": "auto"}``, optionally
    ``"messages": [{"role": "user", "content": "..."}]`` (a request that makes the tool call likely).

    A server that refuses the suite's tools then refuses the pre-flight, before any trial. The first suite
    that returns a shape wins; with none, the pre-flight sends its own (`endpoint.preflight.TOOL`). Called
    once per session on the controller, before any trial: must be cheap (no import of the benchmark).
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this
