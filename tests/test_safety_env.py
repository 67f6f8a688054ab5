"""Ordinary environments lose nothing: an empty endpoint variable (an unset CI secret)
means unset everywhere, the workflows export no empty secret, and a harness note holding a non-JSON value
keeps its trial."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import pytest
import yaml

from pytest_ecdysis.core.config import unset_empty_env
from pytest_ecdysis.core.records import TrialResult

WF = Path(__file__).resolve().parents[1] / ".github" / "workflows"


def test_empty_endpoint_variables_count_as_unset() -> None:
    """Empty or blank `OPENAI_*` / `ECDYSIS_*` values are removed; set ones and other variables stay."""
    env = {
        "OPENAI_BASE_URL": "",
        "OPENAI_API_KEY": " ",
        "ECDYSIS_MODEL": "",
        "ECDYSIS_MAX_RETRIES": "",
        "OPENAI_ORG_ID": "org",
        "HOME": "",
        "GIT_DIR": "",
    }
    assert unset_empty_env(env) == [
        "ECDYSIS_MAX_RETRIES",
        "ECDYSIS_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ]
    assert env == {"OPENAI_ORG_ID": "org", "HOME": "", "GIT_DIR": ""}


ENV_PROBE = """
import os

import openai


def test_env():
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ECDYSIS_MODEL", "ECDYSIS_MAX_RETRIES"):
        assert name not in os.environ, name
    # the openai client falls back to its default instead of the URL ""
    assert str(openai.OpenAI(api_key="k").base_url) == "https://api.openai.com/v1/"
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_empty_base_url_is_unset_in_the_session_and_its_workers(
    pytester: pytest.Pytester, workers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `OPENAI_BASE_URL=""` (and other empty endpoint variables) exported, the session and every xdist
    worker see them unset, so the openai client uses its own default rather than the URL ""."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ECDYSIS_MODEL", "ECDYSIS_MAX_RETRIES"):
        monkeypatch.setenv(name, "")
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    pytester.makepyfile(test_probe=ENV_PROBE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", workers)
    assert result.ret == 0, result.stdout.str()


def _env_maps(doc: dict) -> list[dict]:
    maps = [doc.get("env") or {}]
    for job in (doc.get("jobs") or {}).values():
        maps.append(job.get("env") or {})
        maps += [step.get("env") or {} for step in job.get("steps") or []]
    return maps


@pytest.mark.parametrize("path", sorted(WF.glob("*.yml")), ids=lambda p: p.name)
def test_workflows_export_no_empty_secret(path: Path) -> None:
    """No workflow maps a secret straight onto a variable the tool reads (`OPENAI_*`, `ECDYSIS_*`): an unset
    secret would arrive as an empty string. Secrets go to other names and are exported only when set."""
    for env in _env_maps(yaml.safe_load(path.read_text())):
        for name, value in env.items():
            if name.startswith(("OPENAI_", "ECDYSIS_")):
                assert "secrets." not in str(value), f"{path.name}: {name}: {value}"
    text = path.read_text()
    if (
        "secrets.OPENAI_BASE_URL" in text
    ):  # exported only when set: by a shell guard, or as the action's input
        steps = [
            s for job in (yaml.safe_load(text).get("jobs") or {}).values() for s in job.get("steps") or []
        ]
        as_input = any(
            s.get("uses") == "./" and "secrets.OPENAI_BASE_URL" in str((s.get("with") or {}).get("base-url"))
            for s in steps
        )
        assert 'if [ -n "$URL_SECRET" ]' in text or as_input, path.name


def test_the_action_exports_an_empty_base_url_input_as_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workflow passes `base-url: ${{ secrets.OPENAI_BASE_URL }}` to the action (`uses: ./`): an unset secret is
    an empty input, and the action's run script exports `OPENAI_BASE_URL` only when the input is not empty."""
    from pytest_ecdysis.ci import action

    seen: dict[str, str] = {}

    def fake_run(args, env=None, **kw):  # the suite's pytest: record the environment, write no run
        seen.update(env or {})
        raise SystemExit(0)

    monkeypatch.setattr(action.subprocess, "run", fake_run)
    for url in ("", "http://model:8000/v1"):
        seen.clear()
        env = {
            "INPUT_MODE": "baseline",
            "INPUT_PATHS": "tests",
            "INPUT_BASE_URL": url,
            "INPUT_MODEL": "m",
            "INPUT_API_KEY": "k",
            "PATH": "/usr/bin",
        }
        try:
            action.run(env)
        except SystemExit:
            pass
        assert seen, "the suite was not started"
        assert seen.get("OPENAI_BASE_URL") == (url or None)


class Kind(Enum):
    REPAIRED = "repaired_reply"


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque 7>"


def test_notes_with_non_json_values_are_converted_and_flagged() -> None:
    """An Enum member becomes its value, any other object its repr; the note names the converted keys; the
    trial still serialises (it used to raise at `model_dump(mode="json")`)."""
    t = TrialResult(
        suite="s",
        task_id="1",
        trial=0,
        reward=1.0,
        termination_reason="agent_stop",
        harness_notes=[
            {"kind": Kind.REPAIRED, "step": 3, "detail": {"obj": Opaque(), "n": [1]}},
            {"kind": "budget_exhausted"},
            "free text",
        ],
    )
    notes = json.loads(t.model_dump_json())["harness_notes"]
    assert notes == [
        {
            "kind": "repaired_reply",
            "step": 3,
            "detail": {"obj": "<Opaque 7>", "n": [1]},
            "unserialisable": ["kind", "detail"],
        },
        {"kind": "budget_exhausted"},
        {"kind": "note", "detail": "free text"},
    ]
    assert t.model_dump(mode="json")["reward"] == 1.0


NOTES_SUITE = """
from enum import Enum

import pytest
from pytest_ecdysis import TrialResult, record_trial


class Kind(Enum):
    REPAIRED = "repaired_reply"


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", ["0", "1"])
def test_task(request, task_id):
    record_trial(request.node, TrialResult(
        suite="tiny", task_id=task_id, trial=0, reward=1.0, termination_reason="agent_stop",
        harness_notes=[{"kind": Kind.REPAIRED, "detail": object(), "step": 1}]))
"""


def test_a_trial_with_an_odd_harness_note_is_kept(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through pytest with `-n 2`: both trials pass and are written with their reward; the notes are flagged."""
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    pytester.makepyfile(test_tiny=NOTES_SUITE)
    (pytester.path / "h").mkdir()
    (pytester.path / "h" / "__init__.py").write_text("def build_agent(**kw):\n    return None\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--ecdysis-harness", "h", "--ecdysis-run-dir", "runs"
    )
    assert result.ret == 0, result.stdout.str()
    (run,) = (pytester.path / "runs").iterdir()
    trials = [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines()]
    assert [t["reward"] for t in trials] == [1.0, 1.0]
    assert all(t["harness_notes"][0]["unserialisable"] == ["kind", "detail"] for t in trials)
    assert json.loads((run / "summary.json").read_text())["problems"] == []


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_session_nested_in_another_gets_its_own_run_and_server(
    pytester: pytest.Pytester, workers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytest started from inside a running session (an editor's or a harness's) inherits the run id and
    simulated server that session exported for its workers; used, its files went into the outer run
    directory and its trials continued the outer conversations. Marked as another process's, both are
    dropped: the nested run writes its own run directory and starts its own server (also under xdist, whose
    workers still get the nested session's)."""
    monkeypatch.setenv("ECDYSIS_RUN_ID", "outer")
    monkeypatch.setenv("ECDYSIS_SIM_URL", "http://127.0.0.1:9")  # the outer session's server (gone)
    monkeypatch.setenv("ECDYSIS_SESSION_PID", "1")  # exported by another process's session
    pytester.makepyfile(test_tiny=NOTES_SUITE)
    (pytester.path / "h").mkdir()
    (pytester.path / "h" / "__init__.py").write_text("def build_agent(**kw):\n    return None\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", workers, "--ecdysis-harness", "h", "--ecdysis-run-dir", "runs"
    )
    assert result.ret == 0, result.stdout.str()
    (run,) = (pytester.path / "runs").iterdir()
    assert run.name != "outer" and len((run / "trials.jsonl").read_text().splitlines()) == 2
    result.stdout.fnmatch_lines(["*simulated model (not a real LLM) serving at http://127.0.0.1:*"])
    assert "127.0.0.1:9 " not in result.stdout.str()
    # set by the user (no session marker), the run id is used as given
    monkeypatch.delenv("ECDYSIS_SESSION_PID")
    monkeypatch.setenv("ECDYSIS_RUN_ID", "chosen")
    assert (
        pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-n", workers, "--ecdysis-harness", "h", "--ecdysis-run-dir", "runs"
        ).ret
        == 0
    )
    assert (pytester.path / "runs" / "chosen" / "summary.json").is_file()
