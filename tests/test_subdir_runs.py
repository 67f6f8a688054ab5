"""Runs started from a subdirectory of the project: same run directory and baseline as from the root, and
validation sub-runs that do not import a folder of the start directory in place of a library."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_records_pipeline import env, write_suite  # noqa: F401  (env: the fixture, used below)

from pytest_ecdysis.validate.subrun import run_suite

pytestmark = pytest.mark.usefixtures("env")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in a subprocess started in the current directory (a subdirectory of the project)."""
    return pytester.runpytest_subprocess(
        "--ecdysis-harness", "harness", "-p", "no:cacheprovider", *args, timeout=300
    )


def _project_with_suite_in(pytester: pytest.Pytester, sub: str) -> Path:
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = '-p no:cacheprovider'\n")
    write_suite(pytester)
    subdir = pytester.mkdir(sub)
    (subdir / "__init__.py").write_text(
        ""
    )  # a package, as pytest_ecdysis_tau2/ is: pytest puts the rootdir on sys.path
    (pytester.path / "test_synth.py").rename(subdir / "test_synth.py")
    return subdir


def test_run_from_a_subdirectory_writes_under_the_rootdir(pytester: pytest.Pytester) -> None:
    """The default run dir and baseline are the rootdir's `.ecdysis/` (which .gitignore covers), not the
    subdirectory's; a run dir given on the command line is relative to where pytest started, as pytest's
    own path options are."""
    subdir = _project_with_suite_in(pytester, "suites")
    os.chdir(subdir)
    result = run(pytester, "--ecdysis-save-baseline", "base.json")
    assert result.ret == 1  # trials below λ
    result.stdout.fnmatch_lines(["run directory: ../.ecdysis/runs/*"])
    assert not (subdir / ".ecdysis").exists()
    (run_dir,) = (pytester.path / ".ecdysis" / "runs").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["n_trials"] == 9
    assert (subdir / "base.json").is_file()  # given on the command line: relative to the start directory

    (pytester.path / ".ecdysis" / "baseline.json").write_text((subdir / "base.json").read_text())
    # the default baseline is the rootdir's (strict: the equal score passes it; 3 tasks cannot decide the default)
    assert run(pytester, "--ecdysis-gate", "--ecdysis-gate-rule", "strict").ret == 0

    run(pytester, "--ecdysis-run-dir", "mine")
    assert len(list((subdir / "mine").iterdir())) == 1


def test_subrun_does_not_import_a_start_directory_folder_in_place_of_a_library(
    pytester: pytest.Pytester,
) -> None:
    """A validation sub-run started from a directory holding a folder named like a library the plugin
    imports (a suite's folder named `tau2/`, say) still imports the library: the sub-run keeps its start directory
    off sys.path, as the `pytest` command does."""
    subdir = _project_with_suite_in(pytester, "suites")
    (subdir / "junitparser").mkdir()
    (subdir / "junitparser" / "__init__.py").write_text("raise ImportError('the folder, not the library')\n")
    sub = run_suite(
        base_args=["test_synth.py"],
        cwd=subdir,
        harness_dir=pytester.path / "harness",
        run_dir=pytester.path / "round",
        run_id="sub-1",
        sim_url="http://127.0.0.1:9",
        check_import=False,
    )
    assert sub.summary["n_trials"] == 9, (pytester.path / "round" / "pytest.log").read_text()
