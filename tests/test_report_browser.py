"""The HTML page of a real simulated-model evolution run on τ² airline tasks (ini `ecdysis_html`, `ecdysis
report`), opened in headless Chromium; `ecdysis show` of the same run prints its rounds.

The browser test installs Debian's `chromium` in its set-up where missing (root and apt-get needed) and
skips, saying why, when no Chromium can be had. Its screenshot and page are kept in
`$ECDYSIS_TEST_ARTIFACTS` (default `.ecdysis/artifacts/` of this checkout) for CI to upload.
Slow: the run scores 6 tasks 3 times and the 20 test tasks twice (18 min on a loaded 2-core machine); it
runs once per session, also when xdist sends the two tests to two workers (tests/once.py).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from once import once_per_session

from pytest_ecdysis import cli

ROOT = Path(__file__).resolve().parents[1]
#: The fixed world of the run: the simulated model's default profile (noise 1.0) under one fixed nonce (the
#: start run's nonce of a measured `bench_sim_validity.py default` run), so start and candidates draw alike
#: and a flip is the edit's doing. Train tasks the example harness fails there (21 ends early; 7, 11 and 40
#: write a blind spot's wrong value, which the simulated roles read as work left undone on >= 2 tasks;
#: 42 repeats a failing call) and one it solves (0): round 1's completion check and repeat guard repair 21
#: and 42. The test says so plainly if a change to the simulated world leaves no round that flips a task.
NONCE = "20261201-025825-11f911"
TASKS = "0,7,11,21,40,42"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def evolution_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """A real evolution (simulated model, sim editor, 2 rounds on 6 airline tasks, test split 1 trial) in a
    git repository holding a copy of the example harness; run as users run it, with ini `ecdysis_html`. Run
    once per session, whichever xdist worker asks first (tests/once.py); the tests only read it."""
    place = once_per_session(tmp_path_factory, "browser-evolution", _evolve)
    proc = subprocess.CompletedProcess(
        "evolution",
        int((place / "returncode").read_text()),
        (place / "stdout").read_text(),
        (place / "stderr").read_text(),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return place / "evo" / ".ecdysis" / "runs" / "evo1", place / "evo" / "out" / "page.html", proc


def _evolve(place: Path) -> None:
    """The evolution of `evolution_run` in `place`/evo; its exit status and output in `place`."""
    from pytest_ecdysis_tau2 import example_harness

    repo = place / "evo"
    shutil.copytree(
        Path(example_harness.__file__).parent,
        repo / "example_harness",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (repo / ".gitignore").write_text(".ecdysis/\n__pycache__/\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "dev@example.com")
    _git(repo, "config", "user.name", "Dev")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "harness")
    # a session-scoped fixture runs before the per-test clean-up (conftest): drop this session's exports here
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "ECDYSIS_SIM_URL",
            "PYTEST_ADDOPTS",
            "ECDYSIS_SESSION_PID",
            "GITHUB_STEP_SUMMARY",
            "PYTEST_XDIST_WORKER",
        )
    }
    env.update(ECDYSIS_RUN_ID="evo1", ECDYSIS_SIM_NONCE=NONCE, LITELLM_LOCAL_MODEL_COST_MAP="True")
    page = repo / "out" / "page.html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "pytest_ecdysis_tau2.test_airline",
            "-q",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            "--ecdysis-evolve",
            "--ecdysis-model",
            "sim",
            "--ecdysis-harness",
            "example_harness",
            "--ecdysis-tasks",
            TASKS,
            "--ecdysis-rounds",
            "2",
            "--ecdysis-test-trials",
            "1",
            "-o",
            "ecdysis_html=" + str(page),
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    for name, value in (
        ("returncode", str(proc.returncode)),
        ("stdout", proc.stdout),
        ("stderr", proc.stderr),
    ):
        (place / name).write_text(value)


@pytest.fixture(scope="module")
def browser() -> str:
    """A headless-capable Chromium (set up before the evolution run, so a skip costs nothing)."""
    return _browser()


def _browser() -> str:
    """A headless-capable Chromium: found on PATH, else Debian's `chromium` installed with apt-get (root)."""
    for name in BROWSERS:
        if shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    why = "no chromium on PATH"
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        for cmd in (
            ["apt-get", "install", "-y", "-q", "chromium"],
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "chromium"],
        ):
            done = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=900,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
            if cmd[1] == "install" and done.returncode == 0 and shutil.which("chromium"):
                return shutil.which("chromium")  # type: ignore[return-value]
        why += f"; apt-get install chromium failed: {done.stderr.strip()[-300:]}"
    else:
        why += "; it cannot be installed here (needs apt-get as root)"
    pytest.skip(
        f"headless Chromium unavailable ({why}): install Debian's `chromium` package to run this test"
    )


def _chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def _artifacts() -> Path:
    target = Path(os.environ.get("ECDYSIS_TEST_ARTIFACTS") or ROOT / ".ecdysis" / "artifacts")
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.mark.slow
def test_page_of_a_real_evolution_in_chromium(browser: str, evolution_run, tmp_path: Path) -> None:
    """The page ini `ecdysis_html` wrote, opened in headless Chromium: a screenshot is taken, and the rendered
    text shows every round's score and outcome, the test split's start and frozen scores, the flipped
    tasks and the failure groups; the page fetches nothing (no script, no external URL)."""
    run, page, proc = evolution_run
    assert f"html report: {page}" in proc.stdout
    evo = json.loads((run / "evolution.json").read_text())
    flipped = [
        t for r in evo["rounds"] for t in r["flips"]["failed_to_solved"] + r["flips"]["solved_to_failed"]
    ]
    assert evo["rounds"] and flipped, (
        "the run must have rounds that flip tasks for this test to mean anything"
    )
    text = page.read_text()
    assert "<script" not in text and not re.search(r"""(src|href)=["']?(https?:)?//""", text)
    shot = tmp_path / "report.png"
    done = _chromium(
        browser, tmp_path / "profile", "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri()
    )
    assert shot.is_file() and shot.stat().st_size > 10_000, done.stderr[-2000:]
    dom = _chromium(browser, tmp_path / "profile2", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    seen = html.unescape(re.sub(r"<[^>]+>", " ", dom.stdout))
    seen = " ".join(seen.split())
    for r in evo["rounds"]:
        after = "–" if r["score_after"] is None else f"{r['score_after']:.3f}"
        assert re.search(rf"Round {r['round']}: \S.* \({r['score_before']:.3f} → {after}\)", seen), r
    test = evo["test"]
    assert (
        f"test score: start → frozen {test['start']['suite_score']:.3f} → {test['frozen']['suite_score']:.3f}"
        in seen
    )
    for task in flipped:
        assert task in seen
    for g in json.loads((run / "groups.json").read_text())["groups"]:
        assert g["signature"] in seen
    shutil.copy(shot, _artifacts() / "report-screenshot.png")
    shutil.copy(page, _artifacts() / "report.html")


@pytest.mark.slow
def test_show_and_report_of_the_evolution(
    evolution_run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ecdysis show` of an evolution run prints its rounds table, test scores and branch; `ecdysis report`
    writes the same page again (default RUN_DIR/report.html) and prints its size."""
    run, _, _ = evolution_run
    evo = json.loads((run / "evolution.json").read_text())
    assert cli.main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "round   before    after" in out
    assert (f"branch {evo['branch']}" if evo["branch"] else "no round was accepted: no branch") in out
    assert "test split, 1 trial(s) per task:" in out
    for r in evo["rounds"]:
        assert re.search(rf"^\s+{r['round']}\s+{r['score_before']:.3f}\s.*{r['outcome']}", out, re.M), out
    assert cli.main(["report", str(run), "-o", str(tmp_path / "again.html")]) == 0
    assert re.search(r"again\.html \(\d+\.\d KiB\)", capsys.readouterr().out)
