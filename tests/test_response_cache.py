"""The response cache (common random numbers): a hit only on a byte-identical request of the same task,
trial and role; misses go to the endpoint and are stored; stats per run id; uncacheable endpoints."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import openai
import pytest

from pytest_ecdysis.endpoint.response_cache import (
    ENV_DIR,
    ENV_UNCACHEABLE,
    CachingTransport,
    ResponseCache,
    run_stats,
    wrap_transport,
)


class Endpoint:
    """A MockTransport endpoint that answers every chat completion with a fresh text, counting calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        return httpx2.Response(
            200,
            json={
                "id": f"c{self.calls}",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"answer {self.calls}"},
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )


def _client(cache_dir: Path, endpoint: Endpoint, trial: str, role: str = "agent") -> openai.OpenAI:
    transport = wrap_transport(
        httpx2.MockTransport(endpoint), model="m", base_url="http://x/v1", env={ENV_DIR: str(cache_dir)}
    )
    return openai.OpenAI(
        base_url="http://x/v1",
        api_key="k",
        max_retries=0,
        default_headers={"X-Ecdysis-Trial": trial, "X-Ecdysis-Role": role},
        http_client=httpx2.Client(transport=transport),
    )


def _ask(client: openai.OpenAI, text: str) -> str:
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content


def test_hit_only_on_a_byte_identical_request_of_the_same_task_trial_and_role(tmp_path: Path) -> None:
    """A second run (another run id) asking the same thing of the same task and trial gets the stored
    answer without calling the endpoint; another text, task, trial or role is a miss."""
    endpoint = Endpoint()
    first = _client(tmp_path, endpoint, "runA/air/3/0")
    assert _ask(first, "hello") == "answer 1"
    again = _client(tmp_path, endpoint, "runB/air/3/0")
    assert _ask(again, "hello") == "answer 1" and endpoint.calls == 1
    assert _ask(again, "hello!") == "answer 2"  # not byte-identical
    assert _ask(_client(tmp_path, endpoint, "runB/air/4/0"), "hello") == "answer 3"  # another task
    assert _ask(_client(tmp_path, endpoint, "runB/air/3/1"), "hello") == "answer 4"  # another trial
    assert _ask(_client(tmp_path, endpoint, "runB/air/3/0", role="user"), "hello") == "answer 5"  # role
    assert endpoint.calls == 5
    assert run_stats(tmp_path, "runA") == {"hits": 0, "misses": 1, "tokens_saved": 0}
    assert run_stats(tmp_path, "runB") == {"hits": 1, "misses": 4, "tokens_saved": 15}


def test_errors_are_not_stored(tmp_path: Path) -> None:
    calls = []

    def failing(request: httpx2.Request) -> httpx2.Response:
        calls.append(1)
        return httpx2.Response(503, json={"error": "busy"})

    transport = CachingTransport(httpx2.MockTransport(failing), ResponseCache(tmp_path))
    request = httpx2.Request(
        "POST",
        "http://x/v1/chat/completions",
        content=b"{}",
        headers={"X-Ecdysis-Trial": "r/s/1/0", "X-Ecdysis-Role": "agent"},
    )
    for _ in range(2):
        assert transport.handle_request(request).status_code == 503
    assert len(calls) == 2 and not list(tmp_path.glob("*/*.json"))


def test_uncacheable_endpoints_and_no_directory_are_passed_through(tmp_path: Path) -> None:
    inner = httpx2.MockTransport(Endpoint())
    assert wrap_transport(inner, model="m", base_url="http://x/v1", env={}) is inner
    env = {ENV_DIR: str(tmp_path), ENV_UNCACHEABLE: "other, http://x/v1/"}
    assert wrap_transport(inner, model="m", base_url="http://x/v1", env=env) is inner
    assert (
        wrap_transport(inner, model="gpt", base_url="http://y", env={**env, ENV_UNCACHEABLE: "gpt"}) is inner
    )
    assert isinstance(wrap_transport(inner, model="m", base_url="http://y", env=env), CachingTransport)


def test_a_torn_entry_is_a_miss(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    cache.put("ab" + "0" * 62, json.dumps({"x": 1}), 3)
    assert cache.get("ab" + "0" * 62)["tokens"] == 3
    cache.path("cd" + "0" * 62).parent.mkdir(parents=True)
    cache.path("cd" + "0" * 62).write_text("{not json")
    assert cache.get("cd" + "0" * 62) is None


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_DIR, raising=False)


def test_bad_cache_options_are_usage_errors(pytester: pytest.Pytester) -> None:
    """An unknown ecdysis_response_cache value, or a cache directory under a file, stops the session at
    configure time (exit 4) with a message naming the fix."""
    pytester.makepyfile("def test_x(): pass")
    (pytester.path / "afile").write_text("")
    result = pytester.runpytest_subprocess("-o", "ecdysis_response_cache=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini key ecdysis_response_cache must be one of on, off, got 'maybe'*"])
    result = pytester.runpytest_subprocess(
        "--ecdysis-evolve",
        "-o",
        "ecdysis_response_cache=on",
        "-o",
        "ecdysis_cache_dir=" + str(pytester.path / "afile" / "cache"),
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini key ecdysis_cache_dir *afile/cache: *afile is not a writable directory*"]
    )
