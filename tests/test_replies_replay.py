"""Recorded and documented endpoint replies (`tests/fixtures/replies/<server>/*.json`) replayed through the
real code paths: a τ² trial of the example harness (agent replies) and diagnosis / the built-in editor
(role replies), over the real openai client with an `httpx2.MockTransport`.

A fixture is `{"server", "kind", "status", "source", "body"}`: `body` is the HTTP body the server sent (or,
for servers not run here, wrote per its documented format: `source` says which). `kind` decides what must
happen; `KINDS` below is the table. `llamacpp/` holds raw replies of the real llama.cpp server
(llama-cpp-python) recorded by `scripts/real-model.sh`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import httpx2
import openai
import pytest
from suite_scripted import EXAMPLE_HARNESS, ScriptedModel, run, text
from test_diagnose_support import id_prefix_records

from pytest_ecdysis.core.errors import InfrastructureError
from pytest_ecdysis.diagnose.round import diagnose
from pytest_ecdysis.edit.editors import REPAIR_ECHO_CHARS, BuiltinEditor
from pytest_ecdysis.endpoint.role_client import RoleClient
from pytest_ecdysis.evidence.patterns import group

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "replies"
#: kind -> the paths it is replayed through.
KINDS = {
    "tool_call": ("agent",),
    "text": ("agent",),
    "tool_call_as_text": ("agent",),
    "empty": ("agent", "role"),
    "context_overflow": ("agent", "role", "editor"),
    "server_error": ("agent", "role"),
    "spec": ("role",),
    "spec_unparseable": ("role",),
    "spec_wrong_schema": ("role",),
    "edit_block": ("editor",),
    "no_edit_block": ("editor",),
}
CALL = ("get_reservation_details", {"reservation_id": "JMO1MG"})  # airline task 3's reservation


def load() -> list[dict]:
    out = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        doc = json.loads(path.read_text())
        doc["id"] = f"{path.parent.name}/{path.stem}"
        assert doc["kind"] in KINDS, f"{doc['id']}: unknown kind {doc['kind']!r}"
        out.append(doc)
    return out


def fixtures(path: str) -> list:
    return [pytest.param(d, id=d["id"]) for d in load() if path in KINDS[d["kind"]]]


def response(doc: dict) -> httpx2.Response:
    return httpx2.Response(doc["status"], json=doc["body"])


def test_every_fixture_says_where_it_comes_from() -> None:
    """Each fixture names its server, a known kind and its source; the real server's replies exist too."""
    docs = load()
    assert {d["server"] for d in docs} >= {"llamacpp", "openai", "vllm", "ollama", "litellm", "llama-server"}
    assert all(d["source"] and d["server"] == d["id"].split("/")[0] for d in docs)


@pytest.mark.parametrize("doc", fixtures("agent"))
def test_agent_reply_through_a_tau2_trial(doc: dict) -> None:
    """The reply as the model's first answer in a real τ² trial: a tool call is executed, text is spoken,
    a context overflow is a `context_overflow` failure (evidence, not infrastructure), a server error is
    an infrastructure error, an empty reply ends as `endpoint_format_error`; nothing crashes."""
    pytest.importorskip("tau2")
    from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings

    follow = (
        [] if doc["kind"] == "empty" else [text("Your reservation JMO1MG is confirmed.")]
    )  # empty: every time
    agent = ScriptedModel([response(doc), *follow])
    result = run("3", agent, settings=EndpointSettings(max_retries=0))
    kind = doc["kind"]
    said = [m for m in result.messages if m["role"] == "assistant"][1:]  # [0] is τ²'s greeting
    first = said[0] if said else {}
    if (
        kind == "tool_call"
    ):  # executed as the model wrote it (a recorded real call may name a wrong id), after
        # the harness's normalisation (ids upper-cased: SmolLM2's "./emma_kim_9957.json" reaches τ² upper-cased)
        from pytest_ecdysis_tau2.example_harness.tools import normalise_arguments

        assert result.termination_reason == "user_stop", result.error
        call = doc["body"]["choices"][0]["message"]["tool_calls"][0]["function"]
        sent = normalise_arguments(call["name"], json.loads(call["arguments"]))
        assert (result.tool_calls[0].name, result.tool_calls[0].arguments) == (call["name"], sent)
        assert result.tool_calls[0].error == ("JMO1MG" not in call["arguments"])  # τ²: reservation not found
    elif kind == "text":
        assert result.termination_reason == "user_stop" and not result.tool_calls
        assert first["content"] == doc["body"]["choices"][0]["message"]["content"].strip()
    elif kind == "tool_call_as_text":  # the server has no tool parser: an endpoint defect
        assert result.termination_reason == "endpoint_format_error" and result.endpoint_problem, result.error
        assert "get_reservation_details" in result.error and not said  # the markup never reached the user
        agent = ScriptedModel([response(doc), text("Your reservation JMO1MG is confirmed.")])
        parsed = run("3", agent, settings=EndpointSettings(max_retries=0, text_tool_calls="parse"))
        assert parsed.termination_reason == "user_stop", parsed.error
        assert [(c.name, c.arguments) for c in parsed.tool_calls] == [CALL] and parsed.endpoint_problem
    elif kind == "context_overflow":
        assert result.termination_reason == "context_overflow" and result.reward == 0.0
        assert "context window" in result.error and not result.is_infra_error
    elif kind == "server_error":
        assert result.termination_reason == "infrastructure_error" and result.reward is None
        assert str(doc["status"]) in result.error
    else:  # empty, as SmolLM2 answered every agent request: one re-ask, then the trial ends
        assert result.termination_reason == "endpoint_format_error" and "empty replies" in result.error
        assert len(agent.requests) == 2


def role_client(doc: dict, calls: list) -> RoleClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(json.loads(request.content))
        return response(doc)

    oa = openai.OpenAI(
        base_url="http://replay.invalid/v1",
        api_key="k",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    return RoleClient("replayed", client=oa, max_retries=0)


def harness_copy(tmp_path: Path) -> Path:
    """A copy of the example harness with the step budget the recorded editor replies were written against
    (`MAX_MODEL_CALLS = 20`): their SEARCH blocks quote that line, whatever budget the harness has today."""
    target = tmp_path / "example_harness"
    shutil.copytree(EXAMPLE_HARNESS, target, ignore=shutil.ignore_patterns("__pycache__", "recipes"))
    config = target / "config.py"
    config.write_text(re.sub(r"(?m)^MAX_MODEL_CALLS = \d+", "MAX_MODEL_CALLS = 20", config.read_text()))
    return target


@pytest.mark.parametrize("doc", fixtures("role"))
def test_spec_reply_through_diagnosis(doc: dict, tmp_path: Path) -> None:
    """The reply as every answer of a one-call diagnosis: a spec validates (bare JSON or in a fenced
    block); an unparseable or empty one is no spec with the reason after one repair; a context overflow is
    no spec with reason `context_overflow` after one call; a server error stays an InfrastructureError."""
    records, calls = id_prefix_records(), []
    cfg = SimpleNamespace(fdcr_passes=1, evidence_limit=None, diagnosis_model="replayed", base_url=None)
    harness = harness_copy(tmp_path)

    def go():
        return diagnose(
            records=records,
            groups=group(records),
            harness_dir=harness,
            cfg=cfg,
            round_dir=tmp_path / "round",
            strategy="ecdysis-nofdcr",
            client=role_client(doc, calls),
        )

    kind = doc["kind"]
    if kind == "server_error":
        with pytest.raises(InfrastructureError, match=f"HTTP {doc['status']}"):
            go()
        return
    d = go()
    if kind == "spec":
        assert d.spec is not None and d.spec.changes[0].files == ["config.py"] and len(calls) == 1
        assert (tmp_path / "round" / "spec.json").is_file()
    elif kind == "context_overflow":
        assert d.spec is None and d.reason == "context_overflow" and "context window" in d.detail
        assert len(calls) <= 2  # vLLM names max_tokens in its message: asked once more without it
    elif kind == "spec_wrong_schema":  # JSON, but not a spec (SmolLM2's moderator): named after one repair
        assert d.spec is None and d.reason == "invalid_spec" and len(calls) == 2
        assert "does not match the modification spec schema" in d.detail
    else:  # spec_unparseable, empty
        assert d.spec is None and d.reason == "invalid_spec" and len(calls) == 2
        finish = doc["body"]["choices"][0]["finish_reason"]
        assert ("cut at the token limit" if finish == "length" else "empty") in d.detail
    lines = (tmp_path / "round" / "transcript.jsonl").read_text().splitlines()
    assert len(lines) == (0 if kind == "context_overflow" else len(calls))  # answered turns only


@pytest.mark.parametrize("doc", fixtures("editor"))
def test_editor_reply_through_the_builtin_editor(doc: dict, tmp_path: Path) -> None:
    """An answer with an edit block edits the harness copy and passes the import check; one without a
    usable edit fails (no exception, files as before) after one repair, and a context overflow at once:
    the round is `no_change` with the reason; a reply cut at the token limit says so, and its repair turn
    shows it back cut to `REPAIR_ECHO_CHARS`."""
    harness, calls = harness_copy(tmp_path), []
    spec = tmp_path / "spec.json"
    spec.write_text('{"summary": "raise the budget", "changes": []}')
    before = (harness / "config.py").read_text()
    result = BuiltinEditor(SimpleNamespace(), client=role_client(doc, calls)).edit(
        None, harness, spec_path=spec
    )
    if doc["kind"] == "edit_block":
        assert result.ok and len(calls) == 1, result.detail
        assert "MAX_MODEL_CALLS = 30" in (harness / "config.py").read_text()
    elif doc["kind"] == "context_overflow":  # the prompt (spec + harness files) is longer than the context
        assert not result.ok and "context window" in result.detail and len(calls) <= 2
        assert (harness / "config.py").read_text() == before
    else:
        assert not result.ok and len(calls) == 2 and "no edit block" in result.detail
        assert (harness / "config.py").read_text() == before
        if doc["body"]["choices"][0]["finish_reason"] == "length":  # a runaway answer (SmolLM2's, Gemma's)
            used = doc["body"]["usage"]["completion_tokens"]
            assert f"cut at the token limit after {used} tokens: finish_reason 'length'" in result.detail
            echoed = calls[1]["messages"][2]["content"]  # shown back in the repair turn, cut
            assert (
                len(echoed) < REPAIR_ECHO_CHARS + 100 < len(doc["body"]["choices"][0]["message"]["content"])
            )


def timing_out_client(calls: list, after: int = 0) -> RoleClient:
    """Answers `after` calls with a plain text, then every call times out (a slow local model)."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(request)
        if len(calls) <= after:
            return response(
                {
                    "status": 200,
                    "body": {
                        "id": "c",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "m",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "notes"},
                            }
                        ],
                    },
                }
            )
        raise httpx2.ReadTimeout("no answer in time", request=request)

    oa = openai.OpenAI(
        base_url="http://replay.invalid/v1",
        api_key="k",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    return RoleClient("replayed", client=oa, max_retries=0)


def test_a_role_call_that_times_out_ends_the_diagnosis_without_a_spec(tmp_path: Path) -> None:
    """A slow model (the third FDCR call times out) is `slow_endpoint` with the answered turns kept, not a
    stopped evolution; the round then ends as `no_spec` with that reason."""
    records, calls = id_prefix_records(), []
    cfg = SimpleNamespace(fdcr_passes=1, evidence_limit=None, diagnosis_model="replayed", base_url=None)
    d = diagnose(
        records=records,
        groups=group(records),
        harness_dir=harness_copy(tmp_path),
        cfg=cfg,
        round_dir=tmp_path / "round",
        strategy="ecdysis",
        client=timing_out_client(calls, after=2),
    )
    assert d.spec is None and d.reason == "slow_endpoint" and "after 2 answered call(s)" in d.detail
    assert d.calls == 2 and len((tmp_path / "round" / "transcript.jsonl").read_text().splitlines()) == 2


def test_an_editor_call_that_times_out_is_no_change(tmp_path: Path) -> None:
    """The built-in editor's call timing out fails the edit (no exception, files as before)."""
    harness, calls = harness_copy(tmp_path), []
    spec = tmp_path / "spec.json"
    spec.write_text('{"summary": "raise the budget", "changes": []}')
    before = (harness / "config.py").read_text()
    result = BuiltinEditor(SimpleNamespace(), client=timing_out_client(calls)).edit(
        None, harness, spec_path=spec
    )
    assert not result.ok and "timed out" in result.detail and len(calls) == 1
    assert (harness / "config.py").read_text() == before


def test_a_failed_incumbent_whose_records_are_all_kept_out_says_so() -> None:
    """Measured with SmolLM2 (docs/real-model.md): every trial ended endpoint_format_error (empty replies),
    so no record is evidence; the round's reason says that and why, not 'no failure records'."""
    from pytest_ecdysis.core.records import FailureRecord
    from pytest_ecdysis.evolve.stages import why_no_evidence

    record = FailureRecord.model_validate(
        {
            "suite": "tau2-airline",
            "task_id": "3",
            "trial": 0,
            "reward": 0.0,
            "termination_reason": "endpoint_format_error",
            "endpoint_problem": True,
        }
    )
    reason = why_no_evidence([record])
    assert reason.startswith(
        "none of the incumbent's 1 failure record(s) is usable evidence: 1 endpoint_format_error"
    )
    assert why_no_evidence([]) == "the incumbent has no failure records"
