"""Replies seen in the wild, fourth batch: blame by what the server said, not by its status code.

Each test runs a real τ² airline trial (example harness) against a scripted OpenAI-compatible server on
127.0.0.1 (`slow_endpoint.SlowEndpoint`) replaying a shape from a public report, and checks the ending,
the record's words and whether it is evidence. No network.
"""

from __future__ import annotations

import itertools
import json

import pytest
from slow_endpoint import SlowEndpoint, completion_bytes
from test_wild_endings import HELLO, RESERVATION, one_call_then_done, run_over, user_stops_second_turn


@pytest.fixture(scope="module")
def warm_tau2():
    pytest.importorskip("tau2")
    from suite_scripted import warm_up

    warm_up()


def err(message: str, **extra) -> bytes:
    return json.dumps({"error": {"message": message, **extra}}).encode()


def evidence_of(result) -> list:
    from pytest_ecdysis.evidence.failures import triage

    return [r for r in triage([result], 1.0).records if r.is_evidence()]


# -- 1: a configuration or provider refusal is the endpoint's ---------------------------------------

SETTING_REFUSALS = {
    # ollama/ollama #14795: a model whose template has no tools
    "ollama-no-tools": (400, err("registry.ollama.ai/library/gemma3:270m does not support tools"), "Ollama"),
    # vLLM started without its tool flags
    "vllm-auto-tool-choice": (
        400,
        json.dumps(
            {
                "object": "error",
                "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set",
                "type": "BadRequestError",
                "code": 400,
            }
        ).encode(),
        "--enable-auto-tool-choice",
    ),
    # Azure OpenAI's content filter
    "azure-content-filter": (
        400,
        err(
            "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            code="content_filter",
        ),
        "content policy",
    ),
}


@pytest.mark.parametrize("name", list(SETTING_REFUSALS))
def test_a_refusal_naming_a_server_setting_or_a_provider_policy_is_the_endpoints(name, warm_tau2):
    """No harness change avoids it: infrastructure_error naming what to change, quoting the server, out of
    the evidence (it used to be "the harness's failure, not the endpoint's")."""
    status, body, fix = SETTING_REFUSALS[name]
    with SlowEndpoint(agent=("status", status, body, "application/json"), user=("ok", HELLO)) as server:
        result = run_over(server)
    assert result.termination_reason == "infrastructure_error", result.error
    assert fix in result.error and "no harness change avoids" in result.error
    assert "the harness's failure" not in result.error
    assert result.is_infra_error and evidence_of(result) == []


MISTRAL_ID = "call_0_Xk3-9"  # an id the server generated, which its own check then refuses


def test_a_server_refusing_the_tool_call_id_it_generated_is_the_endpoints(warm_tau2):
    """The server's first reply carries tool call id `MISTRAL_ID`; the next request sends it back as the
    harness must, and the server refuses it (Mistral's "Tool call id was ... but must be a-z, A-Z, 0-9"):
    infrastructure_error naming the id, no evidence."""

    def agent(body: dict):
        if any(m.get("role") == "tool" for m in body.get("messages", [])):
            return 400, err(f"Tool call id was {MISTRAL_ID} but must be a-z, A-Z, 0-9, with a length of 9.")
        call = {
            "id": MISTRAL_ID,
            "type": "function",
            "function": {
                "name": "get_reservation_details",
                "arguments": json.dumps({"reservation_id": RESERVATION}),
            },
        }
        return 200, completion_bytes({"content": None, "tool_calls": [call]})

    with SlowEndpoint(agent=("respond", agent), user=("ok", HELLO)) as server:
        result = run_over(server)
    assert result.termination_reason == "infrastructure_error", result.error
    assert "tool-call ids it generated itself" in result.error and MISTRAL_ID in result.error
    assert evidence_of(result) == []


# -- 2: a server that cannot parse the request ------------------------------------------------------

LLAMACPP_TOOLS_500 = err(
    "Failed to parse tools: [json.exception.out_of_range.403] key 'parameters' not found",
    code=500,
    type="server_error",
)


def test_a_server_that_cannot_parse_the_request_blames_the_request_not_the_models_output(warm_tau2):
    """llama.cpp's 500 "Failed to parse tools: ... key 'parameters' not found" (a tool declared without
    `parameters`) is the harness's request: agent_error with the server's words and the request's size, not
    retried, no "could not parse the model's output" and no endpoint_format_error."""
    with SlowEndpoint(agent=("status", 500, LLAMACPP_TOOLS_500, "application/json"), user=("ok", HELLO)) as s:
        result = run_over(s)
        agent_calls = [r for r, _ in s.requests if r == "agent"]
    assert result.termination_reason == "agent_error", result.error
    assert "key 'parameters' not found" in result.error and "request: " in result.error
    assert "bytes" in result.error and "model's output" not in result.error.replace(
        "not the model's output", ""
    )
    assert not result.endpoint_problem and len(agent_calls) == 1
    assert len(evidence_of(result)) == 1


# -- 3: context overflow in TGI's words --------------------------------------------------------------

TGI_422 = json.dumps(
    {
        "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192. Given: 8100 "
        "`inputs` tokens and 1024 `max_new_tokens`",
        "error_type": "validation",
    }
).encode()


def test_tgis_overflow_is_a_context_overflow(warm_tau2):
    """TGI's 422 "`inputs` tokens + `max_new_tokens` must be <= 8192" is context_overflow (it was agent_error
    as a malformed request), with TGI's words in the record."""
    with SlowEndpoint(agent=("status", 422, TGI_422, "application/json"), user=("ok", HELLO)) as server:
        result = run_over(server)
    assert result.termination_reason == "context_overflow", result.error
    assert "must be <= 8192" in result.error


# -- 4: an error object in an HTTP 200 body ---------------------------------------------------------


def test_an_error_object_in_a_200_body_is_retried_as_the_error_it_is(warm_tau2):
    """OpenRouter's `{"error": {"code": 502, ...}}` with HTTP 200 and no choices: retried like a 502 (two
    agent requests with max_retries=1), then infrastructure_error quoting the provider, without the wrong
    "ends in /v1" advice."""
    body = json.dumps({"error": {"code": 502, "message": "Provider returned error"}}).encode()
    with SlowEndpoint(agent=("raw", body, "application/json"), user=("ok", HELLO)) as server:
        result = run_over(server)
        agent_calls = [r for r, _ in server.requests if r == "agent"]
    assert result.termination_reason == "infrastructure_error", result.error
    assert "HTTP 502" in result.error and "Provider returned error" in result.error
    assert "ends in /v1" not in result.error and len(agent_calls) == 2


def test_a_recovered_error_in_200_lets_the_trial_go_on(warm_tau2):
    """The first agent reply is a 502 in a 200, the retry a real completion: the trial goes on to the user's
    stop (the trial used to be lost)."""
    seen: list[int] = []
    good = one_call_then_done("get_reservation_details", {"reservation_id": RESERVATION})

    def agent(body: dict):
        seen.append(1)
        if len(seen) == 1:
            return 200, json.dumps({"error": {"code": 502, "message": "Provider returned error"}}).encode()
        return 200, completion_bytes(good(body))

    with SlowEndpoint(agent=("respond", agent), user=("ok", user_stops_second_turn)) as server:
        result = run_over(server)
    assert result.termination_reason == "user_stop", result.error


# -- 5: the user simulator's content as a list of parts ---------------------------------------------


def test_the_user_simulators_content_parts_are_joined(warm_tau2):
    """Mistral's `[{"type": "thinking", ...}, {"type": "text", ...}]` from the user model: the text parts are
    the user's words (the thinking never), the trial runs to the user's stop."""

    def user(body: dict) -> dict:
        said = [m for m in body.get("messages", []) if m.get("role") == "assistant"]
        text = HELLO["content"] if not said else "Thanks, that is all. ###STOP###"
        return {
            "content": [
                {"type": "thinking", "thinking": [{"type": "text", "text": "I should ask."}]},
                {"type": "text", "text": text},
            ]
        }

    agent = one_call_then_done("get_reservation_details", {"reservation_id": RESERVATION})
    with SlowEndpoint(agent=("ok", agent), user=("ok", user)) as server:
        result = run_over(server)
    assert result.termination_reason == "user_stop", result.error
    users = [m["content"] for m in result.messages if m["role"] == "user"]
    assert users[0] == HELLO["content"] and not any("I should ask" in (u or "") for u in users)


# -- 6: user-simulator endings that are not the agent's doing ---------------------------------------


@pytest.mark.parametrize(
    ("first", "later", "aborted"),
    [
        (HELLO["content"], "I'd like to speak to someone else. ###TRANSFER###", True),  # never asked for
        ("###STOP###", None, True),  # a stop before the user said anything
        (HELLO["content"], "Thanks, that is all. ###STOP###", False),  # an ordinary stop
    ],
)
def test_user_endings_that_are_not_the_agents_doing_are_user_aborts(first, later, aborted, warm_tau2):
    """A `###TRANSFER###` the agent never asked for and a `###STOP###` with no request are `user_abort`:
    scored as τ² scores them, kept out of the evidence; an ordinary stop is not."""

    def user(body: dict) -> dict:
        said = [m for m in body.get("messages", []) if m.get("role") == "assistant"]
        return {"content": first if not said or later is None else later}

    agent = one_call_then_done("get_reservation_details", {"reservation_id": RESERVATION})
    with SlowEndpoint(agent=("ok", agent), user=("ok", user)) as server:
        result = run_over(server)
    assert result.termination_reason == "user_stop", result.error
    assert result.user_abort is aborted and result.reward is not None
    if aborted:
        assert evidence_of(result) == []


# -- 8: messages keep the server's words and say whose call it was ----------------------------------

FASTAPI_422 = json.dumps(
    {"detail": [{"loc": ["body", "messages", 1, "content"], "msg": "field required", "type": "value_error"}]}
).encode()


def test_a_422_on_the_user_simulators_call_quotes_the_server_and_names_the_role(warm_tau2):
    """A FastAPI-style 422 on the user simulator's call: the error quotes `field required` and says it was
    the user simulator's call (it showed only "Error code: 422"); infrastructure, no evidence."""
    with SlowEndpoint(
        agent=("ok", {"content": "Hello, how can I help?"}),
        user=("status", 422, FASTAPI_422, "application/json"),
    ) as server:
        result = run_over(server)
    assert result.termination_reason == "infrastructure_error", result.error
    assert "the user simulator's call" in result.error and "field required" in result.error
    assert evidence_of(result) == []


# -- 7: coercion only where it is unambiguous -------------------------------------------------------


def test_a_boolean_for_an_integer_is_refused_not_executed_as_one(warm_tau2):
    """`send_certificate(amount=true)`: never coerced to 1 and run as a write (a $1 certificate); the guard
    refuses it naming the argument, and no `arguments_coerced` note claims otherwise."""
    agent = one_call_then_done("send_certificate", {"user_id": "raj_sanchez_7340", "amount": True})
    with SlowEndpoint(agent=("ok", agent), user=("ok", user_stops_second_turn)) as server:
        result = run_over(server)
    assert result.termination_reason == "user_stop", result.error
    [call] = result.tool_calls
    assert call.arguments["amount"] is True and call.error
    assert "argument 'amount' of send_certificate must be an integer" in call.result
    assert "got the boolean true" in call.result
    assert not [n for n in result.endpoint_notes if n["kind"] == "arguments_coerced"]


def test_a_value_that_does_not_survive_the_round_trip_is_not_coerced():
    """`"NaN"` and `"1e400"` for a number are not coerced (they would run as null and be noted as NaN or
    Infinity); the guard refuses them as not finite. `"2"` for an integer still is, and the note says 2."""
    from pydantic import BaseModel

    from pytest_ecdysis_tau2.tasks.tool_calls import coerce_arguments, refusal

    class Params(BaseModel):
        amount: int
        rate: float = 0.0

    for raw in ("NaN", "1e400", "-Infinity"):
        args = {"amount": 1, "rate": raw}
        assert coerce_arguments(Params, args) == (args, [])
        assert "must be a finite number" in (refusal(Params, "t", args) or "")
    coerced, notes = coerce_arguments(Params, {"amount": "2"})
    assert coerced == {"amount": 2} and "coerced to integer 2" in notes[0]
    assert refusal(Params, "t", coerced) is None


# -- 9: passes that are not clean by τ²'s own checks ------------------------------------------------


def confirm_then(name: str, arguments: dict, *, ask: bool):
    """Agent replies: (when `ask`) a yes/no question first, then after the user's yes the write, then a
    closing text; without `ask` the write comes at once."""

    def reply(body: dict) -> dict:
        messages = body.get("messages", [])
        if any(m.get("role") == "tool" for m in messages):
            return {"content": "Done. Anything else?"}
        users = [m for m in messages if m.get("role") == "user"]
        if ask and not any("yes" in str(m.get("content") or "").lower() for m in users):
            return {"content": f"I will call {name} with {json.dumps(arguments)}. Shall I proceed? (yes/no)"}
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return {"content": None, "tool_calls": [call]}

    return reply


def user_says_yes_then_stops(body: dict) -> dict:
    """The user model's replies (roles flipped: the agent speaks as `user`): hello; a yes to a question
    asking to proceed; else stop."""
    messages = body.get("messages", [])
    own = [m for m in messages if m.get("role") == "assistant"]
    agent = [m for m in messages if m.get("role") == "user"]
    if not own:
        return HELLO
    if agent and "Shall I proceed" in str(agent[-1].get("content") or ""):
        return {"content": "Yes, please go ahead."}
    return {"content": "Thanks, that is all. ###STOP###"}


def run_task(task_id: str, agent) -> object:
    with SlowEndpoint(agent=("ok", agent), user=("ok", user_says_yes_then_stops)) as server:
        return run_over(server, task_id=task_id)


def test_a_pass_with_a_write_the_user_never_confirmed_is_a_weak_pass(warm_tau2):
    """Airline task 19 (gold: cancel reservation Z7GOZK): cancelled at once, the pass is weak ("write
    cancel_reservation not preceded by the user's confirmation"); asked and confirmed first, it is clean."""
    from pytest_ecdysis.core.metrics import weak_pass_reasons

    args = {"reservation_id": "Z7GOZK"}
    rushed = run_task("19", confirm_then("cancel_reservation", args, ask=False))
    careful = run_task("19", confirm_then("cancel_reservation", args, ask=True))
    assert rushed.reward == 1.0 and careful.reward == 1.0, (rushed.error, careful.error)
    assert rushed.checks["unconfirmed_writes"] == ["cancel_reservation"]
    assert careful.checks["unconfirmed_writes"] == []
    assert any("write cancel_reservation not preceded" in r for r in weak_pass_reasons(rushed, 1.0))
    assert weak_pass_reasons(careful, 1.0) == []


def test_a_pass_whose_gold_lookup_was_never_made_is_a_weak_pass_listed_shown_and_counted(warm_tau2, tmp_path):
    """Airline task 27 (gold: get_user_details, then send_certificate 150): the certificate sent after a
    yes but without the lookup passes on the DB; the pass is weak ("gold action get_user_details not
    matched"), listed in the summary, on the HTML page, and in diagnosis's evidence as a weakness, never
    as a failure record."""
    from pytest_ecdysis.core.rundir import SCHEMA_VERSION
    from pytest_ecdysis.evidence.build import build_evidence
    from pytest_ecdysis.report import html as html_report
    from pytest_ecdysis.run.files import aggregate

    args = {"user_id": "ethan_martin_2396", "amount": 150}
    result = run_task("27", confirm_then("send_certificate", args, ask=True))
    assert result.reward == 1.0, (result.error, result.components)
    summary, _, _ = aggregate([result], threshold=1.0, trials_per_task=1, model="m", prices={})
    [weak] = summary["weak_passes"]
    assert weak["reasons"] == ["gold action get_user_details not matched"]
    (tmp_path / "summary.json").write_text(
        json.dumps({"schema_version": SCHEMA_VERSION, "run_id": "r", **summary})
    )
    (tmp_path / "groups.json").write_text(json.dumps({"schema_version": 1, "groups": []}))
    (tmp_path / "trials.jsonl").write_text(result.model_dump_json() + "\n")
    page = html_report.render(tmp_path)
    assert "Weak passes" in page and "gold action get_user_details not matched" in page
    ev = build_evidence(records=[], groups=[], harness_dir=None, weak_passes=summary["weak_passes"])
    assert ev.data["weak_passes"]["n_weak_passes"] == 1
    assert ev.data["weak_passes"]["by_kind"] == {"gold_action_not_matched": 1}
    assert "harness weakness" in ev.data["weak_passes"]["meaning"] and ev.data["failures"]["n_records"] == 0


# -- blame by evidence across trials: the same refusal of every trial's first request -----------------

#: Gemini's OpenAI-compatible endpoint refusing a JSON-schema keyword of the suite's tools (the position in
#: the message differs per request; digits are masked when refusals are compared).
GEMINI_SCHEMA_400 = (
    'Invalid JSON payload received. Unknown name "additionalProperties" at '
    "'tools[0].function_declarations[{n}].parameters': Cannot find field."
)


def refused_trials(message: str, tasks: tuple[str, ...] = ("3", "19", "27")) -> list:
    """One real trial per airline task, the agent's every request refused with HTTP 400 `message`
    (`{n}`: a number that differs per request); the user simulator says hello."""
    counter = itertools.count(3)

    def agent(body: dict):
        return 400, err(message.format(n=next(counter)), code=400)

    out = []
    for task in tasks:
        with SlowEndpoint(agent=("respond", agent), user=("ok", HELLO)) as server:
            out.append(run_over(server, task_id=task))
    return out


@pytest.fixture(scope="module")
def schema_refused(warm_tau2):
    return refused_trials(GEMINI_SCHEMA_400)


def summarise(trials: list):
    from pytest_ecdysis.run.files import aggregate

    copies = [t.model_copy(deep=True) for t in trials]
    summary, tri, _ = aggregate(copies, threshold=1.0, trials_per_task=1, model="m", prices={})
    return summary, tri, copies


def test_each_trial_alone_blames_the_harness_and_notes_the_refusal(schema_refused):
    """Read one at a time, the 400 is the harness's (agent_error, evidence), and the trusted client
    layer notes it as a refusal of the first agent request (`request_refused`, step 1, the server's words)."""
    for result in schema_refused:
        assert result.termination_reason == "agent_error", result.error
        [note] = [n for n in result.endpoint_notes if n["kind"] == "request_refused"]
        assert note["step"] == 1 and note["status"] == 400
        assert note["detail"].startswith('HTTP 400: Invalid JSON payload received. Unknown name "additional')
        assert len(evidence_of(result)) == 1


def test_the_same_refusal_of_every_trials_first_request_is_the_endpoints(schema_refused):
    """Three trials of three tasks, each refused alike on its first request: infrastructure errors with
    `endpoint_problem`, none is evidence, each error opens with the one line quoting the server, which the
    summary carries and the terminal section prints."""
    from pytest_ecdysis.report.summary import summary_lines

    summary, tri, trials = summarise(schema_refused)
    line = summary["endpoint_refusal"]
    assert line.startswith("the endpoint refused the first agent request of all 3 scored trials")
    assert 'Unknown name "additionalProperties"' in line and "change what the server's words name" in line
    assert [t.termination_reason for t in trials] == ["infrastructure_error"] * 3
    assert all(t.reward is None and t.endpoint_problem and t.error.startswith(line) for t in trials)
    assert summary["n_infra_errors"] == 3 and tri.records == [] and tri.evidence == []
    assert f"ENDPOINT: {line}" in summary_lines(summary, [])


def test_two_trials_or_one_that_got_further_keep_the_harness_blamed(schema_refused, warm_tau2):
    """Fewer than three scored trials, or one trial that got past its first request (an ordinary
    conversation), leave every trial as it was: agent_error, evidence, no endpoint line."""
    summary, tri, trials = summarise(schema_refused[:2])
    assert summary["endpoint_refusal"] is None and len(tri.evidence) == 2
    agent = one_call_then_done("get_reservation_details", {"reservation_id": RESERVATION})
    with SlowEndpoint(agent=("ok", agent), user=("ok", user_stops_second_turn)) as server:
        talked = run_over(server)
    summary, tri, trials = summarise([*schema_refused, talked])
    assert summary["endpoint_refusal"] is None
    assert [t.termination_reason for t in trials[:3]] == ["agent_error"] * 3 and len(tri.evidence) >= 3


def test_a_request_the_server_could_not_parse_stays_the_harnesss_on_every_trial(warm_tau2):
    """llama.cpp's "Failed to parse tools: ... key 'parameters' not found" on the first request of all
    three trials is a malformed schema the harness wrote (a different request avoids it): agent_error,
    evidence, no endpoint line."""
    trials = refused_trials("Failed to parse tools: key 'parameters' not found (declaration {n})")
    summary, tri, after = summarise(trials)
    assert summary["endpoint_refusal"] is None
    assert [t.termination_reason for t in after] == ["agent_error"] * 3 and len(tri.evidence) == 3


def test_a_whole_session_whose_preflight_passed_names_the_endpoint_once(pytester, monkeypatch, warm_tau2):
    """The way users run it: the pre-flight's one small request gets a tool call (the server takes simple
    tools), then every trial's first request gets Gemini's schema 400. The session prints the one
    `ENDPOINT:` line, `summary.json` carries it, every trial in `trials.jsonl` is an infrastructure error
    and `failures.jsonl` holds no evidence."""
    from test_suite_deadlines import CACHE_HOME

    monkeypatch.setenv("XDG_CACHE_HOME", CACHE_HOME)  # pytester moves HOME: keep τ²'s suspect-task cache
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.delenv("ECDYSIS_PREFLIGHT_DONE", raising=False)
    counter = itertools.count(3)
    call = {
        "content": None,
        "tool_calls": [
            {
                "id": "c",
                "type": "function",
                "function": {"name": "get_reservation_details", "arguments": '{"reservation_id": "8JX2WO"}'},
            }
        ],
    }
    with SlowEndpoint(
        agent=("respond", lambda body: (400, err(GEMINI_SCHEMA_400.format(n=next(counter)), code=400))),
        user=("ok", HELLO),
        preflight=("ok", call),
    ) as server:
        result = pytester.runpytest_subprocess(
            "--pyargs",
            "pytest_ecdysis_tau2.test_airline",
            "-p",
            "no:cacheprovider",
            "--ecdysis-model",
            "gemini-2.5-flash",
            "--ecdysis-user-model",
            "gemini-2.5-flash",
            "--ecdysis-base-url",
            server.url,
            "--ecdysis-tasks",
            "3,20,27",
            "--ecdysis-run-dir",
            str(pytester.path / "runs"),
            timeout=300,
        )
        roles = [r for r, _ in server.requests]
    assert roles.count("preflight") == 1 and roles.count("agent") == 3, roles
    result.stdout.fnmatch_lines(["ENDPOINT: the endpoint refused the first agent request of all 3 scored*"])
    (run_dir,) = (pytester.path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "Unknown name" in summary["endpoint_refusal"] and summary["n_infra_errors"] == 3
    trials = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert [t["termination_reason"] for t in trials] == ["infrastructure_error"] * 3
    assert (run_dir / "failures.jsonl").read_text().strip() == ""
