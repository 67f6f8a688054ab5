"""A worker's first trials start warm: τ²'s data is read once (also when C trial threads ask at once), and
the harness's server has loaded the domain before the first trial connects (docs/benchmarks.md, "anatomy
of a suite run"). Real τ² data, the real harness server (suite_oracle_harness)."""

from __future__ import annotations

import threading
import time

import pytest
from suite_scripted import ORACLE_HARNESS

pytest.importorskip("tau2")

from pytest_ecdysis_tau2.harness_process import agent_process  # noqa: E402
from pytest_ecdysis_tau2.harness_process.agent_wire import AgentProcess, HarnessProcessError  # noqa: E402
from pytest_ecdysis_tau2.tasks import suite  # noqa: E402


def test_concurrent_first_trials_read_the_database_once_and_each_gets_its_own_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(suite, "_PRISTINE", {})
    reads = []
    module = suite.domain_module("airline")

    class Counting:
        def __getattr__(self, name):
            return getattr(module, name)

        @staticmethod
        def get_environment(**kwargs):
            if not kwargs:  # a read from disk (a copy passes db=)
                reads.append(threading.current_thread().name)
                time.sleep(0.3)  # the threads below all ask while this read is under way
            return module.get_environment(**kwargs)

    monkeypatch.setattr(suite, "domain_module", lambda domain: Counting())
    environments = [None] * 4

    def one(n: int) -> None:
        environments[n] = suite.get_environment("airline")

    threads = [threading.Thread(target=one, args=(n,), name=f"t{n}") for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reads) == 1
    first, second = environments[0].tools.db, environments[1].tools.db
    assert first is not second and first.model_dump() == second.model_dump()
    reservation = next(iter(first.reservations))
    first.reservations[reservation].cabin = "changed by one trial"
    assert second.reservations[reservation].cabin != "changed by one trial"


def test_preload_reads_once_and_later_environments_only_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suite, "_PRISTINE", {})
    suite.preload("airline")
    assert set(suite._PRISTINE) == {"airline"}
    monkeypatch.setattr(
        suite.domain_module("airline"),
        "get_environment",
        _copy_only(suite.domain_module("airline").get_environment),
    )
    assert suite.get_environment("airline").tools.db.reservations


def _copy_only(original):
    def get_environment(**kwargs):
        assert kwargs, "read from disk again after preload"
        return original(**kwargs)

    return get_environment


def test_warm_up_leaves_the_first_connection_nothing_to_load() -> None:
    server = AgentProcess(ORACLE_HARNESS)
    asked: list[str] = []
    original = server.request
    server.request = lambda doc, **kw: asked.append(doc["op"]) or original(doc, **kw)  # type: ignore[method-assign]
    try:
        server.spawn()
        server.warm_up("airline")  # what `warm_up_soon` runs in its thread, on the worker's server
        assert asked == ["check", "domain"]
        assert {str(ORACLE_HARNESS.resolve()), "airline"} <= server.warm
        link = server.connect("airline")
        try:
            assert asked == ["check", "domain"]  # the connection asked the server for nothing more
            assert isinstance(link.pid, int)
        finally:
            link.close()
    finally:
        server.close()


def test_warm_up_soon_runs_in_the_background_and_swallows_what_connect_repeats(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    calls = []

    class Failing:
        def warm_up(self, domain):
            calls.append(domain)
            raise HarnessProcessError("the harness process died")

    monkeypatch.setattr(agent_process, "agent_process", lambda harness_dir: Failing())
    thread = agent_process.warm_up_soon(tmp_path, "airline")
    thread.join(10)
    assert calls == ["airline"] and not thread.is_alive()
    monkeypatch.setenv("ECDYSIS_AGENT_PROCESS", "0")
    assert agent_process.warm_up_soon(tmp_path, "airline") is None
