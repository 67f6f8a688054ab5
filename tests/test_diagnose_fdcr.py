"""diagnose(): call counts, transcript and spec files, structured-output repair, bad input."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx2
import pytest
from test_diagnose_support import (
    cfg,
    id_prefix_records,
    incomplete_records,
    rec,
    scripted_client,
    sim_client,
    write_harness,
)

from pytest_ecdysis.core.errors import InfrastructureError, UsageError
from pytest_ecdysis.diagnose.round import diagnose
from pytest_ecdysis.endpoint.role_client import DEFAULT_TIMEOUT_S, RoleClient
from pytest_ecdysis.evidence.patterns import group

GOOD_SPEC = {
    "summary": "Name the argument in tool errors.",
    "changes": [
        {
            "component": "environment_contract",
            "files": ["feedback.py"],
            "description": "errors name the argument and expected form",
            "trigger": "tool error",
            "addresses": ["too_many_errors|db|get_order_details|not_found"],
            "parameters": {"knob": "error_feedback"},
        }
    ],
    "left_alone": [],
    "watch_tasks": [],
}


def run(tmp_path, answer, *, strategy="ecdysis", passes=2, records=None, log=None):
    harness = write_harness(tmp_path)
    records = id_prefix_records() if records is None else records
    log = [] if log is None else log
    d = diagnose(
        records=records,
        groups=group(records),
        harness_dir=harness,
        history=[],
        solved_tasks=[],
        cfg=cfg(passes),
        round_dir=tmp_path / "round",
        strategy=strategy,
        client=scripted_client(answer, log),
    )
    return d, log


def scripted(spec_answers):
    """Roles answer prose; the spec-writing turns answer from `spec_answers` in order."""
    answers = list(spec_answers)

    def fn(role, body):
        wants_spec = 'format="spec"' in body["messages"][1]["content"]
        return answers.pop(0) if wants_spec else f"{role} notes"

    return fn


@pytest.mark.parametrize("passes", [1, 2, 3])
def test_fdcr_makes_3k_plus_1_calls_in_role_order(tmp_path, passes):
    """With FDCR: K passes of analyst, critic, engineer, then the moderator: 3K+1 calls, logged in order."""
    d, log = run(tmp_path, scripted([json.dumps(GOOD_SPEC)]), passes=passes)
    assert d.calls == len(log) == 3 * passes + 1
    assert [r for r, _ in log] == ["analyst", "critic", "engineer"] * passes + ["moderator"]
    lines = [json.loads(x) for x in (tmp_path / "round" / "transcript.jsonl").read_text().splitlines()]
    assert [(x["role"], x["pass"]) for x in lines][-1] == ("moderator", None)
    assert [x["pass"] for x in lines[:-1]] == [p for p in range(1, passes + 1) for _ in range(3)]
    assert all(set(x) >= {"role", "pass", "content", "tokens", "wall_s"} for x in lines)
    assert d.tokens == {"prompt": 100 * len(log), "completion": 20 * len(log), "total": 120 * len(log)}
    spec = json.loads((tmp_path / "round" / "spec.json").read_text())
    assert spec["schema_version"] == 1 and spec["changes"][0]["files"] == ["feedback.py"]
    assert d.spec is not None and d.reason == ""


def test_later_roles_see_the_shared_transcript(tmp_path):
    """Every role turn after the first carries the earlier turns of the shared transcript."""
    d, log = run(tmp_path, scripted([json.dumps(GOOD_SPEC)]), passes=2)
    moderator_prompt = log[-1][1]["messages"][1]["content"]
    assert moderator_prompt.count("<turn role=") == 6
    assert '<turn role="critic" pass="2">\ncritic notes\n</turn>' in moderator_prompt
    assert "<turn role=" not in log[0][1]["messages"][1]["content"]


def test_nofdcr_makes_one_analyst_call(tmp_path):
    """Without FDCR a single analyst call writes the spec; the transcript has one analyst line."""
    d, log = run(tmp_path, scripted([json.dumps(GOOD_SPEC)]), strategy="ecdysis-nofdcr")
    assert d.calls == len(log) == 1 and log[0][0] == "analyst"
    lines = (tmp_path / "round" / "transcript.jsonl").read_text().splitlines()
    assert [json.loads(x)["role"] for x in lines] == ["analyst"] and d.spec is not None


def test_fenced_json_in_prose_is_parsed_without_repair(tmp_path):
    """The fallback parser finds a spec in a fenced block inside prose: no repair call is needed."""
    answer = "Here is the spec.\n```json\n" + json.dumps(GOOD_SPEC) + "\n```\nDone."
    d, log = run(tmp_path, scripted([answer]), passes=1)
    assert d.spec is not None and len(log) == 4


def test_malformed_moderator_answer_is_repaired_once(tmp_path):
    """A moderator answer that does not validate gets one repair call naming the problem; the repaired
    spec is used and both turns are in the transcript."""
    bad = json.dumps({"summary": "x", "changes": [{"component": "magic", "files": ["feedback.py"]}]})
    d, log = run(tmp_path, scripted([bad, json.dumps(GOOD_SPEC)]), passes=1)
    assert d.spec is not None and len(log) == 5
    assert "changes.0.component" in log[-1][1]["messages"][-1]["content"]
    lines = [json.loads(x) for x in (tmp_path / "round" / "transcript.jsonl").read_text().splitlines()]
    assert [x["role"] for x in lines[-2:]] == ["moderator", "moderator"] and lines[-1].get("repair") is True


def test_malformed_twice_is_reported_and_transcript_kept(tmp_path):
    """Malformed JSON twice: no spec, reason invalid_spec with a message, transcript kept, no spec.json."""
    d, log = run(tmp_path, scripted(["{not json", "still {not json"]), passes=1)
    assert d.spec is None and d.reason == "invalid_spec" and "no JSON object" in d.detail
    assert len((tmp_path / "round" / "transcript.jsonl").read_text().splitlines()) == 5
    assert not (tmp_path / "round" / "spec.json").exists()


def test_spec_naming_files_outside_the_harness_is_rejected(tmp_path):
    """A spec that names a file outside the harness (twice) is rejected with the file named."""
    outside = "../pytest_ecdysis_tau2/scoring/scorer.py"
    bad = dict(GOOD_SPEC, changes=[dict(GOOD_SPEC["changes"][0], files=[outside])])
    d, _ = run(tmp_path, scripted([json.dumps(bad)] * 2), passes=1)
    assert d.spec is None and d.reason == "outside_harness"
    assert "../pytest_ecdysis_tau2/scoring/scorer.py" in d.detail and "outside the harness" in d.detail


def test_harness_dir_prefix_on_paths_is_tolerated(tmp_path):
    """`harness/feedback.py` (the harness directory's own name as prefix) is read as `feedback.py`."""
    ok = dict(GOOD_SPEC, changes=[dict(GOOD_SPEC["changes"][0], files=["harness/feedback.py"])])
    d, _ = run(tmp_path, scripted([json.dumps(ok)]), passes=1)
    assert d.spec is not None and d.spec.changes[0].files == ["feedback.py"]


def test_empty_spec_is_no_spec(tmp_path):
    """A valid spec with no change is written, but the round gets no spec (reason no_spec)."""
    empty = {"summary": "nothing", "changes": [], "left_alone": [{"signature": "s", "reason": "model"}]}
    d, _ = run(tmp_path, scripted([json.dumps(empty)]), passes=1)
    assert d.spec is None and d.reason == "no_spec" and (tmp_path / "round" / "spec.json").exists()
    assert (
        d.detail == "the spec proposes no change, 1 group(s) left alone"
    )  # it goes inside "no spec (...)" lines


@pytest.mark.parametrize("records", [[], [rec("1", suspect=True)], [rec("1", reason="infrastructure_error")]])
def test_no_failures_means_no_call(tmp_path, records):
    """No usable failures (none, only suspect tasks, only infrastructure errors): no call, reason no_failures."""

    def never(role, body):
        raise AssertionError("no role may be called")

    d, log = run(tmp_path, never, records=records)
    assert d.spec is None and d.reason == "no_failures" and log == [] and d.calls == 0


def test_endpoint_failure_is_infrastructure_error_and_keeps_transcript(tmp_path):
    """A 500 from the endpoint (after retries) is an InfrastructureError; earlier turns stay on disk."""
    calls = []

    def fn(role, body):
        calls.append(role)
        return (
            "analyst notes" if len(calls) == 1 else httpx2.Response(500, json={"error": {"message": "boom"}})
        )

    with pytest.raises(InfrastructureError, match="HTTP 500"):
        run(tmp_path, fn, passes=1)
    lines = (tmp_path / "round" / "transcript.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["role"] == "analyst"


def test_json_mode_rejected_by_endpoint_is_dropped(tmp_path):
    """An endpoint that rejects response_format (HTTP 400 naming it) is asked again without it."""
    seen = []

    def fn(role, body):
        seen.append("response_format" in body)
        if "response_format" in body:
            return httpx2.Response(400, json={"error": {"message": "response_format is not supported"}})
        return json.dumps(GOOD_SPEC)

    d, _ = run(tmp_path, fn, strategy="ecdysis-nofdcr")
    assert d.spec is not None and seen == [True, False]


def test_sim_model_goes_to_sim_server_with_role_header(monkeypatch):
    """`sim...` models use $ECDYSIS_SIM_URL/v1 with key 'sim'; without the variable it is a usage error."""
    monkeypatch.delenv("ECDYSIS_SIM_URL", raising=False)
    with pytest.raises(UsageError, match="ECDYSIS_SIM_URL"):
        RoleClient("sim/default")
    monkeypatch.setenv("ECDYSIS_SIM_URL", "http://127.0.0.1:9999")
    client = RoleClient("sim/default")
    assert str(client._client.base_url).rstrip("/") == "http://127.0.0.1:9999/v1"
    assert client._client.api_key == "sim"


def test_real_model_without_endpoint_or_key_is_usage_error(monkeypatch):
    """A real diagnosis model with neither a base URL nor OPENAI_API_KEY is a usage error naming the fix."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(UsageError, match="--ecdysis-base-url"):
        RoleClient("gpt-4o-mini")


def test_sim_roles_end_to_end_through_openai_client(tmp_path):
    """FDCR with the simulated roles over the openai client gives a validated spec addressing both groups."""
    records = id_prefix_records() + incomplete_records()
    harness = write_harness(tmp_path)
    log = []
    d = diagnose(
        records=records,
        groups=group(records),
        harness_dir=harness,
        history=[],
        solved_tasks=[],
        cfg=cfg(2),
        round_dir=tmp_path / "r",
        client=sim_client(log),
    )
    knobs = {c.parameters["knob"] for c in d.spec.changes}
    assert knobs == {"error_feedback", "id_normalisation", "completion_check"} and len(log) == 7


def test_rejected_optional_parameters_are_not_sent_again(tmp_path):
    """An endpoint rejecting max_tokens (e.g. reasoning models) is asked again without it, on every later call."""
    seen = []

    def fn(role, body):
        seen.append("max_tokens" in body)
        if "max_tokens" in body:
            return httpx2.Response(400, json={"error": {"message": "Unsupported parameter: 'max_tokens'"}})
        return json.dumps(GOOD_SPEC) if 'format="spec"' in body["messages"][1]["content"] else "notes"

    d, log = run(tmp_path, fn, passes=1)
    assert d.spec is not None and seen == [True] + [False] * 4


def test_a_prompt_that_fits_without_its_max_tokens_is_asked_again_with_the_room_left(tmp_path):
    """vLLM's older OpenAI server (max_model_len 8192) refuses prompt + max_tokens over the context with
    HTTP 400 even when the prompt itself fits: asked again with max_tokens = the room left; a prompt that
    does not fit at all stays a context overflow (no spec, reason context_overflow)."""
    seen = []

    def answer(messages):
        def fn(role, body):
            seen.append(body.get("max_tokens"))
            if body.get("max_tokens", 0) + messages > 8192:
                return httpx2.Response(
                    400,
                    json={
                        "error": {
                            "message": f"This model's maximum context length is 8192 tokens. However, you requested "
                            f"{messages + body['max_tokens']} tokens ({messages} in the messages, "
                            f"{body['max_tokens']} in the completion). Please reduce the length of the "
                            "messages or completion.",
                            "type": "invalid_request_error",
                            "param": "messages",
                            "code": "context_length_exceeded",
                        }
                    },
                )
            return json.dumps(GOOD_SPEC)

        return fn

    d, _ = run(tmp_path / "fits", answer(5004), strategy="ecdysis-nofdcr")
    assert d.spec is not None and seen == [4096, 3188]
    seen.clear()
    d, _ = run(tmp_path / "too_long", answer(9000), strategy="ecdysis-nofdcr")
    assert d.spec is None and d.reason == "context_overflow" and seen == [4096]


def test_role_calls_wait_at_least_as_long_as_the_call_timeout_a_user_raised():
    """A slow endpoint's user raises --ecdysis-limits call-timeout; role calls (default 180 s per attempt) get it
    too when it is longer, instead of being cut and asked again from the start."""

    def cfg_with(seconds):
        return SimpleNamespace(
            diagnosis_model="local",
            base_url="http://127.0.0.1:1/v1",
            call_timeout_s=seconds,
            max_retries=0,
            diagnosis_budget_s=1800.0,
        )

    assert RoleClient.from_config(cfg_with(600.0)).timeout_s == 600.0
    assert RoleClient.from_config(cfg_with(60.0)).timeout_s == DEFAULT_TIMEOUT_S == 180.0


def test_absolute_paths_inside_the_harness_are_made_relative(tmp_path):
    """An absolute path inside the harness is accepted as relative; an absolute path elsewhere is refused."""
    from pytest_ecdysis.core.errors import SpecError
    from pytest_ecdysis.diagnose.spec import validate_spec

    harness = write_harness(tmp_path)
    inside = dict(GOOD_SPEC, changes=[dict(GOOD_SPEC["changes"][0], files=[str(harness / "feedback.py")])])
    assert validate_spec(inside, harness).changes[0].files == ["feedback.py"]
    elsewhere = dict(GOOD_SPEC, changes=[dict(GOOD_SPEC["changes"][0], files=["/etc/passwd"])])
    with pytest.raises(SpecError, match="/etc/passwd"):
        validate_spec(elsewhere, harness)
