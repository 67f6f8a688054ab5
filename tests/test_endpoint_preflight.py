"""The endpoint's pre-flight (`pytest_ecdysis.endpoint.preflight`): one call per model before any trial.

The refusals below are the servers' own words as their public reports quote them (each constant names its
source); the recorded replies of `tests/fixtures/replies/` are replayed too. Sessions run over HTTP against
a scripted server on 127.0.0.1 (`slow_endpoint.SlowEndpoint`); no network.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest
from slow_endpoint import SlowEndpoint, completion_bytes

from pytest_ecdysis.endpoint.preflight import ENV_DONE, TOOL, check_model, classify

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "replies"

#: Ollama's OpenAI endpoint for a model whose template has no tools (ollama/ollama #14795).
OLLAMA_NO_TOOLS = (
    400,
    {
        "error": {
            "message": "registry.ollama.ai/library/gemma3:270m does not support tools",
            "type": "api_error",
            "param": None,
            "code": None,
        }
    },
)
#: vLLM started without the tool flags (its OpenAI server's BadRequestError).
VLLM_NO_AUTO = (
    400,
    {
        "object": "error",
        "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
)
#: llama.cpp's llama-server started without --jinja.
LLAMACPP_NO_JINJA = (
    500,
    {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}},
)
#: Azure OpenAI's content filter on the prompt.
AZURE_FILTER = (
    400,
    {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure "
            "OpenAI's content management policy.",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
        }
    },
)
OPENAI_BAD_KEY = (
    401,
    {
        "error": {
            "message": "Incorrect API key provided: sk-xxx.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    },
)
#: OpenRouter: an upstream failure as an error object in an HTTP 200 body, no choices.
OPENROUTER_502_IN_200 = (200, {"error": {"code": 502, "message": "Provider returned error"}})

CASES = {
    "ollama-no-tools": (
        OLLAMA_NO_TOOLS,
        "tools_unsupported",
        "Ollama: use a model whose template supports tools",
    ),
    "vllm-no-auto-tool-choice": (VLLM_NO_AUTO, "tools_unsupported", "vLLM: start `vllm serve` with"),
    "llamacpp-no-jinja": (
        LLAMACPP_NO_JINJA,
        "tools_unsupported",
        "llama.cpp: start `llama-server` with --jinja",
    ),
    "azure-content-filter": (AZURE_FILTER, "content_filter", "content policy"),
    "bad-key": (OPENAI_BAD_KEY, "key_refused", "OPENAI_API_KEY"),
    "openrouter-502-in-200": (OPENROUTER_502_IN_200, "transient", "the trials retry"),
}


def mock(status: int, body: dict | bytes, content_type: str = "application/json", seen: list | None = None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    def handler(request: httpx2.Request) -> httpx2.Response:
        if seen is not None:
            seen.append(json.loads(request.content))
        return httpx2.Response(status, content=data, headers={"content-type": content_type})

    return httpx2.MockTransport(handler)


def check(transport, **kw):
    return check_model(
        "m",
        "http://server/v1",
        "k",
        call_timeout_s=5.0,
        max_retries=1,
        backoff_s=0.0,
        transport=transport,
        **kw,
    )


@pytest.mark.parametrize("name", list(CASES))
def test_a_refusal_is_classified_and_names_what_to_change(name):
    """Each server's refusal of the suite's request shape is its outcome, quoting the server and naming the fix."""
    (status, body), outcome, fix = CASES[name]
    seen: list = []
    result = check(mock(status, body, seen=seen))
    assert result.outcome == outcome, result
    assert fix in result.fix
    assert result.problem is (outcome != "transient") and result.wall_s >= 0
    said = body["error"]["message"] if isinstance(body.get("error"), dict) else body["message"]
    assert said[:60] in result.detail
    # the suite's shape: one function tool with a parameters object, tool_choice auto
    assert seen[0]["tools"] == [TOOL] and seen[0]["tool_choice"] == "auto" and seen[0]["model"] == "m"


def test_a_tool_call_works_and_a_text_call_is_a_missing_tool_parser():
    """A tool call is `ok`; a call written as text is `tools_unsupported` unless the trials parse such calls."""
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
    assert check(mock(200, completion_bytes(call))).outcome == "ok"
    text = {"content": '<tool_call>{"name": "get_reservation_details", "arguments": {}}</tool_call>'}
    refused = check(mock(200, completion_bytes(text)))
    assert refused.outcome == "tools_unsupported" and "ecdysis_text_tool_calls = parse" in refused.fix
    assert check(mock(200, completion_bytes(text)), text_tool_calls="parse").outcome == "ok"
    assert check(mock(200, completion_bytes({"content": "Sure."}))).outcome == "ok"


def test_a_wrong_base_url_a_missing_model_and_no_server():
    """An HTML page (a base URL without /v1), a 404 naming the model, and a closed port."""
    page = check(mock(200, b"<html><body>Welcome</body></html>", "text/html"))
    assert page.outcome == "base_url_wrong" and "ends in /v1" in page.fix.replace("ending in", "ends in")
    missing = check(mock(404, {"error": {"message": 'model "llama3.1" not found, try pulling it first'}}))
    assert missing.outcome == "model_not_found" and "ollama pull" in missing.fix
    closed = check_model("m", "http://127.0.0.1:9/v1", "k", call_timeout_s=2.0, max_retries=0)
    assert closed.outcome == "base_url_wrong" and "is the server running?" in closed.fix


KNOWN = {"tool_call": "ok", "text": "ok", "tool_call_as_text": "tools_unsupported", "empty": "ok"}


def _fixture_outcomes() -> list[tuple[str, str]]:
    out = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        doc = json.loads(path.read_text())
        body = doc["body"]
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        outcome, detail, _ = classify(doc.get("status", 200), data, "application/json")
        out.append((f"{path.parent.name}/{path.stem}", doc["kind"], outcome, detail))
    return out


def test_the_preflight_reads_every_recorded_server_reply(capsys):
    """The pre-flight's outcome for each recorded reply of `tests/fixtures/replies/` (printed as a table):
    a tool call or text is `ok`, a call written as text a missing tool parser, a missing model
    `model_not_found`, a context overflow `server_error`, a 5xx or 429 `transient`; none is mistaken for a
    working endpoint when it is an error."""
    rows = _fixture_outcomes()
    for name, kind, outcome, detail in rows:
        print(f"{name:45} {kind:18} {outcome:18} {detail[:70]}")
        if kind in KNOWN:
            assert outcome == KNOWN[kind], (name, outcome, detail)
        if kind in ("server_error", "context_overflow"):
            assert outcome != "ok", (name, detail)
    assert ("ollama/model_not_found", "server_error", "model_not_found") in [r[:3] for r in rows]


# -- whole sessions over HTTP ------------------------------------------------------------------------


def _session(pytester, server_url: str, *extra: str):
    pytester.makepyfile("def test_x(): pass")
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--ecdysis-model",
        "gemma3:270m",
        "--ecdysis-base-url",
        server_url,
        "--ecdysis-run-dir",
        str(pytester.path / "runs"),
        *extra,
        timeout=300,
    )


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(ENV_DONE, raising=False)
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "k")


def test_a_server_without_tools_stops_the_session_before_any_trial(pytester, clean_env):
    """Ollama's "does not support tools": one usage error (exit 4) naming Ollama's fix, one call, no trial,
    and `preflight.json` the only file written."""
    status, body = OLLAMA_NO_TOOLS
    with SlowEndpoint(default=("status", status, json.dumps(body).encode(), "application/json")) as server:
        result = _session(pytester, server.url)
        calls = [role for role, _ in server.requests]
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["*pre-flight found 1 configuration problem*", "*tools_unsupported*Ollama*"])
    assert calls == ["preflight"]
    (run_dir,) = (pytester.path / "runs").iterdir()
    assert [p.name for p in run_dir.iterdir()] == ["preflight.json"]
    doc = json.loads((run_dir / "preflight.json").read_text())
    assert doc["calls"] == 1 and doc["checks"][0]["outcome"] == "tools_unsupported"


def test_a_preflight_timeout_names_the_option_and_runs_no_trial(pytester, clean_env):
    """A server that never answers: the pre-flight says it timed out and names --ecdysis-limits call-timeout."""
    with SlowEndpoint(default=("silence",)) as server:
        result = _session(pytester, server.url, "--ecdysis-limits", "call-timeout=1,max-retries=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*timeout*--ecdysis-limits call-timeout=SECONDS*"])
    assert "1 passed" not in result.stdout.str()


def test_a_working_endpoint_prints_the_cost_and_runs(pytester, clean_env):
    """A tool-calling endpoint: the session prints the pre-flight's one call and its wall-clock, then runs;
    `--ecdysis-preflight off` sends nothing; an unknown value is a usage error."""
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
    with SlowEndpoint(default=("ok", call)) as server:
        result = _session(pytester, server.url, "--ecdysis-user-model", "gemma3:270m")
        assert [r for r, _ in server.requests] == ["preflight"]  # one call per distinct model
        result.stdout.fnmatch_lines(
            ["*endpoint pre-flight: 1 call(s), one per model, *s*", "*gemma3:270m at*ok*"]
        )
        assert result.ret == 0
        off = _session(pytester, server.url, "--ecdysis-preflight", "off")
        assert off.ret == 0 and len(server.requests) == 1
    bad = _session(pytester, "http://127.0.0.1:9/v1", "--ecdysis-preflight", "maybe")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--ecdysis-preflight must be one of on, off*"])


def test_the_preflight_over_http_for_each_recorded_server_kind(capsys):
    """Each recorded reply of `tests/fixtures/replies/` served over HTTP by a scripted server: the
    pre-flight's outcome and wall-clock per server kind (printed; `-s` shows the table). One call each, no
    retry but for a 5xx or 429 (max_retries=1, no backoff)."""
    rows = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        doc = json.loads(path.read_text())
        body = doc["body"]
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        with SlowEndpoint(default=("status", doc.get("status", 200), data, "application/json")) as server:
            result = check_model("m", server.url, "k", call_timeout_s=10.0, max_retries=1, backoff_s=0.0)
        rows.append((f"{path.parent.name}/{path.stem}", result))
    with capsys.disabled():
        print()
        for name, r in rows:
            print(f"  {name:42} {r.outcome:18} {r.wall_s * 1000:7.1f} ms  {r.detail[:60]}")
        walls = sorted(r.wall_s for _, r in rows)
        print(
            f"  median {walls[len(walls) // 2] * 1000:.1f} ms, max {walls[-1] * 1000:.1f} ms over {len(rows)}"
        )
    outcomes = {name: r.outcome for name, r in rows}
    assert (
        outcomes["vllm/tool_call"] == outcomes["ollama/tool_call"] == outcomes["llamacpp/tool_call"] == "ok"
    )
    assert outcomes["vllm/tool_call_as_text_hermes"] == "tools_unsupported"
    assert outcomes["ollama/model_not_found"] == "model_not_found"
    assert all(r.wall_s < 10.0 for _, r in rows)


# -- the tool shape comes from the suite -------------------------------------------------------------


def test_the_tau2_suites_shape_is_tau2s_own_tool_schemas():
    """The τ² suite's hook gives τ²'s own `openai_schema` of the tools it names (pydantic's `title` keys and
    book_reservation's `$defs` included, which the fallback constant lacks), `tool_choice` auto; the
    registry returns it and `shape` takes it as it is."""
    pytest.importorskip("tau2")
    from pytest_ecdysis.core.registry import preflight_request
    from pytest_ecdysis.endpoint.preflight import shape
    from pytest_ecdysis_tau2.tasks import suite

    given = preflight_request()
    real = {t.name: t.openai_schema for t in suite.get_environment("airline").get_tools()}
    names = [t["function"]["name"] for t in given["tools"]]
    assert names == ["get_reservation_details", "book_reservation"]
    assert given["tools"] == [real[n] for n in names]  # the data file has not drifted from τ²
    assert "$defs" in json.dumps(given["tools"]) and given["tools"][0] != TOOL
    assert shape(given) == {"tools": given["tools"], "tool_choice": "auto", "messages": given["messages"]}


def test_the_request_sent_is_the_suites_shape_or_the_fallback():
    """`check_model` sends the shape it is given (tools, tool_choice, messages), and without one the
    fallback constant with `auto`."""
    from pytest_ecdysis.endpoint.preflight import MESSAGES, shape

    own = {
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
        "tool_choice": "required",
        "messages": [{"role": "user", "content": "Look it up."}],
    }
    seen: list = []
    assert (
        check(mock(200, completion_bytes({"content": "ok"}), seen=seen), request=shape(own)).outcome == "ok"
    )
    assert check(mock(200, completion_bytes({"content": "ok"}), seen=seen)).outcome == "ok"
    assert [s["tools"] for s in seen] == [own["tools"], [TOOL]]
    assert [s["tool_choice"] for s in seen] == ["required", "auto"]
    assert [s["messages"] for s in seen] == [own["messages"], MESSAGES]
    assert shape(None) == {"tools": [TOOL], "tool_choice": "auto", "messages": MESSAGES}


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ([], "is a list, not a dict"),
        ({"tool_choice": "auto"}, "has no `tools` list"),
        ({"tools": [{"type": "function", "function": {"name": "x"}}]}, "has a tool (0) that is not"),
        ({"tools": [TOOL], "tool_choice": 3}, "`tool_choice` that is neither"),
        ({"tools": [TOOL], "messages": "hi"}, "`messages` that are not a list"),
    ],
)
def test_a_suite_shape_that_is_not_one_is_a_usage_error(given, said):
    """A suite hook that returns something else than a tool shape: one UsageError naming what is wrong,
    the hook, and --ecdysis-preflight off."""
    from pytest_ecdysis.core.errors import UsageError
    from pytest_ecdysis.endpoint.preflight import shape

    with pytest.raises(UsageError, match="ecdysis_preflight_request") as err:
        shape(given)
    assert said in str(err.value) and "--ecdysis-preflight off" in str(err.value)


def test_a_session_sends_the_suites_tools(pytester, clean_env):
    """Over HTTP, the way users run it: the session's one pre-flight call carries the τ² suite's tools
    (τ²'s own schemas), `tool_choice` auto."""
    pytest.importorskip("tau2")
    bodies: list[dict] = []

    def reply(body: dict) -> tuple[int, bytes]:
        bodies.append(body)
        return 200, completion_bytes({"content": "ok"})

    with SlowEndpoint(default=("respond", reply)) as server:
        assert _session(pytester, server.url).ret == 0
    [body] = bodies
    assert [t["function"]["name"] for t in body["tools"]] == ["get_reservation_details", "book_reservation"]
    assert body["tool_choice"] == "auto" and "title" in json.dumps(body["tools"])


def test_with_no_suite_giving_a_shape_the_fallback_is_sent(monkeypatch):
    """No installed suite implements the hook (a plugin manager with the specs only): the registry answers
    None and the pre-flight sends its own `TOOL`, `auto`, `MESSAGES`."""
    import pluggy

    from pytest_ecdysis.core import hookspecs, registry
    from pytest_ecdysis.endpoint.preflight import MESSAGES, shape

    bare = pluggy.PluginManager("ecdysis")
    bare.add_hookspecs(hookspecs)
    monkeypatch.setattr(registry, "plugin_manager", lambda: bare)
    assert registry.preflight_request() is None
    assert shape(registry.preflight_request()) == {
        "tools": [TOOL],
        "tool_choice": "auto",
        "messages": MESSAGES,
    }
