"""Per-task rewards of real simulated-model trials, for `bench_decisions.py` (collected once, cached as JSON).

A *pool* is one (profile, harness) pair; each plays every airline train task (30) for `trials` independent (`FIX_TRIALS` for the fix pools)
trials, each trial its own run nonce (`run_id` `bd-<pool>-<k>`, trial index 0: the simulated model's noisy
draws come from the nonce), in process through the suite's own `run_trial` (real τ² environment,
orchestrator and scorer; `ECDYSIS_AGENT_PROCESS=0`, as `sim_spread.py`). Pools:

- `noop/example`: profile `noop` (no harness-curable quirk), example_harness;
- `default/example`: profile `default`, example_harness (the main job's start);
- `default/cured`: profile `default`, example_harness + `cured_harness.patch` (every documented cure: the
  systematic fix the ground truth names, `docs/simulated-model.md`);
- `default/partial`: profile `default`, example_harness + only the patch's `closing.py` part (the completion
  check: cures `early_end` and `forget_communicate` only).

Output `<out>/pools.json`: `{"pools": {pool: {task_id: [reward, ...]}}, "trials", "tasks", "wall_s",
"load"}`; rewards are 1.0 or 0.0 (τ² airline). The work is split over `jobs` processes by nonce.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PATCH = ROOT / "benchmarks" / "cured_harness.patch"
#: trials per task of the fix pools (a decision draws at most 1 + looks of them, on the candidate's side only).
FIX_TRIALS = 5
POOLS = {
    "noop/example": ("noop", "example"),
    "default/example": ("default", "example"),
    "default/cured": ("default", "cured"),
    "default/partial": ("default", "partial"),
}


def materialise(base: Path, kind: str) -> Path:
    """example_harness (`example`), with the whole cures patch (`cured`) or only its closing.py part
    (`partial`), copied under `base`. Raises SystemExit when the patch no longer applies."""
    if kind == "example":
        return ROOT / "pytest_ecdysis_tau2" / "example_harness"
    target = base / f"{kind}_harness"
    if target.is_dir():
        return target
    shutil.copytree(
        ROOT / "pytest_ecdysis_tau2" / "example_harness",
        target,
        ignore=shutil.ignore_patterns("recipes", "__pycache__"),
    )
    text = PATCH.read_text()
    if kind == "partial":
        parts = re.split(r"(?m)^(?=diff -ruN )", text)
        text = "".join(p for p in parts if p.startswith("diff -ruN a/closing.py"))
    proc = subprocess.run(
        ["patch", "-p1", "-s", "-d", str(target)], input=text, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"{PATCH} ({kind}) does not apply to example_harness:\n{proc.stdout}{proc.stderr}")
    return target


_SERVERS: dict[str, Any] = {}


def _play(profile: str, harness_dir: str, task_ids: list[str], nonce: str) -> dict[str, float]:
    """{task_id: reward} of one nonce (one worker process; one simulated server per profile and process)."""
    os.environ["ECDYSIS_AGENT_PROCESS"] = "0"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ.pop("ECDYSIS_SIM_NONCE", None)
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    model = "sim" if profile == "default" else f"sim/{profile}"
    if profile not in _SERVERS:
        _SERVERS[profile] = start_background(default_profile=profile)
    url = _SERVERS[profile].url
    out: dict[str, float] = {}
    for task_id in task_ids:
        spec = TrialSpec(
            domain="airline",
            task_id=task_id,
            trial=0,
            run_id=nonce,
            model=model,
            user_model=model,
            harness_dir=Path(harness_dir),
            harness_id=Path(harness_dir).name,
            sim_url=url,
        )
        out[task_id] = float(run_trial(spec).reward or 0.0)
    return out


def collect(out: Path, trials: int = 8, jobs: int = 2) -> dict:
    """Play the pools trial by trial: trial k of every pool (k = 0, 1, ...), `out/pools.json` saved after each,
    so an interrupted collection keeps every finished trial and a later call continues it. The example
    pools get `trials` trials per task (a no-op decision draws both sides from one pool), the fix pools
    `FIX_TRIALS` (one side only). Returns the document (`trials`: the fewest trials of an example pool)."""
    from pytest_ecdysis_tau2.tasks import suite

    path = out / "pools.json"
    doc = json.loads(path.read_text()) if path.is_file() else {}
    out.mkdir(parents=True, exist_ok=True)
    task_ids = list(suite.select_task_ids("airline", "train", None))
    doc.setdefault("pools", {name: {t: [] for t in task_ids} for name in POOLS})
    doc.setdefault("wall_s", 0.0)
    doc["tasks"] = task_ids
    chunks = [task_ids[i::jobs] for i in range(jobs)]
    with ProcessPoolExecutor(jobs) as pool:
        for k in range(trials):
            for name, (profile, kind) in POOLS.items():
                want = trials if kind == "example" else min(trials, FIX_TRIALS)
                if k >= want or len(doc["pools"][name][task_ids[0]]) > k:
                    continue
                t0 = time.monotonic()
                harness = str(materialise(out, kind))
                nonce = f"bd-{name.replace('/', '-')}-{k}"
                parts = [f.result() for f in [pool.submit(_play, profile, harness, c, nonce) for c in chunks]]
                for part in parts:
                    for t, r in part.items():
                        doc["pools"][name][t].append(r)
                doc["wall_s"] = round(doc["wall_s"] + time.monotonic() - t0, 1)
                doc["load"] = list(os.getloadavg())
                doc["trials"] = min(
                    len(doc["pools"][n][task_ids[0]]) for n, (_, kd) in POOLS.items() if kd == "example"
                )
                path.write_text(json.dumps(doc, indent=1))
                print(
                    f"pool {name}: trial {k + 1}, score {sum(p for part in parts for p in part.values()) / 30:.3f}, "
                    f"{time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    return doc


if __name__ == "__main__":
    import sys

    collect(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8)
