"""Settings of the example harness (the knobs the evolution recipes edit; keep these names).

Units: counts of model calls and messages, characters, seconds.
"""

#: Model calls per trial (every reply, text or tool call, and every re-ask counts). When used up the
#: harness ends the conversation with "step budget of N model calls reached" and τ²'s stop token.
#: A runaway guard, not a cut on legitimate work: the longest τ² plan (airline task 44: 20 tool calls,
#: 22 model calls with its confirmation and final answer) fits about 3 times, with room for the lookups
#: real models add (GPT-4o-mini: about 15 tool calls per task, shared/data/tau2-failure-modes.md) and
#: re-asks; τ²'s own limit (200 messages, so about 100 agent messages) stays the outer bound.
MAX_MODEL_CALLS = 60

#: Tool results longer than this are cut, with a "… [truncated N chars]" marker.
MAX_TOOL_RESULT_CHARS = 1200

#: The model sees the system prompt plus the last KEEP_LAST_MESSAGES messages of the conversation.
KEEP_LAST_MESSAGES = 40

#: Per-request timeout (s) passed to the client; the suite's client also caps it by the trial budget.
REQUEST_TIMEOUT_S = 60.0

#: Sampling temperature sent with every request.
TEMPERATURE = 0.0

#: Re-asks after an empty reply (no text, no tool call) before the trial ends as endpoint_format_error.
MAX_EMPTY_REPLIES = 1
