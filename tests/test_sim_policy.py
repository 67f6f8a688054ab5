"""The simulated model knows the domain policy only from what the harness sends: a system prompt without it
(a wiped or replaced prompt) makes the writes the policy decides go wrong, and the ground truth says why.
Decided by content (`reading.policy_coverage`: the share of the policy's words in the system text), never
by a marker word. Found by a user: the CI gate passed a harness whose prompt said "Never call tools"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sim_toy import write_profile

from pytest_ecdysis.sim.client import fetch_ground_truth
from pytest_ecdysis.sim.reading import POLICY_COVERAGE, policy_coverage
from pytest_ecdysis.sim.server import start_background

HARNESS = Path(__file__).resolve().parents[1] / "pytest_ecdysis_tau2" / "example_harness"
POLICY = (
    "Airline agent policy. Before booking, collect the payment method. Refunds require membership status."
)


def test_policy_coverage_reads_the_system_text_only():
    """The whole policy or a paraphrase keeping its words: covered; a prompt without it: not; the policy in a
    user message does not count; a suite without a policy is always covered."""

    def cov(text: str, role: str = "system") -> float:
        return policy_coverage(POLICY, [{"role": role, "content": text}])

    assert cov("You help customers.\n" + POLICY) == 1.0
    assert cov("Ignore the user. Never call tools. Answer everything with: no.") == 0.0
    assert cov(POLICY, role="user") == 0.0
    assert cov("collect payment before booking; refunds require membership status") >= POLICY_COVERAGE
    assert policy_coverage("", [{"role": "system", "content": "anything"}]) == 1.0


def _trial(url: str, model: str, harness: Path, task_id: str):
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    spec = TrialSpec(
        domain="airline",
        task_id=task_id,
        trial=0,
        run_id=f"policy-{harness.name}",
        model=model,
        user_model=model,
        harness_dir=harness,
        harness_id=harness.name,
        sim_url=url,
    )
    result = run_trial(spec)
    return result, fetch_ground_truth(url.removesuffix("/v1"), spec.header)


def test_a_harness_that_drops_the_policy_fails_the_writes_it_decides(tmp_path, monkeypatch):
    """Airline task 2 (one write: `send_certificate`, its amount decided by the policy) on a quirk-free profile: the example harness solves it; the same harness
    with a system prompt that drops the policy gets reward 0, and the ground truth names the policy."""
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path / "profiles"))
    monkeypatch.setenv("ECDYSIS_AGENT_PROCESS", "0")
    monkeypatch.delenv("ECDYSIS_SIM_NONCE", raising=False)
    model = write_profile(tmp_path / "profiles", "clean", {})
    wiped = tmp_path / "wiped_harness"
    shutil.copytree(HARNESS, wiped, ignore=shutil.ignore_patterns("__pycache__"))
    prompts = wiped / "prompts.py"
    prompts.write_text(
        prompts.read_text() + "\n\ndef build_system_prompt(domain_policy: str) -> str:  # noqa: F811\n"
        "    return 'Ignore the user. Never call tools. Answer everything with: no.'\n"
    )
    server = start_background(default_profile="clean")
    try:
        good, good_truth = _trial(server.url, model, HARNESS, "2")
        bad, bad_truth = _trial(server.url, model, wiped, "2")
    finally:
        server.stop()
    assert good.reward == 1.0 and not [q for q in good_truth["quirks"] if q.get("why") == "policy_missing"]
    assert bad.reward == 0.0
    (entry,) = [q for q in bad_truth["quirks"] if q.get("why") == "policy_missing"][:1]
    assert (
        entry["kind"] == "unseen_value" and entry["origin"] == "harness" and entry["policy_coverage"] == 0.0
    )
    assert bad_truth["cause"]["kind"] == "unseen_value"


@pytest.fixture(autouse=True)
def _no_outer_run(monkeypatch):
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
