"""The simulated model's HTTP protocol: OpenAI chat completions over real HTTP with the real openai client,
OpenAI-style 400s for bad requests (and the server stays up), role routing, determinism, latency, CLI."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import httpx2
import openai
import pytest
from sim_toy import ToyHarness, ToyKnowledge, write_profile

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.sim import model as model_mod
from pytest_ecdysis.sim.client import fetch_ground_truth
from pytest_ecdysis.sim.profiles import load_profile, parse_profile
from pytest_ecdysis.sim.server import start_background

TRIAL = "run1/toy/1/0"


@pytest.fixture
def sim():
    handle = start_background(knowledge={"toy": ToyKnowledge()})
    yield handle
    handle.stop()


def client(url, role="agent", trial=TRIAL):
    headers = {"X-Ecdysis-Role": role}
    if trial:
        headers["X-Ecdysis-Trial"] = trial
    return openai.OpenAI(base_url=url + "/v1", api_key="sim", max_retries=0, default_headers=headers)


def error_of(exc_info):
    body = exc_info.value.response.json()
    assert set(body["error"]) >= {"message", "type", "code"}
    return body["error"]


def test_handle_url_has_no_v1_and_models_lists_profiles(sim):
    """`.url` is http://127.0.0.1:PORT; GET /v1/models lists 'sim' and 'sim/<profile>' for each profile."""
    assert sim.url.startswith("http://127.0.0.1:") and not sim.url.endswith("/v1")
    ids = {m.id for m in client(sim.url).models.list()}
    assert {"sim", "sim/default", "sim/strong", "sim/model_only"} <= ids


def test_agent_reply_is_text_or_one_tool_call_with_usage(sim):
    """An agent completion carries usage counts and a message that has text or tool calls, never both."""
    reply = client(sim.url).chat.completions.create(
        model="sim", messages=[{"role": "system", "content": "policy"}, {"role": "user", "content": "hi"}]
    )
    assert (
        reply.usage.prompt_tokens > 0
        and reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    )
    message = reply.choices[0].message
    assert (message.content is None) != (not message.tool_calls)
    assert message.tool_calls and reply.choices[0].finish_reason == "tool_calls"
    json.loads(message.tool_calls[0].function.arguments)


def test_user_answers_per_scenario_and_ends_with_stop(sim):
    """The simulated user opens with the reason for the call and its identity, confirms, ends with ###STOP###."""
    user = client(sim.url, role="user")
    ask = lambda text: (  # noqa: E731
        user.chat.completions.create(
            model="sim", messages=[{"role": "system", "content": "x"}, {"role": "user", "content": text}]
        )
        .choices[0]
        .message.content
    )
    opening = ask("Hi! How can I help you today?")
    assert "ada_lovelace_1815" in opening and "#W0000001" in opening and "I want" in opening
    assert "yes" in ask("I will cancel the order. Do you confirm (yes/no)?").lower()
    assert ask("Done. Is there anything else I can help you with?").endswith("###STOP###")


def test_a_retried_user_request_gets_the_same_answer_and_no_extra_turn(sim):
    """A user request sent again (a client that timed out while the server answered) is answered as the
    first time and does not advance the simulated user: the next real turn is the one it would have been."""
    user = client(sim.url, role="user", trial="run1/toy/1/1")
    ask = lambda *texts: (  # noqa: E731
        user.chat.completions.create(
            model="sim",
            messages=[{"role": "system", "content": "x"}, *({"role": "user", "content": t} for t in texts)],
        )
        .choices[0]
        .message.content
    )
    opening = ask("Hi! How can I help you today?")
    assert ask("Hi! How can I help you today?") == opening  # the retry
    assert "I want" in opening
    assert "yes" in ask("Hi! How can I help you today?", "Do you confirm (yes/no)?").lower()


@pytest.mark.parametrize("model, code", [("sim/nope", "model_not_found"), ("gpt-4o", "model_not_found")])
def test_unknown_profile_or_model_is_a_400_naming_known_profiles(sim, model, code):
    """An unknown profile is HTTP 400 with an OpenAI error body that names the known profiles."""
    with pytest.raises(openai.BadRequestError) as exc:
        client(sim.url).chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    err = error_of(exc)
    assert err["code"] == code and "default" in err["message"] and "model_only" in err["message"]


@pytest.mark.parametrize(
    "role, trial, code",
    [
        ("agent", None, "missing_trial"),
        ("user", None, "missing_trial"),
        ("agent", "run1/nosuite/1/0", "unknown_suite"),
        ("agent", "run1/toy/999/0", "unknown_task"),
        ("agent", "garbage", "bad_trial_header"),
        ("wizard", TRIAL, "unknown_role"),
    ],
)
def test_trial_and_role_errors_are_400s(sim, role, trial, code):
    """Agent and user requests need a known trial; an unknown role is named; all are 400s with a body."""
    with pytest.raises(openai.BadRequestError) as exc:
        client(sim.url, role=role, trial=trial).chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "hi"}]
        )
    assert error_of(exc)["code"] == code


def test_malformed_bodies_are_400s_and_the_server_stays_up(sim):
    """Invalid JSON, no messages, messages without roles, stream=True: 400 each; the next request works."""
    url = sim.url + "/v1/chat/completions"
    headers = {"X-Ecdysis-Role": "agent", "X-Ecdysis-Trial": TRIAL, "Content-Type": "application/json"}
    bodies = [
        b"{not json",
        json.dumps({"model": "sim", "messages": []}).encode(),
        json.dumps({"model": "sim"}).encode(),
        json.dumps({"model": "sim", "messages": [{"content": "x"}]}).encode(),
        json.dumps({"model": "sim", "stream": True, "messages": [{"role": "user", "content": "x"}]}).encode(),
        json.dumps([1, 2]).encode(),
    ]
    for body in bodies:
        response = httpx2.post(url, content=body, headers=headers)
        assert response.status_code == 400, body
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert httpx2.get(sim.url + "/v1/nothing").status_code == 404
    ok = httpx2.post(
        url, json={"model": "sim", "messages": [{"role": "user", "content": "hi"}]}, headers=headers
    )
    assert ok.status_code == 200 and ok.json()["usage"]["total_tokens"] > 0


def test_role_requests_are_routed_to_the_role_handlers(sim, monkeypatch):
    """analyst/critic/engineer/moderator/editor, and requests with neither role nor trial, go to the
    role handlers with the role name (None without a header); they need no trial."""
    seen = []
    for role in ("analyst", "critic", "engineer", "moderator", "editor", None):
        monkeypatch.setitem(model_mod.ROLE_HANDLERS, role, lambda r, body: seen.append(r) or f"answer of {r}")
    for role in ("analyst", "critic", "engineer", "moderator", "editor"):
        reply = client(sim.url, role=role, trial=None).chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "evidence"}]
        )
        assert reply.choices[0].message.content == f"answer of {role}" and reply.usage.total_tokens > 0
    bare = openai.OpenAI(base_url=sim.url + "/v1", api_key="sim", max_retries=0)
    assert (
        bare.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
        .choices[0]
        .message.content
        == "answer of None"
    )
    assert seen == ["analyst", "critic", "engineer", "moderator", "editor", None]


def test_a_role_handler_rejecting_the_prompt_is_a_400(sim, monkeypatch):
    """A role answerer's ValueError (e.g. a prompt without evidence) becomes a 400 with its message."""

    def reject(role, body):
        raise ValueError("no evidence in the prompt")

    monkeypatch.setitem(model_mod.ROLE_HANDLERS, "critic", reject)
    with pytest.raises(openai.BadRequestError) as exc:
        client(sim.url, role="critic", trial=None).chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "x"}]
        )
    assert "no evidence" in error_of(exc)["message"]


def test_same_inputs_give_the_same_trajectory_across_servers(tmp_path, monkeypatch):
    """Two fresh servers, the same profile/task/trial (different run ids): identical replies and ground
    truth; another trial of the same task draws differently somewhere."""
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path))
    model = write_profile(
        tmp_path,
        "busy",
        {
            k: {"rate": 0.3}
            for k in (
                "id_case",
                "id_prefix",
                "context_loss",
                "early_end",
                "forget_communicate",
                "repeat_after_error",
                "slip",
            )
        },
    )
    outcomes = []
    for run_id in ("a", "b"):
        handle = start_background(knowledge={"toy": ToyKnowledge()})
        try:
            per_trial = []
            for trial in range(6):
                header = f"{run_id}/toy/1/{trial}"
                result = ToyHarness().run(handle.url, header, model=model)
                truth = fetch_ground_truth(handle.url, header)
                per_trial.append((json.dumps(result["messages"]), json.dumps(truth["quirks"])))
            outcomes.append(per_trial)
        finally:
            handle.stop()
    assert outcomes[0] == outcomes[1]
    assert len({quirks for _, quirks in outcomes[0]}) > 1


def test_latency_is_a_fixed_delay_per_completion():
    """`latency_s` delays every completion by at least that many seconds."""
    handle = start_background(latency_s=0.2, knowledge={"toy": ToyKnowledge()})
    try:
        started = time.perf_counter()
        client(handle.url).chat.completions.create(model="sim", messages=[{"role": "user", "content": "hi"}])
        assert time.perf_counter() - started >= 0.2
    finally:
        handle.stop()


def test_port_in_use_is_a_clear_error():
    """start_background and `python -m pytest_ecdysis.sim` both refuse a port in use with one clear message."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        with pytest.raises(UsageError, match=f"127.0.0.1:{port}.*another --port"):
            start_background(port=port)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest_ecdysis.sim", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2 and "another --port" in proc.stderr


def test_standalone_server_serves_until_stopped(tmp_path):
    """`python -m pytest_ecdysis.sim --port 0 --profile strong` prints its URL and answers /v1/models."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_ecdysis.sim", "--port", "0", "--profile", "strong"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "'strong'" in line
        url = line.split("serving at ")[1].split()[0]
        assert httpx2.get(url + "/v1/models").json()["data"][0]["id"] == "sim"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_unknown_default_profile_and_malformed_profiles_are_usage_errors(tmp_path, monkeypatch):
    """An unknown profile lists the known ones; a malformed file names itself and the bad field."""
    with pytest.raises(UsageError, match="known profiles: .*default"):
        load_profile("nope")
    with pytest.raises(UsageError, match="unknown quirk kind 'teleport'"):
        parse_profile({"name": "x", "seed": 1, "quirks": {"teleport": {"rate": 0.1}}})
    with pytest.raises(UsageError, match="'rate' must be a number in"):
        parse_profile({"name": "x", "seed": 1, "quirks": {"slip": {"rate": 2}}})
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(UsageError, match="broken.json.*cannot be read as JSON"):
        load_profile("broken")


def test_shipped_profiles_parse_and_model_only_has_only_model_quirks():
    """default, strong and model_only load; model_only has only model-origin quirks."""
    from pytest_ecdysis.sim.profiles import QUIRK_ORIGINS

    for name in ("default", "strong", "model_only"):
        load_profile(name)
    assert {QUIRK_ORIGINS[k] for k in load_profile("model_only").rates} == {"model"}
    assert len(load_profile("default").rates) >= 7


def test_an_unknown_profile_on_the_command_line_is_a_usage_error(pytester):
    """`--ecdysis-model sim/nope` fails at configure time (exit 4) naming the known profiles."""
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--ecdysis-model", "sim/nope", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown simulated-model profile 'nope'*known profiles: *default*"])
