# ruff: noqa: F821 - appended to a copy of the example harness's agent.py (HarnessAgent, tool_interface are its names)
"""Appended to a copy of `pytest_ecdysis_tau2/example_harness/agent.py` by `benchmarks/near_miss_harness.py`:
before the example's `_emit_calls` sends the calls of a reply, each call's arguments are normalised as the
example does (`tools.normalise_arguments`) and then grounded (`grounding.py`, copied beside this module):
an id-like value the conversation does not hold, one edit from exactly one value it does, is rewritten to
that value, and each rewrite is a harness note `near_miss_repair` at the trial's model-call count. The
example's own code then runs unchanged on the grounded arguments (its normalisation again: a no-op on
them, but an upper-cased `reservation_id` where the held value was lower case)."""

from . import grounding as _grounding

_example_emit_calls = HarnessAgent._emit_calls


def _emit_grounded_calls(self, calls, state):
    words = _grounding.vocabulary(state.messages)
    for call in calls:
        args = tool_interface.normalise_arguments(call.name, call.arguments)
        repairs: list[tuple[str, str]] = []
        call.arguments = _grounding.ground(args, words, repairs)
        for sent, held in repairs:
            self._note(
                "near_miss_repair",
                f"{call.name}: {sent!r} is not in the conversation; sent {held!r}",
                self.model_calls,
            )
    return _example_emit_calls(self, calls, state)


HarnessAgent._emit_calls = _emit_grounded_calls
