"""The trusted side owns every request parameter that changes what is measured.

A harness decides what it sends the model (messages, tools, temperature); it does not decide *which*
model answers, under which key, or as which role or trial. Two layers enforce that, both in the trusted
trial process (harness code never runs there), sandbox on or off:

- `guard_call(kwargs, model)`: the arguments of an agent call that came over the protocol channel
  (`agent_process.AgentProxy.call`). `extra_headers` and `extra_query` are dropped (the headers are the
  trial side's; filtering them in the child, `agent_child._Completions`, is a convenience, not the
  boundary); a `model` other than the configured one is overwritten with it. Each change is a note
  `{"kind": "model_overridden" | "request_filtered", "detail", "step": None}` that lands in the trial's
  `TrialResult.harness_notes`.
- `TrustedRequestTransport`: every request of a trial's client on the wire (`endpoint.make_client`), also
  when the harness holds the client itself (`ECDYSIS_AGENT_PROCESS=0`): the JSON body's `model` is set to
  the configured model, `X-Ecdysis-Role`, `X-Ecdysis-Trial` and `Authorization` to the trial side's
  values, and any header outside `ALLOWED_HEADERS` (and other `X-Ecdysis-*`) is dropped. Changes are
  notes in `EndpointLog.notes` (the trial's `endpoint_notes`).

A harness asking for another model is not an agent failure: the call is made with the configured model
and the note says what was asked. This module does not import tau2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2

#: Request headers a trial's client may send as they are (lower case; `x-stainless-*`, the openai
#: client's own telemetry, too); the trusted ones (`FORCED`) are set, every other header is dropped.
ALLOWED_HEADERS = frozenset(
    {
        "host",
        "accept",
        "accept-encoding",
        "connection",
        "content-type",
        "user-agent",
        "openai-organization",
        "openai-project",
    }
)
#: Call arguments a harness may not set over the channel: they carry headers or route the request.
DROPPED_ARGUMENTS = ("extra_headers", "extra_query")


def guard_call(kwargs: dict[str, Any], model: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the call's arguments as the trial side makes them, notes of what was changed).

    Pure: `kwargs` is not modified. `model` is the configured agent model (`--ecdysis-model`).
    """
    out = {k: v for k, v in kwargs.items() if k not in DROPPED_ARGUMENTS}
    notes = []
    dropped = [k for k in DROPPED_ARGUMENTS if k in kwargs]
    if dropped:
        names = sorted({str(h) for k in dropped if isinstance(kwargs[k], dict) for h in kwargs[k]})
        notes.append(
            {
                "kind": "request_filtered",
                "step": None,
                "detail": f"the harness passed {', '.join(dropped)} ({', '.join(names) or 'empty'}): "
                "dropped; headers and routing are the trial side's",
            }
        )
    asked = out.get("model")
    if asked != model:
        out["model"] = model
        notes.append(
            {
                "kind": "model_overridden",
                "step": None,
                "detail": f"the harness asked for model {str(asked)[:200]!r}; the configured model "
                f"{model!r} answered (the model is set by --ecdysis-model, not the harness)",
            }
        )
    return out, notes


class TrustedRequestTransport(httpx2.BaseTransport):
    """Sets the trusted parameters of every request on the wire; `note(kind, detail)` records a change.

    `forced`: header name -> value (the role, the trial, the authorization); `model`: the body's model.
    """

    def __init__(
        self,
        inner: httpx2.BaseTransport,
        *,
        model: str,
        forced: dict[str, str],
        note: Callable[[str, str], None] | None = None,
    ) -> None:
        self.inner, self.model, self.note = inner, model, note or (lambda kind, detail: None)
        self.forced = {k.lower(): v for k, v in forced.items()}
        self.seen: set[tuple[str, str]] = set()  # one note per distinct change, not one per call

    def _once(self, kind: str, detail: str) -> None:
        if (kind, detail) not in self.seen:
            self.seen.add((kind, detail))
            self.note(kind, detail)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        content = request.read()
        body_changed = False
        if content and request.method == "POST":
            try:
                body = json.loads(content)
            except ValueError:
                body = None
            if isinstance(body, dict) and body.get("model") != self.model:
                self._once(
                    "model_overridden",
                    f"a request asked for model {str(body.get('model'))[:200]!r}; "
                    f"the configured model {self.model!r} was sent",
                )
                body["model"] = self.model
                content, body_changed = json.dumps(body).encode(), True
        headers, dropped = [], []
        for name, value in request.headers.multi_items():
            low = name.lower()
            if low in self.forced or low == "content-length":
                if low in self.forced and value != self.forced[low]:
                    dropped.append(name)
                continue
            if low in ALLOWED_HEADERS or (low.startswith("x-stainless-") and not low.startswith("x-ecdysis")):
                headers.append((name, value))
            else:
                dropped.append(name)
        if dropped:
            self._once(
                "request_filtered",
                f"header(s) {', '.join(sorted(set(dropped)))} not sent as asked: "
                "headers and routing are the trial side's",
            )
        if (
            not dropped
            and not body_changed
            and all(request.headers.get(k) == v for k, v in self.forced.items())
        ):
            return self.inner.handle_request(request)
        headers += list(self.forced.items())
        clean = httpx2.Request(
            request.method, request.url, headers=headers, content=content, extensions=request.extensions
        )
        return self.inner.handle_request(clean)

    def close(self) -> None:
        self.inner.close()
