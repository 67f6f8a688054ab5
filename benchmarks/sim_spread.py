"""Run-to-run spread of the simulated model, in process: `bench_sim_calibration.py --spread` uses it.

For each profile and each `noise` share tried, one simulated server (the profile copied into a temporary
`ECDYSIS_SIM_PROFILES` directory with that share) and K run ids, each its own nonce (none fixed); every
run plays the same τ² tasks at one trial with the same harness through the suite's own `run_trial` (real
τ² environment, orchestrator and scorer; the harness in this process, `ECDYSIS_AGENT_PROCESS=0`, which
changes no draw). Printed per (profile, noise): the suite score of every nonce, its standard deviation
and range, and how many tasks changed outcome across nonces. Runs are split over `--jobs` processes.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _profile_dir(profile: str, noise: float) -> str:
    from pytest_ecdysis.sim.profiles import PROFILE_DIR

    data = json.loads((PROFILE_DIR / f"{profile}.json").read_text())
    data["noise"] = noise
    directory = tempfile.mkdtemp(prefix="ecdysis-spread-")
    (Path(directory) / f"{profile}.json").write_text(json.dumps(data))
    return directory


def _runs(
    profile: str, noise: float, domain: str, task_ids: list[str], nonces: list[str], harness: str
) -> dict[str, list[int]]:
    """{nonce: [1 if solved else 0 per task]} (one worker process)."""
    os.environ["ECDYSIS_AGENT_PROCESS"] = "0"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ.pop("ECDYSIS_SIM_NONCE", None)
    os.environ["ECDYSIS_SIM_PROFILES"] = _profile_dir(profile, noise)
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    handle = start_background(default_profile=profile)
    out: dict[str, list[int]] = {}
    try:
        for nonce in nonces:
            row = []
            for task_id in task_ids:
                spec = TrialSpec(
                    domain=domain,
                    task_id=task_id,
                    trial=0,
                    run_id=nonce,
                    model=f"sim/{profile}",
                    user_model=f"sim/{profile}",
                    harness_dir=ROOT / harness,
                    harness_id=harness,
                    sim_url=handle.url,
                )
                row.append(int((run_trial(spec).reward or 0.0) >= 1.0))
            out[nonce] = row
    finally:
        handle.stop()
    return out


def spread(
    profiles: list[str],
    noises: list[float | None],
    domain: str,
    split: str,
    n_tasks: int,
    n_nonces: int,
    harness: str = "example_harness",
    jobs: int = 2,
) -> list[dict]:
    """One row per (profile, noise): scores per nonce, `sd`, `range`, `tasks_that_flipped`.

    `noises` None: the profile's own share. Nonces are `spread-1..K` (fresh, independent of the profile).
    """
    from pytest_ecdysis.sim.profiles import load_profile
    from pytest_ecdysis_tau2.tasks import suite

    task_ids = suite.select_task_ids(domain, split, None)[:n_tasks]
    rows = []
    for profile in profiles:
        for noise in noises:
            share = load_profile(profile).noise if noise is None else noise
            nonces = [f"spread-{k}" for k in range(1, n_nonces + 1)]
            chunks = [nonces[i::jobs] for i in range(jobs) if nonces[i::jobs]]
            with ProcessPoolExecutor(len(chunks)) as pool:
                futures = [pool.submit(_runs, profile, share, domain, task_ids, c, harness) for c in chunks]
                parts = [f.result() for f in futures]
            outcomes = {k: v for part in parts for k, v in part.items()}
            scores = [round(sum(outcomes[n]) / len(task_ids), 4) for n in nonces]
            flipped = sum(1 for i in range(len(task_ids)) if len({outcomes[n][i] for n in nonces}) > 1)
            rows.append(
                {
                    "profile": profile,
                    "noise": share,
                    "domain": domain,
                    "split": split,
                    "tasks": task_ids,
                    "harness": harness,
                    "scores": scores,
                    "mean": round(statistics.mean(scores), 4),
                    "sd": round(statistics.pstdev(scores), 4),
                    "range": round(max(scores) - min(scores), 4),
                    "tasks_that_flipped": flipped,
                    "load": os.getloadavg(),
                }
            )
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "tasks"}), flush=True)
    return rows
