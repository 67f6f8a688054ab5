"""The role client: one small seam over the `openai` client for the FDCR roles and the built-in editor.

    client = RoleClient.from_config(cfg)            # or RoleClient("sim", ...) in tests
    reply = client.complete("analyst", messages)    # -> Completion(text, tokens, wall_s)

Endpoint resolution (README, "Your own endpoint"): a `sim...` diagnosis model is always served by the simulated
server at `$ECDYSIS_SIM_URL/v1` with api key "sim"; any other model goes to `--ecdysis-base-url`
(or `OPENAI_BASE_URL`, else the openai client's default) with the key from `OPENAI_API_KEY` (never
written anywhere). Every request carries the header `X-Ecdysis-Role: <role>`, which the simulated
server routes on and real endpoints ignore.

Timeouts, retries and a stage budget are explicit: each attempt has a total deadline of `timeout_s` that
covers the whole response, body included, and all calls of one stage (a round's diagnosis, or its edit)
share a `Budget` of `budget_s` seconds (`--ecdysis-limits diagnosis-budget`, `--ecdysis-limits editor-budget`);
`max_retries` (`--ecdysis-limits max-retries`) bounds the retries (`pytest_ecdysis.endpoint.deadline.DeadlineTransport`).
Endpoint failures after retries (down, timeout, 429/5xx, a rejected request, a spent stage budget) are
raised as `InfrastructureError`: a diagnosis that could not run is never mistaken for "no spec". A request
the server refuses because it does not fit the model's context raises `ContextOverflowError` (`overflow.py`).
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai

from pytest_ecdysis.core.config import EcdysisConfig, is_sim_model
from pytest_ecdysis.core.errors import ContextOverflowError, InfrastructureError, UsageError
from pytest_ecdysis.endpoint.deadline import Budget, DeadlineTransport, network_transport
from pytest_ecdysis.endpoint.overflow import completion_room, context_overflow
from pytest_ecdysis.endpoint.replies import strip_reasoning

#: Seconds per attempt of one role call (roles read long prompts; local models are slow).
DEFAULT_TIMEOUT_S = 180.0
#: Retries by the openai client on connection errors, 408/409/429 and 5xx (exponential backoff).
DEFAULT_MAX_RETRIES = 2
#: Completion tokens asked for per role turn.
DEFAULT_MAX_TOKENS = 4096

ROLE_HEADER = "X-Ecdysis-Role"


@dataclass(frozen=True)
class Completion:
    """One role turn: the reply text, its token counts (`prompt`, `completion`, `total`), wall seconds and
    the endpoint's `finish_reason` (`length`: cut at the token limit; None when not given)."""

    text: str
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "completion": 0, "total": 0})
    wall_s: float = 0.0
    finish_reason: str | None = None


def resolve_endpoint(model: str, base_url: str | None = None) -> tuple[str | None, str]:
    """`(base_url, api_key)` for a model, by the rules of the module docstring.

    Raises:
        UsageError: a `sim...` model without `ECDYSIS_SIM_URL` (no simulated server is running), or a
            real model with neither a base URL nor `OPENAI_API_KEY`.
    """
    if is_sim_model(model):
        sim_url = os.environ.get("ECDYSIS_SIM_URL")
        if not sim_url:
            raise UsageError(
                f"diagnosis model {model!r} is simulated but ECDYSIS_SIM_URL is not set: run inside a pytest "
                "session with the plugin (it starts the simulated server), or start one with "
                "`python -m pytest_ecdysis.sim --port N` and export ECDYSIS_SIM_URL=http://127.0.0.1:N"
            )
        return sim_url.rstrip("/") + "/v1", "sim"
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    key = os.environ.get("OPENAI_API_KEY")
    if not key and not base_url:
        raise UsageError(
            f"diagnosis model {model!r} is not simulated, and neither --ecdysis-base-url (or OPENAI_BASE_URL) "
            "nor OPENAI_API_KEY is set: point at your endpoint or use --ecdysis-diagnosis-model sim"
        )
    # Local OpenAI-compatible servers (vLLM, Ollama, llama.cpp) accept any key; the client needs one.
    return base_url, key or "unused"


class RoleClient:
    """Chat completions for the diagnosis roles through one `openai.OpenAI` client.

    Args:
        model: the model name sent (`sim`, `sim/<profile>`, or a real model).
        base_url: endpoint for real models (ignored for `sim...`).
        timeout_s: seconds per attempt.
        max_retries: retries before an `InfrastructureError`.
        client: a ready `openai.OpenAI` (tests pass one over `httpx2.MockTransport`); when given,
            endpoint resolution is skipped, its openai retries are used, and the budget is checked
            between calls only.
        budget_s: total seconds of every call of this client's stage (None: unbounded); `restart_budget()`
            starts it again.
        stage: the budget's name in messages (`diagnosis`, `editor`).
        transport: the network transport under the deadlines (tests: a local server or a mock).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        client: openai.OpenAI | None = None,
        budget_s: float | None = None,
        stage: str = "diagnosis",
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.budget = Budget(math.inf if budget_s is None else budget_s, label=stage)
        #: optional request parameters this endpoint rejected (HTTP 400 naming them): not sent again.
        self._rejected: set[str] = set()
        if client is None:
            url, key = resolve_endpoint(model, base_url)
            deadline = DeadlineTransport(
                transport or network_transport(),
                self.budget,
                call_timeout_s=timeout_s,
                max_retries=max_retries,
                retry_timeouts=False,
            )
            client = openai.OpenAI(
                base_url=url,
                api_key=key,
                timeout=timeout_s,
                max_retries=0,
                http_client=httpx2.Client(transport=deadline, timeout=timeout_s),
            )
        else:
            client = client.with_options(timeout=timeout_s, max_retries=max_retries)
        self._client = client
        self.calls = 0

    @classmethod
    def from_config(cls, cfg: EcdysisConfig, stage: str = "diagnosis", **kwargs: Any) -> RoleClient:
        """A client for `cfg.diagnosis_model` (an `EcdysisConfig`) with the stage's budget
        (`cfg.diagnosis_budget_s` or `cfg.editor_budget_s`), `cfg.max_retries`, and per attempt the larger
        of `DEFAULT_TIMEOUT_S` and `cfg.call_timeout_s` (`--ecdysis-limits call-timeout`): a slow endpoint's user
        raises that one, and a role call cut at 180 s is asked again from the start (measured with a real
        model: a 232-s critic call answered twice, docs/real-model.md)."""
        kwargs.setdefault("budget_s", getattr(cfg, f"{stage}_budget_s", None))
        kwargs.setdefault("timeout_s", max(DEFAULT_TIMEOUT_S, float(getattr(cfg, "call_timeout_s", 0) or 0)))
        if getattr(cfg, "max_retries", None) is not None:
            kwargs.setdefault("max_retries", cfg.max_retries)
        return cls(cfg.diagnosis_model, base_url=cfg.base_url, stage=stage, **kwargs)

    def restart_budget(self) -> None:
        """Start the stage budget again (one client reused for the same stage in the next round)."""
        self.budget.restart()

    def complete(self, role: str, messages: list[dict[str, Any]], *, json_mode: bool = False) -> Completion:
        """One chat completion for `role`; returns the reply text (possibly empty), tokens and wall seconds.

        `json_mode` asks for `response_format={"type": "json_object"}`. An endpoint that rejects an optional
        parameter (`response_format`, `temperature`, `max_tokens`: HTTP 400 naming it) is asked again
        without it, and this client never sends it again. A prompt that fits the context while prompt +
        `max_tokens` does not (the server's message gives both counts) is asked again once with `max_tokens`
        = the room left.

        Raises:
            ContextOverflowError: the endpoint says the request does not fit the model's context window.
            InfrastructureError: connection failure, timeout, rate limit or server error after retries, or
                an endpoint that rejects the request (HTTP 4xx); the message names the endpoint's reason.
        """
        optional: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": 0}
        if json_mode:
            optional["response_format"] = {"type": "json_object"}
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "extra_headers": {ROLE_HEADER: role},
        }
        kwargs.update({k: v for k, v in optional.items() if k not in self._rejected})
        start = time.monotonic()
        if self.budget.remaining() <= 0:
            self.budget.exhausted = True
            raise InfrastructureError(f"{role} call to {self.model!r} not sent: {self.budget.describe()}")
        try:
            while True:
                try:
                    response = self._client.chat.completions.create(**kwargs)
                    break
                except openai.BadRequestError as exc:
                    room = completion_room(f"{exc.message} {exc.response.text}")
                    if room and room < kwargs.get("max_tokens", 0):  # the prompt fits, max_tokens does not
                        kwargs["max_tokens"] = room
                        continue
                    named = [k for k in optional if k in kwargs and k in str(exc)]
                    if not named:
                        raise
                    self._rejected.update(named)  # e.g. no JSON mode, or max_completion_tokens only
                    for k in named:
                        kwargs.pop(k)
        except openai.APITimeoutError as exc:
            if self.budget.exhausted:
                raise InfrastructureError(f"{role} call to {self.model!r}: {self.budget.describe()}") from exc
            raise InfrastructureError(
                f"{role} call to {self.model!r} timed out: {exc.__cause__ or exc}; not asked again (a server that "
                "accepted it may still be computing it, and a retry would queue behind it); a slow model needs a "
                "longer --ecdysis-limits call-timeout"
            ) from exc
        except openai.APIConnectionError as exc:
            raise InfrastructureError(f"{role} call to {self.model!r}: endpoint unreachable: {exc}") from exc
        except openai.APIStatusError as exc:
            said = context_overflow(exc.status_code, f"{exc.message} {exc.response.text}")
            if said:
                raise ContextOverflowError(
                    f"the {role} prompt does not fit the context window of {self.model!r} (HTTP {exc.status_code}: "
                    f"{said}); use a model or server with a longer context, or send less evidence "
                    "(--ecdysis-evidence failure-aware:N)"
                ) from exc
            raise InfrastructureError(
                f"{role} call to {self.model!r} failed with HTTP {exc.status_code}: {exc.message}"
            ) from exc
        except openai.APIError as exc:
            raise InfrastructureError(f"{role} call to {self.model!r} failed: {exc}") from exc
        wall_s = time.monotonic() - start
        self.calls += 1
        text, finish = "", None
        choices = getattr(response, "choices", None) or []
        if choices:
            finish = getattr(choices[0], "finish_reason", None)
            if choices[0].message is not None:
                text, _ = strip_reasoning(choices[0].message.content or "")  # a reasoning model's <think>
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        total = int(getattr(usage, "total_tokens", 0) or 0) or prompt + completion
        return Completion(
            text=text,
            tokens={"prompt": prompt, "completion": completion, "total": total},
            wall_s=wall_s,
            finish_reason=finish,
        )


def add_tokens(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """`total` + `more`, key by key over `prompt`, `completion`, `total` (a new dict)."""
    return {k: int(total.get(k, 0)) + int(more.get(k, 0)) for k in ("prompt", "completion", "total")}
