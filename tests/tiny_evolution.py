"""The tiny evolution project the loop tests share (was copied into six test files): a synthetic four-task
suite in a temporary git repository, a scripted diagnosis (its conftest) and a scripted `cmd:` editor, and
the one command line that evolves it the way users run it (a pytest subprocess).

Task i is solved when the harness constant `LEVEL` > i, so the suite score is LEVEL/4 and every edit's effect
is known in advance. Round n's diagnosis answers with entry n-1 of the project's `script.json` (editor
instructions, or null for no spec); the editor applies them. A helper module, not a test file: it holds no
tests and must not start anything on import.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

SUITE = """
import os

import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.plugin import get_state


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", ["0", "1", "2", "3"])
def test_task(request, task_id):
    state = get_state(request.config)
    level = load_harness(state.harness_dir).LEVEL + int(os.environ.get("TINY_BONUS", "0"))  # a model that moved
    reward = 1.0 if int(task_id) < level else 0.0
    record_trial(request.node, TrialResult(
        suite="tiny", task_id=task_id, trial=0, reward=reward, termination_reason="agent_stop",
        components={"db": reward}, harness_id=state.harness_id,
        tool_calls=[{"name": "book", "arguments": {"id": task_id}, "result": "error", "error": True}]))
    assert reward >= 1.0
"""

HARNESS = '''"""A tiny harness: the suite solves task i when LEVEL > i."""

LEVEL = 1


def build_agent(**kwargs):
    return None
'''

#: The head of every scripted diagnosis: imports, and `HERE` (the project's directory).
DIAGNOSIS_HEAD = """
import json, sys, types
from pathlib import Path
from types import SimpleNamespace

import pytest_ecdysis
import pytest_ecdysis.diagnose  # the package, so its `round` attribute can be replaced
from pytest_ecdysis.core.records import ModificationSpec, SpecChange

HERE = Path(__file__).parent
"""

#: The tail of every scripted diagnosis: its `diagnose` replaces `pytest_ecdysis.diagnose.round` (the
#: package imported first, as DESIGN's house rules ask of a conftest that fakes it).
DIAGNOSIS_TAIL = """
module = types.ModuleType("pytest_ecdysis.diagnose.round")
module.diagnose = diagnose
sys.modules["pytest_ecdysis.diagnose.round"] = module
import pytest_ecdysis.diagnose  # noqa: E402
pytest_ecdysis.diagnose.round = module
"""


def scripted_diagnosis(body: str) -> str:
    """A conftest whose `diagnose(...)` (defined in `body`) replaces the diagnosis of every round."""
    return DIAGNOSIS_HEAD + body + DIAGNOSIS_TAIL


# Scripted diagnosis: round n answers with SCRIPT[n-1] (a dict of editor instructions, or null = no spec).
CONFTEST = scripted_diagnosis('''

def diagnose(*, records, groups, harness_dir, history, solved_tasks, cfg, round_dir, strategy, **_):
    n = int(Path(round_dir).name)
    with open(HERE / "diagnose.log", "a") as log:
        log.write(json.dumps({"round": n, "records": len(records), "harness": str(harness_dir)}) + "\\n")
    if (HERE / f"interrupt-{n}").exists():
        raise KeyboardInterrupt
    script = json.loads((HERE / "script.json").read_text())
    step = script[n - 1]
    if step is None:
        return SimpleNamespace(spec=None, reason="scripted: no spec", tokens={"total": 3}, wall_s=0.01)
    change = SpecChange(component="policy_prompt", files=["__init__.py"], description="set LEVEL",
                        parameters=step)
    spec = ModificationSpec(summary=f"scripted round {n}: {step}", changes=[change])
    return SimpleNamespace(spec=spec, reason="", tokens={"prompt": 5, "completion": 2, "total": 7}, wall_s=0.01)


import pytest_ecdysis.evolve.runs as evolve  # where the loop calls run_suite
_run_suite = evolve.run_suite


def run_suite(**kwargs):
    """Ctrl-C before a validation sub-run starts, when `interrupt-validate` exists."""
    if (HERE / "interrupt-validate").exists() and "-r" in kwargs["run_id"]:
        raise KeyboardInterrupt
    return _run_suite(**kwargs)


evolve.run_suite = run_suite
''')

# Scripted editor: reads the spec and edits the harness as told; logs each call.
EDITOR = """
import json, sys
from pathlib import Path

spec_path, harness = Path(sys.argv[1]), Path(sys.argv[2])
step = json.loads(spec_path.read_text())["changes"][0]["parameters"]
with open(Path(__file__).parent / "editor.log", "a") as log:
    log.write(json.dumps(step) + "\\n")
init = harness / "__init__.py"
kind = step.get("kind", "level")
if kind == "level":
    text = init.read_text().replace("LEVEL = ", "LEVEL = %d  # was " % step["value"], 1)
    init.write_text(text)
elif kind == "outside":
    (harness.parent / "test_tiny.py").write_text("def test_nothing():\\n    pass\\n")
    init.write_text(init.read_text().replace("LEVEL = 1", "LEVEL = 4"))
elif kind == "break":
    init.write_text(init.read_text() + "\\nthis is not python\\n")
elif kind == "gold":
    init.write_text(init.read_text().replace("LEVEL = 1", "LEVEL = len(open('tasks.json').read())"))
elif kind == "fail":
    sys.exit(3)
"""

#: What the project's git ignores: the run directory, the scripts' logs and markers, pytester's own files.
IGNORED = (
    ".ecdysis/",
    "__pycache__/",
    "*.log",
    "script.json",
    "interrupt-*",
    "stdout",
    "stderr",
    "runpytest-current",
)


def git(cwd: Path, *args: str) -> str:
    """`git ARGS` in `cwd`; its stdout. Raises CalledProcessError when git fails."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_project(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    conftest: str = CONFTEST,
    *,
    suite: str = SUITE,
    harness: str = HARNESS,
    editor: str = EDITOR,
    ignore: tuple[str, ...] = (),
    accept_ini: bool = True,
) -> pytest.Pytester:
    """The tiny suite (`test_tiny.py`), its harness (`tiny_harness/`), `conftest` (the scripted diagnosis)
    and the editor (`editor.py`), committed to a fresh git repository on `main`.

    `ignore` adds .gitignore lines; `accept_ini` writes `ecdysis_accept = strict` to pytest.ini: these
    projects test the loop's mechanics on a deterministic suite, so the paper's rule decides them (the
    default `sequential` would add confirmation looks); tests of a rule pass --ecdysis-accept themselves."""
    for name in ("ECDYSIS_RUN_ID", "ECDYSIS_SIM_URL", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)
    # the integrity ledgers (outside the run directory) go outside the project, as in a real home
    monkeypatch.setenv("XDG_STATE_HOME", str(pytester.path.parent / f"{pytester.path.name}-state"))
    pytester.makepyfile(test_tiny=suite, conftest=conftest, editor=editor)
    pytester.mkpydir("tiny_harness")
    (pytester.path / "tiny_harness" / "__init__.py").write_text(harness)
    if accept_ini:
        (pytester.path / "pytest.ini").write_text("[pytest]\necdysis_accept = strict\n")
    (pytester.path / ".gitignore").write_text("\n".join((*IGNORED, *ignore)) + "\n")
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "config", "user.email", "dev@example.com")
    git(pytester.path, "config", "user.name", "Dev")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-qm", "tiny suite")
    return pytester


def script(project: pytest.Pytester, steps: list) -> None:
    """What the scripted diagnosis answers: `steps[n-1]` in round n."""
    (project.path / "script.json").write_text(json.dumps(steps))


def evolve_args(project: pytest.Pytester, *extra: str, editor: str = "editor.py") -> list[str]:
    """The command line (after `pytest`) that evolves the tiny project with the scripted `cmd:` `editor`
    (a file of the project), a fake model at a closed port (no role is asked: the diagnosis is scripted) and
    one test trial per task; `extra` comes last, so it overrides any of these."""
    return [
        "test_tiny.py",
        "-p",
        "no:cacheprovider",
        "--ecdysis-evolve",
        "--ecdysis-model",
        "fake",
        "--ecdysis-base-url",
        "http://127.0.0.1:9",
        "--ecdysis-harness",
        "tiny_harness",
        "--ecdysis-editor",
        f"cmd:python {project.path / editor} {{spec}} {{harness}}",
        "--ecdysis-test-trials",
        "1",
        "--ecdysis-preflight",
        "off",  # no model at the closed port: the diagnosis is scripted
        *extra,
    ]


def run_evolution(
    project: pytest.Pytester,
    *extra: str,
    run_id: str | None = "run1",
    editor: str = "editor.py",
    timeout: float = 900,
) -> pytest.RunResult:
    """`pytest <evolve_args>` in a subprocess, as users run it, with `ECDYSIS_RUN_ID=run_id` (None or "": the
    environment as it is, so a resume or a test's own run id). `timeout` (seconds) only catches a hang: a
    3-round evolution took over 300 s at load 30-45 on 2 cores."""
    mp = pytest.MonkeyPatch()
    if run_id:
        mp.setenv("ECDYSIS_RUN_ID", run_id)
    try:
        return project.runpytest_subprocess(*evolve_args(project, *extra, editor=editor), timeout=timeout)
    finally:
        mp.undo()


def evolution(project: pytest.Pytester, run_id: str = "run1") -> dict:
    """The run's `evolution.json`."""
    return json.loads((project.path / ".ecdysis" / "runs" / run_id / "evolution.json").read_text())


def lines(project: pytest.Pytester, name: str) -> list[str]:
    """The lines of the project's file `name` (a script's log); [] when it was never written."""
    path = project.path / name
    return path.read_text().splitlines() if path.is_file() else []
