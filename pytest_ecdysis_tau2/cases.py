"""The pytest layer of the τ² suites: parametrisation, the trial fixture, the reward check.

Each task x trial is one case with id `<task_id>-t<trial>` (`test_airline[3-t0]`), marked `ecdysis_trial`,
parametrised from the session's resolved options (`--ecdysis-split`, `--ecdysis-tasks`, `--ecdysis-trials`).
The trial runs in the `tau2_trial` fixture (setup phase), so an infrastructure error ends the case as a
pytest *error*; the test body then checks `reward >= λ` and fails with the components and termination
reason. `record_trial` is called in every outcome, before the phase ends.
"""

from __future__ import annotations

import pytest

from pytest_ecdysis import get_state, record_trial
from pytest_ecdysis.core import safetext
from pytest_ecdysis.core.config import is_sim_model
from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.records import TrialResult

from .harness_process.agent_process import check_harness, start_early, warm_up_soon
from .tasks import suite

FIXTURE = "tau2_trial"


def generate_trials(metafunc: pytest.Metafunc, domain: str) -> None:
    """Parametrise the `tau2_trial` fixture with every (task, trial) of the selected split.

    A `--ecdysis-tasks` id of another domain or split selects nothing here; the controller reports an id
    that selects no case of any collected suite as a usage error right after collection
    (`pytest_ecdysis.run.selection`, through `registration.ecdysis_case_task`), before any trial runs.
    """
    if FIXTURE not in metafunc.fixturenames:
        return
    state = get_state(metafunc.config)
    cfg = state.cfg
    wanted = None if cfg.tasks is None else set(cfg.tasks)
    start_early(state.harness_dir)  # the harness's fork server imports τ² while this process does
    try:
        task_ids = [t for t in suite.split_ids(domain, cfg.split) if wanted is None or t in wanted]
        if task_ids:
            # τ²'s data read once while the fork server starts: the first trials only copy it
            suite.preload(domain)
            # A harness that does not import or provides no agent is one clear error before any trial,
            # not a failed trial per case (which diagnosis would then try to "repair"). Imported in the
            # harness's own process (agent_process), never in this trusted one.
            problem = check_harness(state.harness_dir)
            if problem:
                raise UsageError(problem)
            warm_up_soon(state.harness_dir, domain)  # the server loads the domain's tools meanwhile
    except UsageError as exc:
        raise pytest.Collector.CollectError(f"ecdysis usage error: {exc}") from None
    params = [
        pytest.param((domain, task_id, k), id=f"{task_id}-t{k}", marks=pytest.mark.ecdysis_trial)
        for task_id in task_ids
        for k in range(cfg.trial_offset, cfg.trial_offset + cfg.trials)  # `--ecdysis-trial-offset`
    ]
    metafunc.parametrize(FIXTURE, params, indirect=True)


@pytest.fixture
def tau2_trial(request: pytest.FixtureRequest) -> TrialResult:
    """Run the trial of this case (setup phase) and record its TrialResult on the item."""
    from .trial.endpoint import EndpointSettings
    from .trial.runner import TrialSpec, run_trial

    state = get_state(request.config)
    cfg = state.cfg
    domain, task_id, trial = request.param

    def spec_of(param: tuple[str, str, int]) -> TrialSpec:
        return TrialSpec(
            domain=param[0],
            task_id=param[1],
            trial=param[2],
            run_id=state.run_id,
            model=cfg.model,
            user_model=cfg.user_model,
            harness_dir=state.harness_dir,
            harness_id=state.harness_id,
            base_url=cfg.base_url,
            sim_url=state.sim_url,
        )

    spec = spec_of(request.param)

    def run(param: tuple[str, str, int]) -> TrialResult:
        stalled = not_started(cfg)
        if stalled is not None:  # the endpoint throttled every call for longer than a trial's budget
            return TrialResult(
                suite=suite.suite_name(param[0]),
                task_id=param[1],
                trial=param[2],
                termination_reason="infrastructure_error",
                harness_id=state.harness_id,
                model=cfg.model,
                error=f"trial not started: {stalled}",
            )
        return run_trial(spec_of(param), EndpointSettings.from_config(cfg))

    try:
        if cfg.concurrency > 1:  # this trial and the next C - 1 of the worker's share run in threads
            from .trial.trial_pool import pool_for

            result = pool_for(request, FIXTURE, run, cfg.concurrency).result(request.param)
        else:
            result = run(request.param)
    except Exception as exc:  # a defect of the suite or of τ² itself: never the agent's, never evidence
        result = TrialResult(
            suite=spec.suite,
            task_id=task_id,
            trial=trial,
            termination_reason="infrastructure_error",
            harness_id=state.harness_id,
            model=cfg.model,
            error=f"the τ² suite failed to run the trial: {type(exc).__name__}: {exc}",
        )
    result.nodeid = request.node.nodeid
    record_trial(request.node, result)
    if is_sim_model(cfg.model) and state.sim_url:
        record_ground_truth(state, spec.header, result, cfg.threshold)
    if result.is_infra_error:
        # the endpoint's text may carry ANSI escapes or NUL bytes: pytest prints this line as is
        pytest.fail(safetext.terminal(f"{result.termination_reason}: {result.error}"), pytrace=False)
    return result


def not_started(cfg: object) -> str | None:
    """Before a trial starts under the session's limiter: its stall line when the endpoint throttled every
    call for longer than a trial's budget (no trial is started then), else None once a call could start
    (a trial waits at most a minute for a free slot of the limit; its calls queue after that)."""
    from pytest_ecdysis.endpoint.limiter_service import current

    limiter = current()
    if limiter is None:
        return None
    if not limiter.wait_room(60.0):
        return str(limiter.status().get("stalled") or "the session's limiter stalled")
    return None


def check_trial(result: TrialResult, threshold: float) -> None:
    """Fail the case when reward < λ, with components and termination reason in the message."""
    if result.reward is None or result.reward < threshold:
        parts = ", ".join(f"{k}={v:g}" for k, v in sorted(result.components.items())) or "none scored"
        detail = f"; {result.error.splitlines()[0]}" if result.error else ""
        pytest.fail(
            safetext.terminal(
                f"reward {result.reward} < λ={threshold:g} on {result.suite} task {result.task_id} "
                f"(trial {result.trial}): components {parts}; termination {result.termination_reason}{detail}"
            ),
            pytrace=False,
        )


def record_ground_truth(state, header: str, result: TrialResult, threshold: float) -> None:
    """Fetch the simulated model's ground truth of this trial and append it to the run directory.

    The tool calls τ² executed (this trial's trajectory) go with the request, so the server can tell a
    bent argument the harness repaired or refused in code from one the environment received
    (`pytest_ecdysis.sim.truth.repairs`). A failed trial's cause is recomputed with the evaluator's failing
    checks (`pytest_ecdysis.sim.truth.causes.trial_cause`): the first uncured root one of them points at."""
    try:
        from pytest_ecdysis.sim.client import fetch_ground_truth, write_ground_truth
        from pytest_ecdysis.sim.truth.repairs import executed_calls
    except ImportError:  # the simulated model is not installed yet
        return
    from pytest_ecdysis.core.errors import InfrastructureError

    try:
        line = fetch_ground_truth(state.sim_url, header, executed=executed_calls(result.messages or []))
    except (InfrastructureError, ValueError) as exc:
        result.harness_notes.append({"kind": "ground_truth_unavailable", "detail": str(exc), "step": None})
        return
    line["failed"] = bool(result.reward is None or result.reward < threshold)
    if line["failed"] and isinstance(line.get("quirks"), list):
        # the cause the evaluator's failing checks point at (a forgotten figure, not a write the db passed)
        from pytest_ecdysis.sim.truth.causes import failing_checks, trial_cause

        failing = failing_checks(result.components)
        line["failing_checks"] = None if failing is None else sorted(failing)
        line["cause"], line["causes"] = trial_cause(
            line["quirks"], closed=bool(line.get("closed", True)), failing=failing
        )
    line.setdefault("task_id", result.task_id)
    line.setdefault("trial", result.trial)
    write_ground_truth(state.run_path, line)
