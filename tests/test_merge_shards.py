"""Sharding a suite across CI runners (pytest-split) and merging the shards into one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_records_pipeline import env, read_jsonl, run, write_suite  # noqa: F401  (env: the fixture)

from pytest_ecdysis.cli import main as ecdysis
from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.run.merge import merge

pytest.importorskip("pytest_split", reason="pytest-split is in the dev extra (pip install -e .[dev])")
pytestmark = pytest.mark.usefixtures("env")

#: two suites, 7 tasks, 2 trials each: failures in both suites, a cross-task group, one infra error.
PLAN = {
    "syn-air": {"1": [1.0, 1.0], "2": [1.0, 0.0], "3": [0.0, 0.0], "4": [1.0, 1.0]},
    "syn-ret": {"1": [0.0, 1.0], "2": [1.0, 1.0], "3": [None, 0.0]},
}
#: fields that name the run rather than describe its results.
RUN_FIELDS = ("run_id", "wall_s", "shard", "shards", "gate")


def _results(run_dir: Path) -> dict:
    def strip(rows: list[dict]) -> list[str]:
        return sorted(json.dumps({k: v for k, v in r.items() if k != "wall_s"}, sort_keys=True) for r in rows)

    summary = json.loads((run_dir / "summary.json").read_text())
    junit = (run_dir / "junit.xml").read_text()
    return {
        "summary": {k: v for k, v in summary.items() if k not in RUN_FIELDS},
        "trials": strip(read_jsonl(run_dir / "trials.jsonl")),
        "failures": strip(read_jsonl(run_dir / "failures.jsonl")),
        "groups": json.loads((run_dir / "groups.json").read_text()),
        "junit_cases": sorted(line.split('time="')[0] for line in junit.splitlines() if "<testcase" in line),
    }


def _shards(pytester: pytest.Pytester, n: int) -> list[Path]:
    out = []
    for group in range(1, n + 1):
        extra = ("-n", "2") if group == 1 else ()  # pytest-split under xdist too
        run(
            pytester,
            "--ecdysis-trials",
            "2",
            "--splits",
            str(n),
            "--group",
            str(group),
            "--ecdysis-run-dir",
            f"shard-{group}",
            *extra,
        )
        (run_dir,) = list((pytester.path / f"shard-{group}").iterdir())
        out.append(run_dir)
    return out


def test_merged_shards_equal_the_unsharded_run(pytester: pytest.Pytester) -> None:
    """4 shards merged: summary figures, trials, failure records, groups and JUnit cases equal one whole run."""
    write_suite(pytester, PLAN)
    run(pytester, "--ecdysis-trials", "2", "--ecdysis-run-dir", "whole")
    (whole,) = list((pytester.path / "whole").iterdir())
    shards = _shards(pytester, 4)
    sizes = [len(read_jsonl(s / "trials.jsonl")) for s in shards]
    assert sum(sizes) == 14 and all(sizes), sizes  # every shard ran a part, together all
    assert ecdysis(["merge", *map(str, shards), "-o", str(pytester.path / "merged")]) == 0
    merged = _results(pytester.path / "merged")
    assert merged == _results(whole)
    assert merged["summary"]["suite"] == "syn-air+syn-ret" and merged["summary"]["n_infra_errors"] == 1
    doc = json.loads((pytester.path / "merged" / "summary.json").read_text())
    assert doc["shards"]["runs"] == [json.loads((s / "summary.json").read_text())["run_id"] for s in shards]


def test_the_gate_runs_on_the_merged_run(pytester: pytest.Pytester, capsys: pytest.CaptureFixture) -> None:
    """`ecdysis gate` on a merged run: the same verdict as a whole run, and the exit status says it. (4 tasks
    x 2 trials show an equal run within a 40-point margin, one-sided bound -0.297, not within 5 points.)"""
    plan = {"syn-air": {"1": [1.0, 1.0], "2": [1.0, 0.0], "3": [0.0, 0.0], "4": [1.0, 1.0]}}
    write_suite(pytester, plan)
    run(pytester, "--ecdysis-trials", "2", "--ecdysis-save-baseline", "baseline.json")
    shards = _shards(pytester, 2)
    assert ecdysis(["merge", *map(str, shards), "-o", "merged"]) == 0
    assert ecdysis(["gate", "merged", "--baseline", "baseline.json", "--margin", "0.4"]) == 0
    assert "gate PASSED: suite score 0.625 vs baseline 0.625" in capsys.readouterr().out
    assert ecdysis(["gate", "merged", "--baseline", "baseline.json"]) == 1  # the default margin: undecided
    assert "undecided, about 71 trials per task would decide it (now 2)" in capsys.readouterr().out
    base = json.loads((pytester.path / "baseline.json").read_text())
    (pytester.path / "higher.json").write_text(json.dumps({**base, "suite_score": 0.75}))
    assert ecdysis(["gate", "merged", "--baseline", "higher.json", "--rule", "strict"]) == 1
    assert "gate FAILED" in capsys.readouterr().out
    assert json.loads((pytester.path / "merged" / "summary.json").read_text())["gate"]["passed"] is False
    # under the paired rule a suite of 4 tasks is too small for the sign test ever to reject: the score rule
    # decides, and says so
    assert ecdysis(["gate", "merged", "--baseline", "higher.json", "--rule", "paired"]) == 1
    assert (
        "the paired test was not possible (4 task(s) in both runs: at least 5 needed)"
        in capsys.readouterr().out
    )
    gate = json.loads((pytester.path / "merged" / "summary.json").read_text())["gate"]
    assert gate["rule"] == "paired" and gate["method"] == "sign" and gate["level"] == 0.05


def test_a_baseline_from_merged_shards_equals_the_unsharded_runs(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    """`ecdysis baseline MERGED` writes what `--ecdysis-save-baseline` writes on one whole run (a suite that
    outgrew one runner gets its baseline from its shards); an incomplete run is refused, nothing written."""
    plan = {"syn-air": {"1": [1.0, 1.0], "2": [1.0, 0.0], "3": [0.0, 0.0], "4": [1.0, 1.0]}}
    write_suite(pytester, plan)
    run(pytester, "--ecdysis-trials", "2", "--ecdysis-save-baseline", "whole.json")
    assert ecdysis(["merge", *map(str, _shards(pytester, 2)), "-o", "merged"]) == 0
    assert ecdysis(["baseline", "merged", "-o", "sharded.json"]) == 0
    assert "suite score 0.625, 4 task(s) x 2 trial(s)" in capsys.readouterr().out
    whole, sharded = (json.loads((pytester.path / f).read_text()) for f in ("whole.json", "sharded.json"))
    assert {k: v for k, v in sharded.items() if k != "run_id"} == {
        k: v for k, v in whole.items() if k != "run_id"
    }
    assert ecdysis(["gate", "merged", "--baseline", "sharded.json", "--margin", "0.4"]) == 0
    # a run's summary.json is not a baseline (it has suite_score and tasks too): refused, the verdict kept
    assert ecdysis(["gate", "merged", "--baseline", "merged/summary.json"]) == 4
    assert "its kind is None, not 'ecdysis-baseline'" in capsys.readouterr().err
    assert ecdysis(["gate", "merged", "--baseline", "whole.json", "--rule", "paired"]) == 0
    doc = json.loads((pytester.path / "merged" / "summary.json").read_text())
    assert doc["gate"]["rule"] == "paired" and doc["gate"]["by"] == "ecdysis gate"
    assert [g["rule"] for g in doc["gate_history"]] == [
        "noninferiority"
    ]  # the earlier verdict (the default rule) is kept
    write_suite(pytester, {"syn-air": {**plan["syn-air"], "5": [None, 1.0]}})  # an infrastructure error
    run(pytester, "--ecdysis-trials", "2", "--ecdysis-run-dir", "broken")
    (broken,) = list((pytester.path / "broken").iterdir())
    assert ecdysis(["baseline", str(broken), "-o", "broken.json"]) == 2
    assert "incomplete (1 infrastructure error(s))" in capsys.readouterr().err
    assert not (pytester.path / "broken.json").exists()


def test_merge_refuses_missing_duplicate_and_foreign_shards(pytester: pytest.Pytester) -> None:
    """A missing group, a group given twice, a shard of another trial count or selection: one clear error."""
    write_suite(pytester, PLAN)
    shards = _shards(pytester, 3)
    out = pytester.path / "merged"
    with pytest.raises(RunDirError, match=r"missing shard\(s\): group\(s\) \[2\] of --splits 3"):
        merge([shards[0], shards[2]], out)
    with pytest.raises(RunDirError, match=r"group\(s\) \[1\] of --splits 3 given more than once"):
        merge([shards[0], shards[0], shards[1], shards[2]], out)
    with pytest.raises(RunDirError, match="no such run directory"):
        merge([*shards, pytester.path / "nowhere"], out)
    other = pytester.path / "other"
    run(pytester, "--ecdysis-trials", "1", "--splits", "3", "--group", "2", "--ecdysis-run-dir", "other")
    (foreign,) = list(other.iterdir())
    with pytest.raises(RunDirError, match="differ in trials: 2 vs 1"):
        merge([shards[0], foreign, shards[2]], out)
    run(
        pytester,
        "--ecdysis-trials",
        "2",
        "--splits",
        "3",
        "--group",
        "2",
        "--ecdysis-tasks",
        "1,2",
        "--ecdysis-run-dir",
        "subset",
    )
    (subset,) = list((pytester.path / "subset").iterdir())
    with pytest.raises(RunDirError, match=r"differ in selection \(test paths and --ecdysis-tasks\)"):
        merge([shards[0], subset, shards[2]], out)
    assert not out.exists()  # nothing written on a refusal
    out.mkdir()
    assert merge(shards, out)["n_trials"] == 14  # an empty output directory is fine
    assert (
        ecdysis(["merge", str(shards[0]), str(shards[2]), "-o", str(out)]) == 2
    )  # the command: exit 2, one line on stderr


def test_merge_refuses_an_output_directory_that_is_not_empty(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    """`-o` naming an existing run directory (the unsharded run a baseline came from) overwrote its files and
    left its own `sim/` and `progress.json` beside them: refused, exit 2, one line naming it, nothing written."""
    write_suite(pytester, {"syn-air": {"1": [1.0], "2": [0.0]}})
    run(pytester, "--ecdysis-run-dir", "whole")
    (whole,) = list((pytester.path / "whole").iterdir())
    shards = _shards(pytester, 2)
    before = {p: p.read_bytes() for p in whole.rglob("*") if p.is_file()}
    assert ecdysis(["merge", *map(str, shards), "-o", str(whole)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{whole} exists and is not empty" in err, err
    assert {p: p.read_bytes() for p in whole.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tolerance", "-1"], "--tolerance must be in [0.0, 1.0], got -1.0"),
        (["--tolerance", "nan"], "--tolerance must be in [0.0, 1.0], got nan"),
        (["--max-regressions", "-3"], "--max-regressions must be an integer >= 0, got -3"),
        (
            ["--accept-level", "1"],
            "--accept-level must be a number strictly between 0 and 1 (e.g. 0.05), got 1.0",
        ),
        (
            ["--accept-level", "1.5"],
            "--accept-level must be a number strictly between 0 and 1 (e.g. 0.05), got 1.5",
        ),
        (
            ["--accept-method", "t-test"],
            "--accept-method must be one of sign, wilcoxon, bootstrap, got 't-test'",
        ),
        (["--max-cost-rise", "-0.1"], "--max-cost-rise must be"),
    ],
)
def test_gate_command_refuses_bounds_the_pytest_option_refuses(
    tmp_path, capsys: pytest.CaptureFixture, args: list[str], message: str
) -> None:
    """`ecdysis gate` bounds its options like --ecdysis-gate-tolerance/-max-regressions (a negative tolerance
    failed an equal score, NaN passed anything): exit 2 before any file is read or written."""
    assert ecdysis(["gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "b.json"), *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["plain", "xdist"])
def test_an_empty_shard_is_a_shard(pytester: pytest.Pytester, xdist: tuple) -> None:
    """More --splits than cases: a group pytest-split gives no case exits 0 and writes its run directory
    (0 trials, its shard info, no problem), and `ecdysis merge` takes it with the others."""
    plan = {"syn-air": {"1": [1.0], "2": [1.0]}}
    write_suite(pytester, plan)
    run(pytester, "--ecdysis-run-dir", "whole")
    (whole,) = list((pytester.path / "whole").iterdir())
    shards = []
    for group in (1, 2, 3):
        result = run(
            pytester,
            "--splits",
            "3",
            "--group",
            str(group),
            "--ecdysis-run-dir",
            f"shard-{group}",
            *(xdist if group == 3 else ()),
        )
        assert result.ret == pytest.ExitCode.OK, (group, result.stdout.str()[-2000:])
        (run_dir,) = list((pytester.path / f"shard-{group}").iterdir())
        shards.append(run_dir)
    empty = json.loads((shards[2] / "summary.json").read_text())
    assert empty["shard"] == {"splits": 3, "group": 3} and empty["n_trials"] == 0 and empty["problems"] == []
    assert (shards[2] / "trials.jsonl").read_text() == ""
    assert ecdysis(["merge", *map(str, shards), "-o", str(pytester.path / "merged")]) == 0
    assert _results(pytester.path / "merged") == _results(whole)
