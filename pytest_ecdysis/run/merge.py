"""`ecdysis merge SHARD_DIR... -o OUT`: one run directory from the shards of a suite run split across
CI runners (pytest-split's `--splits N --group i`, one matrix job per group).

The merged directory has the files of any run (`summary.json`, `trials.jsonl`, `failures.jsonl`,
`groups.json`, `junit.xml`, and `sim/ground_truth.jsonl` when the shards have one), computed from the
union of the shards' trials by the same code as a single run (`run.files.aggregate`), so its figures,
records, groups and JUnit equal those of the same suite run unsharded. Differences: `run_id` (`--run-id`
or `merged-<first shard's run id>`), `wall_s` (the slowest shard: shards run side by side; their sum is
`shards.wall_s_sum`), and a `shards` object naming the merged runs.

Refused, with one `RunDirError` naming the mismatch: a shard directory that is missing or unreadable;
shards of different selections (test paths and `--ecdysis-tasks`), splits, trial counts, λ, harnesses,
models or simulated-model nonces; two shards holding the same case; a group of `--splits N` missing or
given twice; an output directory that exists and is not empty (a merge never mixes its files with an earlier run's, e.g. the
unsharded run a baseline came from). No pytest, no network: it reads files.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_ecdysis.core import metrics
from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.core.records import SCHEMA_VERSION, TrialResult

#: summary fields every shard must share for the union to be one run.
SAME_FIELDS = ("split", "trials", "threshold", "harness_id", "model", "user_model", "sim_nonce")


def read_shard(path: Path) -> tuple[dict[str, Any], list[TrialResult]]:
    """(summary, trials) of one shard's run directory.

    Raises:
        RunDirError: the directory, its `summary.json` or `trials.jsonl` is missing or unreadable.
    """
    if not path.is_dir():
        raise RunDirError(f"shard {path}: no such run directory (did its matrix job upload its artifact?)")
    try:
        summary = json.loads((path / "summary.json").read_text())
        lines = (path / "trials.jsonl").read_text().splitlines()
        trials = [TrialResult.model_validate_json(line) for line in lines if line.strip()]
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise RunDirError(
            f"shard {path}: cannot read summary.json / trials.jsonl ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]}); re-run that shard"
        ) from None
    return summary, trials


def check_compatible(shards: list[tuple[Path, dict[str, Any]]]) -> None:
    """Raise RunDirError naming the first field in which the shards differ, or a missing/duplicate group."""
    first_path, first = shards[0]
    for path, summary in shards[1:]:
        for key in (*SAME_FIELDS, "selection"):
            if summary.get(key) != first.get(key):
                what = "selection (test paths and --ecdysis-tasks)" if key == "selection" else key
                raise RunDirError(
                    f"shards {first_path} and {path} differ in {what}: {first.get(key)!r} vs "
                    f"{summary.get(key)!r}; merge only the shards of one sharded run"
                )
    described = [(path, d) for path, s in shards if (d := s.get("shard"))]
    if not described:
        return
    if len(described) != len(shards):
        raise RunDirError(
            "some shards were run with --splits/--group and some without; merge the shards of one sharded run"
        )
    splits = {d["splits"] for _, d in described}
    if len(splits) != 1:
        raise RunDirError(f"shards were split {sorted(splits)} ways; merge the shards of one sharded run")
    n = splits.pop()
    groups = Counter(d["group"] for _, d in described)
    twice = sorted(g for g, c in groups.items() if c > 1)
    if twice:
        raise RunDirError(f"group(s) {twice} of --splits {n} given more than once")
    absent = sorted(set(range(1, n + 1)) - set(groups))
    if absent:
        raise RunDirError(
            f"missing shard(s): group(s) {absent} of --splits {n}; download every matrix "
            "job's run directory before merging"
        )


def merge(
    paths: list[Path],
    out: Path,
    *,
    run_id: str | None = None,
    prices: dict[str, dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Merge the shard run directories `paths` into `out`; returns the merged `summary.json` as a dict.

    Raises:
        RunDirError: see the module docstring; nothing is written then.
    """
    from pytest_ecdysis.run.files import aggregate, write_run_dir

    if not paths:
        raise RunDirError("no shard given: ecdysis merge SHARD_DIR... -o OUT")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunDirError(
            f"{out} exists and is not empty: merging into it would mix the merged files with "
            "what is there; pass a new or empty directory to -o"
        )
    loaded = [(p, *read_shard(p)) for p in paths]
    check_compatible([(p, s) for p, s, _ in loaded])
    seen: dict[tuple[str, str, int], Path] = {}
    trials: list[TrialResult] = []
    for path, _, shard_trials in loaded:
        for t in shard_trials:
            trial_key = (t.suite, t.task_id, t.trial)
            if trial_key in seen:
                raise RunDirError(
                    f"{t.suite}/{t.task_id} trial {t.trial} is in both {seen[trial_key]} and {path}; "
                    "shards must not overlap"
                )
            seen[trial_key] = path
            trials.append(t)
    trials.sort(key=lambda t: (*metrics._natural(metrics.task_key(t)), t.trial))
    head = loaded[0][1]
    missing = sorted({m for _, s, _ in loaded for m in s.get("missing", [])})
    problems = list(dict.fromkeys(p for _, s, _ in loaded for p in s.get("problems", [])))
    per_task = max([head.get("trials") or 1, *Counter(metrics.task_key(t) for t in trials).values()])
    block, tri, groups = aggregate(
        trials,
        threshold=head["threshold"],
        trials_per_task=per_task,
        model=head["model"],
        prices=prices if prices is not None else metrics.load_prices(),
        user_model=head.get("user_model"),
    )
    walls = [float(s.get("wall_s") or 0.0) for _, s, _ in loaded]
    summaries = [s for _, s, _ in loaded]
    # every field a run writes, as the shards have it (lists: their union), then the recomputed figures
    summary: dict[str, Any] = {}
    for key in dict.fromkeys(k for s in summaries for k in s):
        values = [s.get(key) for s in summaries]
        lists = [v for v in values if isinstance(v, list)]
        if len(lists) == len(values):
            summary[key] = sorted(
                {json.dumps(x, sort_keys=True): x for v in lists for x in v}.values(),
                key=lambda x: json.dumps(x, sort_keys=True),
            )
        else:
            summary[key] = next((v for v in values if v is not None), None)
    summary.pop("shard", None)
    summary.update(
        schema_version=SCHEMA_VERSION,
        run_id=run_id or f"merged-{head.get('run_id')}",
        suite=block.pop("suite"),
        by_suite=block.pop("by_suite"),
        **block,
        wall_s=max(walls),
        n_collected=sum(int(s.get("n_collected") or 0) for s in summaries),
        missing=missing,
        problems=problems,
        gate=None,
        shards={
            "runs": [s.get("run_id") for s in summaries],
            "paths": [str(p) for p in paths],
            "wall_s_sum": round(sum(walls), 3),
        },
    )
    failed = write_run_dir(
        out, summary, trials, tri, groups, missing, head["threshold"], not_run=summary.get("not_run") or None
    )
    if failed:
        raise RunDirError(f"the merged run in {out} is incomplete: {'; '.join(failed)}")
    truth = [p / "sim" / "ground_truth.jsonl" for p in paths if (p / "sim" / "ground_truth.jsonl").is_file()]
    if truth:
        (out / "sim").mkdir(exist_ok=True)
        lines = [line for f in truth for line in f.read_text().splitlines() if line.strip()]
        lines.sort(key=lambda line: (json.loads(line).get("task_id", ""), json.loads(line).get("trial", 0)))
        (out / "sim" / "ground_truth.jsonl").write_text("".join(line + "\n" for line in lines))
    return summary
