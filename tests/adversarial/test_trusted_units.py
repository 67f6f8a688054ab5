"""Units of the trusted side, each tested on its own: redaction of known secrets, the static check's
alias following, the git commands' fixed configuration, the sub-run environment scrub, the agreement of
`trials.jsonl` with `summary.json`, and the suspect-task cache verified when read."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pytest_ecdysis.core import secrets
from pytest_ecdysis.validate.static import check_file

KEY = "sk-test-27-abcdefghijklmnop"


def test_redact_covers_raw_json_escaped_and_url_quoted_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every known secret (names ending _KEY/_TOKEN/_SECRET, >= 8 chars; registered values) is replaced by
    a label; short values and other variables are left alone."""
    odd = 'pa"ss/wo\\rd+1'
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GH_TOKEN", odd)
    monkeypatch.setenv("SHORT_KEY", "sim")
    monkeypatch.setenv("HOME_DIR_NAME", KEY[::-1])
    text = f"a {KEY} b {json.dumps(odd)} c https://x/?k={odd.replace('/', '%2F').replace('+', '%2B')} sim"
    from urllib.parse import quote

    text += " " + quote(odd, safe="")
    out = secrets.redact(text)
    assert (
        KEY not in out
        and odd not in out
        and json.dumps(odd)[1:-1] not in out
        and quote(odd, safe="") not in out
    )
    assert (
        "[redacted:OPENAI_API_KEY]" in out
        and "[redacted:GH_TOKEN]" in out
        and out.endswith("sim" + " " + "[redacted:GH_TOKEN]")
    )
    assert secrets.redact_json({"k": [KEY, {"n": 1}], KEY: None}) == {
        "k": ["[redacted:OPENAI_API_KEY]", {"n": 1}],
        "[redacted:OPENAI_API_KEY]": None,
    }
    secrets.register("registered-secret-value", "OPTION")
    assert secrets.redact("x registered-secret-value") == "x [redacted:OPTION]"


def test_redact_file_and_tree_rewrite_only_files_with_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    (tmp_path / "a.log").write_bytes(b"\x00bin " + KEY.encode() + b" tail")
    (tmp_path / "b.txt").write_text("clean")
    assert secrets.redact_tree(tmp_path) == [tmp_path / "a.log"]
    assert (tmp_path / "a.log").read_bytes() == b"\x00bin [redacted:ANTHROPIC_API_KEY] tail"


ALIASES = {
    "_r = open\n_r('tasks')\n": "file_access",
    "_imp = __import__\n_imp('os')\n": "dynamic_code",
    "c = compile\n": "dynamic_code",
    "import os\nm = os\nprint(m.environ)\n": "environment",
    "import os\na = os\nb = a\nb.environ.get('K')\n": "environment",
    "import os\nclass A:\n    def __init__(self):\n        self.m = os\n    def f(self):\n        return self.m.environ\n": "environment",
    "import os, sys\nm, s = os, sys\ns.modules\n": "introspection",
    "import json\nj = json\nprint(j.__file__)\n": "introspection",
    "import os\nprint(getattr(os, 'environ'))\n": "environment",
    "import json\nprint(getattr(json, '__file__'))\n": "introspection",
    "p = 'tas' + 'ks.json'\n": "gold_data",
    "p = f\"{'tasks'}.json\"\n": "gold_data",
    "p = '/'.join(['domains', 'airline', 'tasks.json'])\n": "gold_data",
    "def f(client):\n    return client.default_headers['X-Ecdysis-Trial']\n": "gold_data",
    "def f(open=open):\n    return open('x')\n": "patches_code",
    "g = getattr\n": "patches_code",
    "import os\nif (m := os):\n    m.environ\n": "environment",
}


@pytest.mark.parametrize("source", list(ALIASES))
def test_the_static_check_follows_aliases(source: str) -> None:
    """Each alias of a builtin or module through a simple assignment (and constants built from pieces) is
    flagged under the rule of what it stands for."""
    rules = {f.rule for f in check_file("agent.py", source.encode())}
    assert ALIASES[source] in rules, (source, rules)


def test_the_example_harness_has_no_finding() -> None:
    root = Path(__file__).resolve().parents[2] / "pytest_ecdysis_tau2" / "example_harness"
    found = [str(f) for p in sorted(root.rglob("*.py")) for f in check_file(p.name, p.read_bytes())]
    assert found == []


def test_the_tools_git_commands_ignore_planted_config(tmp_path: Path) -> None:
    """`core.fsmonitor` and `core.hooksPath` in the repository's config, a global config with an include:
    the tool's git runner runs none of them."""
    from pytest_ecdysis.git.run import Git

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (
        ("init", "-q"),
        ("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "--allow-empty", "-m", "x"),
    ):
        subprocess.run(["git", *args], cwd=repo, check=True)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "post-checkout").write_text(f"#!/bin/sh\ntouch {tmp_path / 'hook-ran'}\n")
    (hooks / "post-checkout").chmod(0o755)
    subprocess.run(
        ["git", "config", "core.fsmonitor", f"touch {tmp_path / 'fsmonitor-ran'}; false"],
        cwd=repo,
        check=True,
    )
    subprocess.run(["git", "config", "core.hooksPath", str(hooks)], cwd=repo, check=True)
    runner = Git(repo)
    runner.status()
    runner.checkout("-q", "-b", "other")
    assert not (tmp_path / "fsmonitor-ran").exists() and not (tmp_path / "hook-ran").exists()
    subprocess.run(["git", "status"], cwd=repo, capture_output=True)  # plain git runs it: the test is live
    assert (tmp_path / "fsmonitor-ran").exists()


def test_the_sub_run_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routes that load code before the suite, repository-local git variables, xdist's and the outer
    session's ids are not inherited; user site-packages are off; the run id and sim URL are the sub-run's."""
    from pytest_ecdysis.validate.setup import SCRUBBED_ENV, subrun_env

    for name in (
        *SCRUBBED_ENV,
        "GIT_DIR",
        "GIT_INDEX_FILE",
        "PYTEST_XDIST_WORKER",
        "PYTEST_CURRENT_TEST",
        "ECDYSIS_SESSION_PID",
    ):
        monkeypatch.setenv(name, "/planted")
    monkeypatch.setenv("ECDYSIS_SIM_URL", "http://outer")
    env = subrun_env("run1-r1", "http://127.0.0.1:5")
    for name in (
        *SCRUBBED_ENV,
        "GIT_DIR",
        "GIT_INDEX_FILE",
        "PYTEST_XDIST_WORKER",
        "PYTEST_CURRENT_TEST",
        "ECDYSIS_SESSION_PID",
    ):
        assert name not in env, name
    assert env["ECDYSIS_RUN_ID"] == "run1-r1" and env["ECDYSIS_SIM_URL"] == "http://127.0.0.1:5"
    assert env["PYTHONNOUSERSITE"] == "1" and env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_trials_and_summary_must_agree() -> None:
    """A summary edited after the fact (score, trial count, infrastructure errors) disagrees with
    `trials.jsonl`; the honest pair agrees."""
    from pytest_ecdysis.validate.results import disagreement

    trials = [
        {"reward": 1.0, "termination_reason": "agent_stop"},
        {"reward": 0.0, "termination_reason": "user_stop"},
        {"reward": None, "termination_reason": "infrastructure_error"},
    ]
    honest = {"n_trials": 3, "n_infra_errors": 1, "suite_score": 0.5}
    assert disagreement(honest, trials) is None
    assert "score" in disagreement({**honest, "suite_score": 1.0}, trials)
    assert "trials" in disagreement({**honest, "n_trials": 2}, trials)
    assert "infrastructure" in disagreement({**honest, "n_infra_errors": 0}, trials)
    assert "numeric" in disagreement(honest, [*trials, {"reward": None, "termination_reason": "agent_stop"}])


def test_a_rewritten_suspect_cache_is_not_believed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped table decides for τ² 26.3; for another version, a cache marking every task suspect fails
    verification and is recomputed (here: airline, whose gold actions all replay)."""
    pytest.importorskip("tau2")
    from pytest_ecdysis_tau2.tasks import suite
    from pytest_ecdysis_tau2.trial import suspect

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(suspect, "tau2_version", lambda: "0.0-test")
    suspect.suspect_tasks.cache_clear()
    path = suspect.cache_path("airline")
    path.parent.mkdir(parents=True)
    forged = {
        tid: [{"index": 0, "name": "x", "error": "forged"}] for tid in list(suite.all_tasks("airline"))[:3]
    }
    path.write_text(json.dumps({"schema_version": 1, "tau2_version": "0.0-test", "suspect": forged}))
    monkeypatch.setattr(suspect, "compute", lambda domain: {})  # the recomputation (15-20 s) stubbed
    try:
        assert suspect.suspect_tasks("airline") == {}
        assert json.loads(path.read_text())["suspect"] == {}
    finally:
        suspect.suspect_tasks.cache_clear()
    assert suspect.known("26.3")["retail"]["12"]  # the shipped table


def _plant(package: Path, real: str, fake: str) -> Path:
    """`package/__init__.py` holding `real`, and a cache file compiled from `fake` whose header carries the
    real source's mtime and size (what Python checks before loading it)."""
    import importlib.util
    import os
    import py_compile

    package.mkdir(parents=True)
    source = package / "__init__.py"
    source.write_text(real)
    stat = source.stat()
    decoy = package.parent / f"{package.name}_decoy.py"
    decoy.write_text(fake)
    target = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(decoy), cfile=str(target))
    data = bytearray(target.read_bytes())
    data[8:12] = (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    data[12:16] = (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    target.write_bytes(bytes(data))
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return target


def test_a_planted_bytecode_cache_is_found_and_removed(tmp_path: Path) -> None:
    """A cache compiled from other code with the source's mtime and size in its header (Python would load
    it: checked in a subprocess) is found and deleted; an honest cache is kept and not compiled twice."""
    import py_compile
    import sys

    from pytest_ecdysis.validate.bytecode import poisoned

    planted = _plant(tmp_path / "victim", "REWARD = 0.0\n", "REWARD = 1.0\n")
    loaded = subprocess.run(
        [sys.executable, "-c", "import victim; print(victim.REWARD)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert loaded.stdout.strip() == "1.0", "the planted cache is not loaded: the test proves nothing"
    honest = tmp_path / "honest" / "__init__.py"
    honest.parent.mkdir()
    honest.write_text("REWARD = 0.0\n")
    kept = Path(py_compile.compile(str(honest)))
    assert poisoned(tmp_path) == [planted]
    assert not planted.exists() and kept.exists()
    assert poisoned(tmp_path) == []


def test_pytest_assertion_rewrite_caches_are_checked_against_the_rewritten_code(tmp_path: Path) -> None:
    """pytest rewrites the asserts of a plugin distribution's packages (pytest-ecdysis installed from the
    wheel) and caches them as `*.<tag>-pytest-<version>.pyc`: such an honest cache is kept (it was reported as
    planted and stopped a wheel-installed evolution), one of other code is found and deleted."""
    import importlib.util
    import marshal

    from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test

    from pytest_ecdysis.validate.bytecode import poisoned

    source = tmp_path / "plugin_pkg" / "mod.py"
    source.parent.mkdir()
    source.write_text("def check(reward):\n    assert reward >= 0, reward\n    return reward\n")
    source_hash, code = _rewrite_test(source, None)
    cache = source.parent / "__pycache__" / ("mod" + PYC_TAIL)
    cache.parent.mkdir()
    header = importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00" + source_hash[:8]
    cache.write_bytes(header + marshal.dumps(code))  # as pytest's _write_pyc_fp writes it
    assert "-pytest-" in cache.name
    assert poisoned(tmp_path) == [] and cache.exists()
    cache.write_bytes(
        header + marshal.dumps(compile("def check(reward):\n    return 1.0\n", str(source), "exec"))
    )
    assert poisoned(tmp_path) == [cache] and not cache.exists()


def test_integrity_names_changes_to_tau2_the_startup_files_and_planted_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checksums cover the protected packages (here a stand-in for τ²), Python's startup files (`*.pth`,
    `sitecustomize.py` in the site directories) and the packages' bytecode caches: each change is named."""
    import site

    from pytest_ecdysis.validate import integrity

    package, site_dir = tmp_path / "tau2", tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "a.pth").write_text("/somewhere\n")
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "tasks.json").write_text("[]")
    monkeypatch.setattr(integrity, "PROTECTED_PACKAGES", ("tau2",))
    monkeypatch.setattr(integrity, "suite_packages", lambda: [])
    monkeypatch.setattr(integrity, "package_dir", lambda name: package if name == "tau2" else None)
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(site_dir)])
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(tmp_path / "no-user-site"))
    roots = integrity.protected_roots(None)
    before = integrity.take(roots)
    assert integrity.changes(before, integrity.take(roots)) == []
    (package / "data" / "tasks.json").write_text('[{"gold": 1}]')
    (site_dir / "sitecustomize.py").write_text("import os\n")
    (site_dir / "a.pth").write_text("import evil\n")
    _plant(package / "evaluator", "REWARD = 0.0\n", "REWARD = 1.0\n")
    roots = integrity.protected_roots(None)
    found = integrity.changes(before, integrity.take(roots))
    assert "package tau2: data/tasks.json changed" in found
    assert any("a.pth changed" in f for f in found) and any("sitecustomize.py added" in f for f in found)
    assert any("evaluator/__pycache__" in f and "removed" in f for f in found), found
