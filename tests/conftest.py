"""Shared test setup: pytester available, no network, tau2 imports quiet and offline."""

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The simulated model's noisy draws depend on a run nonce (docs/simulated-model.md): fixed in tests, so
# every run, sub-run and rerun is byte-identical.
os.environ["ECDYSIS_SIM_NONCE"] = "tests"

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _own_run_and_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test inherits this session's run id or simulated server: the plugin exports both (for its
    workers), so every pytest a test started reused them: two runs of one test (with
    and without an option, say) sent the same trial headers to the same server, the second continuing the
    first's conversations, and ran on that server's nonce and latency instead of their own options
    (a test of trial identity found it). A test that needs a server starts its own. (Not popped when this file is
    imported: xdist workers of a suite run from the repository root import it too, and lost the
    controller's server before their configure read it.)"""
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    monkeypatch.delenv("ECDYSIS_SIM_URL", raising=False)
    monkeypatch.delenv("ECDYSIS_SESSION_PID", raising=False)


@pytest.fixture(autouse=True)
def _editors_may_write_the_test_tree(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The scripted `cmd:` editors of the loop tests log next to their project (under this session's
    temporary tree), and the route tests (tests/adversarial/test_routes.py, test_contained.py) test the
    integrity checks *behind* the editor's sandbox, which only see a write that landed: this session's
    temporary tree is writable to editors (`ECDYSIS_EDITOR_WRITABLE`, the environment form of
    `--ecdysis-editor-writable`). The sandbox's prevention itself is tested with it cleared
    (tests/adversarial/test_editor_sandbox.py)."""
    monkeypatch.setenv("ECDYSIS_EDITOR_WRITABLE", str(tmp_path_factory.getbasetemp()))


@pytest.fixture
def sim(tmp_path, monkeypatch):
    """The simulated server over HTTP with the toy suite's knowledge (tests/sim_toy.py), profiles read from
    `tmp_path/profiles` (the quirk and instruction tests; a file may define its own `sim`)."""
    from sim_toy import ToyKnowledge

    from pytest_ecdysis.sim.server import start_background

    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path / "profiles"))
    handle = start_background(knowledge={"toy": ToyKnowledge()})
    yield handle
    handle.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """numpy's and scipy's C extensions cannot be loaded twice in one process, and pytester's in-process runs
    drop the modules they imported from sys.modules afterwards: import them before the first test that uses
    pytester (before its fixture takes the snapshot of sys.modules), so the paired acceptance test
    (acceptance.py) works in every in-process run. Not at import: suite runs started from the repository
    root (benchmarks, validation sub-runs of a clone) load this file in every process, and scipy.stats cost
    each about 0.9 CPU s and 60 MB (measured in a breakdown of an evolution round)."""
    if "pytester" in getattr(item, "fixturenames", ()):
        import scipy.stats  # noqa: F401

        # τ² too: a worker whose first τ² import happened inside a pytester test lost τ²'s modules at that
        # test's teardown while `load_tau2`'s cached namespace kept their classes; a later in-process trial
        # then mixed two copies of `AssistantMessage` and SimulationRun refused them ("305 validation
        # errors", tests/adversarial/test_trusted_side.py under -n 2 in CI)
        try:
            import pytest_ecdysis_tau2.trial.runner  # noqa: F401  (imports every τ² module a trial uses)
            from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2
        except ImportError:
            return
        load_tau2()
