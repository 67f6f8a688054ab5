"""Prices (`core.prices`): litellm's bundled map read offline, the project's override, unknown never 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx2
import openai
import pytest

from pytest_ecdysis.core import prices
from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.endpoint.role_client import RoleClient

REPLY = Path(__file__).parent / "fixtures" / "replies" / "openai" / "text.json"


def _client_replying(body: dict) -> RoleClient:
    transport = httpx2.MockTransport(lambda request: httpx2.Response(200, json=body))
    oa = openai.OpenAI(base_url="http://test/v1", api_key="k", http_client=httpx2.Client(transport=transport))
    return RoleClient("gpt-4o-mini", client=oa, max_retries=0)


def test_recorded_gpt_4o_mini_reply_is_priced_from_litellms_map() -> None:
    """An OpenAI-shaped reply of gpt-4o-mini (1817 prompt, 21 completion tokens) read by the role client is
    priced at litellm's published gpt-4o-mini price ($0.15 / $0.60 per million tokens), for the name asked
    for, the dated name the reply carries, and a provider-prefixed name."""
    body = json.loads(REPLY.read_text())["body"]
    reply = _client_replying(body).complete("analyst", [{"role": "user", "content": "hi"}])
    assert reply.tokens == {"prompt": 1817, "completion": 21, "total": 1838}
    table = prices.load_prices()
    expected = 1817 * 0.15e-6 + 21 * 0.60e-6
    for name in ("gpt-4o-mini", body["model"], "openai/gpt-4o-mini"):
        cost, note = prices.cost_usd(name, reply.tokens, table)
        assert note == "priced" and cost == pytest.approx(expected), name
    assert prices.price_of("gpt-4o-mini", table)["source"] == "litellm"


def test_project_file_overrides_and_price_zero_is_a_price(tmp_path: Path) -> None:
    """`.ecdysis/prices.json` wins over litellm's map; 0 (a local server) is a known price of 0 USD."""
    (tmp_path / ".ecdysis").mkdir()
    (tmp_path / ".ecdysis" / "prices.json").write_text(
        json.dumps(
            {
                "models": {
                    "gpt-4o-mini": {"prompt_per_mtok": 1.0, "completion_per_mtok": 1.0},
                    "local-llama": {"prompt_per_mtok": 0, "completion_per_mtok": 0},
                }
            }
        )
    )
    table = prices.load_prices(tmp_path)
    tokens = {"prompt": 1_000_000, "completion": 1_000_000, "total": 2_000_000}
    assert prices.cost_usd("gpt-4o-mini", tokens, table) == (pytest.approx(2.0), "priced")
    assert prices.cost_usd("local-llama", tokens, table) == (0.0, "priced")


def test_unknown_model_and_no_litellm_are_unknown_never_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model in no table costs None with a note naming it; without litellm even gpt-4o-mini is unknown,
    and the note says litellm is not installed."""
    tokens = {"prompt": 10, "completion": 10, "total": 20}
    cost, note = prices.cost_usd("my-own-model-7b", tokens, prices.load_prices())
    assert cost is None and "my-own-model-7b" in note and ".ecdysis/prices.json" in note
    monkeypatch.setattr(prices, "litellm_map_path", lambda: None)
    cost, note = prices.cost_usd("gpt-4o-mini", tokens, prices.load_prices())
    assert cost is None and "litellm is not installed" in note


def test_negative_price_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / ".ecdysis").mkdir()
    (tmp_path / ".ecdysis" / "prices.json").write_text(
        '{"models": {"x": {"prompt_per_mtok": -1, "completion_per_mtok": 0}}}'
    )
    with pytest.raises(UsageError, match="negative price for x"):
        prices.load_prices(tmp_path)


def test_reading_prices_does_not_import_litellm() -> None:
    """The map is read as a file: importing litellm takes seconds and may fetch a price map online."""
    code = (
        "import sys; from pytest_ecdysis.core import prices; t = prices.load_prices(); "
        "assert 'gpt-4o-mini' in t; print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
