"""Paired re-scoring: the incumbent is scored beside each candidate, in the same session.

A candidate is compared with a fresh run of the incumbent started together with its validation sub-run
(two `pytest` subprocesses started at the same moment, same suite arguments, tasks and trials, running
side by side, so endpoint drift hits both alike), not with a number cached from an earlier run: a noisy
model's incumbent score is otherwise its luckiest run, and that winner's curse carries into every later
round. ini `ecdysis_rescore`:

- `auto` (the default) and `always`: re-score, also when the simulated model's nonce is fixed (ini
  `ecdysis_sim_nonce` or `ECDYSIS_SIM_NONCE`): a fixed nonce makes a run repeatable, it does not change the
  rule (the re-run and every later trial are drawn from that nonce; more trials of a task take later trial
  indices, `--ecdysis-trial-offset`, so they are fresh draws);
- `never`: compare with the incumbent's earlier run (the paper's loop; a shortcut the verdict names).

Either way the round records under `incumbent_run` which run it compared with and why (`rescored`,
`why`, `run_path`, `score`, `cached_score`). The re-run lives in `<round or step dir>/incumbent/`
(`pytest.log`, the sub-run `<run-id>i/`). A re-run that fails (an endpoint down) falls back to the
earlier run, said in `why`. Only the controller runs this; harness code is imported only in sub-runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.config import EcdysisConfig, is_sim_model
from pytest_ecdysis.endpoint.response_cache import ENV_DIR
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.validate.results import infra_drift
from pytest_ecdysis.validate.setup import workers_each
from pytest_ecdysis.validate.subrun import BrokenCandidate, SubRun

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext

#: ini `ecdysis_rescore` values.
RESCORE = ("auto", "always", "never")


def deterministic(cfg: EcdysisConfig, env: Mapping[str, str]) -> str | None:
    """Why a rerun of one harness at the same trial indices would be byte-identical (None when it would not,
    or is not known to). Said, never a reason to skip a trial: later trials take later indices."""
    nonce = getattr(cfg, "sim_nonce", None) or env.get("ECDYSIS_SIM_NONCE")
    if nonce and is_sim_model(cfg.model) and is_sim_model(cfg.user_model):
        return f"simulated model with a fixed nonce ({nonce!r}): a rerun is byte-identical"
    return None


def offset_override(cfg: EcdysisConfig, index: int) -> dict[str, str | None]:
    """The sub-run override that starts more trials of a task at trial index `index`
    (`--ecdysis-trial-offset`), when a fixed simulated-model nonce keys its draws on the index (else {}:
    without a fixed nonce each sub-run's run id is its own nonce, and a real model's reruns vary, so
    indices from 0 are fresh trials already)."""
    return {"--ecdysis-trial-offset": str(index)} if deterministic(cfg, os.environ) else {}


def rescore_plan(cfg: EcdysisConfig, env: Mapping[str, str]) -> tuple[bool, str]:
    """(re-score the incumbent beside the candidate?, why) under `cfg.rescore`."""
    mode = getattr(cfg, "rescore", "auto")
    if mode == "never":
        return False, "ecdysis_rescore = never: compared with the incumbent's earlier run"
    why = deterministic(cfg, env)
    return True, "re-scored beside the candidate, in the same session" + (
        f" ({why.split(':')[0]}: both runs drawn from it)" if why else ""
    )


def score_pair(
    ev: RoundContext,
    candidate_dir: Path,
    rdir: Path,
    run_id: str,
    base: Mapping[str, Any],
    files: dict[str, bytes | None] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[SubRun | BrokenCandidate, dict[str, Any]]:
    """Validate the candidate (`files`, else the files under `candidate_dir`; `env` added to its sub-run's
    environment only) and, per `rescore_plan`, re-run the incumbent at `base["commit"]` together with it.

    Returns (the candidate's sub-run, or the `BrokenCandidate` it raised; the `incumbent_run` entry).
    Ctrl-C stops both sub-runs and propagates.
    """
    rescore, why = rescore_plan(ev.cfg, os.environ)
    earlier = {
        "rescored": False,
        "why": why,
        "run_path": base["run_path"],
        "run_id": None,
        "score": base["score"],
        "pass_hat_k": base.get("pass_hat_k"),
        "cached_score": base["score"],
    }
    if not rescore:
        return _attempt(lambda: ev.subrun(candidate_dir, rdir, run_id, files=files, env=env)), earlier
    worktree = gitworktree.add_worktree(ev.harness_dir, base["commit"])
    try:
        inc_id = f"{run_id}i"
        candidate, incumbent = together(
            ev,
            [
                Job(candidate_dir, rdir, run_id, files, env),
                Job(worktree.harness_dir, rdir / "incumbent", inc_id, label=INCUMBENT_LABEL),
            ],
        )
    finally:
        worktree.remove()
    if isinstance(incumbent, BrokenCandidate):
        return candidate, {
            **earlier,
            "why": f"the incumbent's re-run failed ({incumbent}); compared with its earlier run",
        }
    return candidate, {
        "rescored": True,
        "why": why,
        "run_path": str(incumbent.run_path),
        "run_id": inc_id,
        "score": incumbent.summary.get("suite_score"),
        "pass_hat_k": incumbent.summary.get("pass_hat_k"),
        "cached_score": base["score"],
        "wall_s": round(incumbent.wall_s, 2),
    }


@dataclass(frozen=True)
class Job:
    """One sub-run of `together`: the arguments of `Evolution.subrun`."""

    harness_dir: Path
    run_dir: Path
    run_id: str
    files: dict[str, bytes | None] | None = None
    env: dict[str, str] | None = None
    overrides: dict[str, str | None] | None = None
    label: str | None = None  # its progress lines' label (default: the stage line said last)


#: the progress label of the incumbent's re-run beside a candidate (the candidate's lines keep the stage's).
INCUMBENT_LABEL = "re-running the incumbent (paired with the candidate)"


def together(ev: RoundContext, jobs: list[Job]) -> list[SubRun | BrokenCandidate]:
    """Start one sub-run per job at once and wait for all of them, sharing the session's xdist workers
    among them (`validate.setup.workers_each`: with `-n 2`, two sub-runs of one process each).

    A sub-run that raises `BrokenCandidate` gives it in its place. Ctrl-C (or any other exception) stops
    every sub-run's process group and propagates.
    """
    procs: list[subprocess.Popen] = []
    if (each := workers_each(ev.base_args, len(jobs))) is not None:  # the session's workers, shared
        jobs = [
            replace(j, overrides={**(j.overrides or {}), "-n": each, "--numprocesses": None}) for j in jobs
        ]
    pool = ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="ecdysis-subrun")
    futures = [
        pool.submit(
            _attempt,
            lambda j=job: ev.subrun(
                j.harness_dir,
                j.run_dir,
                j.run_id,
                files=j.files,
                on_start=procs.append,
                env=j.env,
                overrides=j.overrides,
                label=j.label,
            ),
        )
        for job in jobs
    ]
    try:
        return [f.result() for f in futures]
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def paired_trials(
    ev: RoundContext,
    candidate_dir: Path,
    base: Mapping[str, Any],
    tasks: list[str],
    *,
    trials: int,
    offset: int,
    where: Path,
    run_ids: tuple[str, str],
    label: str,
) -> list[SubRun | BrokenCandidate]:
    """`trials` more trials of each of `tasks` (`suite/id` keys) per harness, at trial index `offset` onwards
    (`offset_override`), fresh (no response cache: it would replay earlier trials), side by side: the
    candidate (`candidate_dir`, the snapshot's bytes) under `where` and the incumbent (`base["commit"]`,
    checked out for the call) under `where/incumbent`, with sub-run ids `run_ids` (candidate, incumbent)
    and `label` naming the incumbent's run. Returns `together`'s [candidate's, incumbent's]."""
    overrides: dict[str, str | None] = {
        "--ecdysis-tasks": ",".join(sorted({key.split("/", 1)[-1] for key in tasks})),
        "--ecdysis-trials": str(trials),
        **offset_override(ev.cfg, offset),
    }
    no_cache = {ENV_DIR: ""}
    worktree = gitworktree.add_worktree(ev.harness_dir, base["commit"])
    try:
        return together(
            ev,
            [
                Job(
                    candidate_dir,
                    where,
                    run_ids[0],
                    ev.snapshot.files if ev.snapshot else None,
                    no_cache,
                    overrides,
                ),
                Job(
                    worktree.harness_dir,
                    where / "incumbent",
                    run_ids[1],
                    None,
                    no_cache,
                    overrides,
                    label=f"{label}: {INCUMBENT_LABEL}",
                ),
            ],
        )
    finally:
        worktree.remove()


def by_trial(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's trials in trial-index order (`trials.jsonl` is in completion order, which may follow the
    outcome: pairing by it would not be blind to the rewards)."""
    return sorted(trials, key=lambda t: int(t.get("trial") or 0))


def _attempt(run: Any) -> SubRun | BrokenCandidate:
    try:
        return run()
    except BrokenCandidate as exc:
        return exc


def pair_outcome(
    doc: dict[str, Any], cand: SubRun | BrokenCandidate, inc: SubRun | BrokenCandidate, what: str
) -> dict[str, Any]:
    """`doc` completed with the two sub-runs of a pair started by `together` (extra trials, a confirmation
    look): `runs` (`{candidate, incumbent}`: `run_path`, `score`), or `problem` when either broke or the
    runs drifted in infrastructure errors (`what` names the runs in that message)."""
    broken = [
        f"{who}: {run}"
        for who, run in (("candidate", cand), ("incumbent", inc))
        if isinstance(run, BrokenCandidate)
    ]
    if broken:
        return {**doc, "problem": "; ".join(broken)}
    assert not isinstance(cand, BrokenCandidate) and not isinstance(inc, BrokenCandidate)
    doc["runs"] = {
        who: {"run_path": str(run.run_path), "score": run.summary.get("suite_score")}
        for who, run in (("candidate", cand), ("incumbent", inc))
    }
    drift = infra_drift(inc.summary, cand.summary) or (
        "infrastructure errors"
        if (inc.summary.get("n_infra_errors") or cand.summary.get("n_infra_errors"))
        else ""
    )
    if drift:
        doc["problem"] = f"{drift} in {what}"
    return doc
