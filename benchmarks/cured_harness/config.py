"""Settings of the cured harness (benchmarks only: the example harness with the documented cures) (the knobs the evolution recipes edit; keep these names).

Units: counts of model calls and messages, characters, seconds.
"""

#: Model calls per trial (every reply, text or tool call, and every re-ask counts). When used up the
#: harness ends the conversation with "step budget of N model calls reached" and τ²'s stop token.
MAX_MODEL_CALLS = 40

#: Tool results longer than this are cut, with a "… [truncated N chars]" marker.
MAX_TOOL_RESULT_CHARS = 20000

#: The model sees the system prompt plus the last KEEP_LAST_MESSAGES messages of the conversation.
KEEP_LAST_MESSAGES = 200

#: Per-request timeout (s) passed to the client; the suite's client also caps it by the trial budget.
REQUEST_TIMEOUT_S = 60.0

#: Sampling temperature sent with every request.
TEMPERATURE = 0.0

#: Re-asks after an empty reply (no text, no tool call) before the trial ends as endpoint_format_error.
MAX_EMPTY_REPLIES = 1
