"""An oracle harness for the suite's tests only: it replays the task's gold actions, then states the
task's `communicate_info` and waits for the user to stop. It makes no model call. A gold action of the
user (τ² telecom, dual control) is asked for as `USER_ACTION` + its JSON, which the tests' scripted user
endpoint runs with its own tools.

It learns its task from the `X-Ecdysis-Trial` header of the client the suite hands it
(`<run-id>/<suite>/<task-id>/<trial>`), and reads τ²'s gold data: never a real harness's behaviour.
"""

from __future__ import annotations

import json
from typing import Any

from tau2.agent.base import BaseAgent
from tau2.data_model.message import AssistantMessage, ToolCall

from pytest_ecdysis_tau2.tasks import suite

DONE_TEXT = "All done."
USER_ACTION = "Please run this on your phone: "


class OracleAgent(BaseAgent):
    def __init__(self, task: Any) -> None:
        criteria = task.evaluation_criteria
        self.gold = list(criteria.actions or []) if criteria else []
        self.info = list((criteria.communicate_info or []) if criteria else [])
        self.harness_notes: list[dict] = []
        self.usage = {"prompt": 0, "completion": 0, "total": 0}
        self.next = 0

    def get_init_state(self, message_history=None):
        return None

    def generate_next_message(self, message, state):
        if self.next < len(self.gold):
            action = self.gold[self.next]
            self.next += 1
            if action.requestor == "user":
                asked = json.dumps({"name": action.name, "arguments": dict(action.arguments)})
                return AssistantMessage(role="assistant", content=USER_ACTION + asked), state
            call = ToolCall(
                id=f"oracle_{self.next}",
                name=action.name,
                arguments=dict(action.arguments),
                requestor="assistant",
            )
            return AssistantMessage(role="assistant", content=None, tool_calls=[call]), state
        figures = "; ".join(self.info)
        return AssistantMessage(role="assistant", content=f"{DONE_TEXT} {figures}".strip()), state

    def stop(self, message=None, state=None):
        pass

    def set_seed(self, seed):
        pass


def build_agent(*, tools, domain_policy, client, model, max_steps_hint=None, **options):
    _run, suite_name, task_id, _trial = client.default_headers["X-Ecdysis-Trial"].split("/")
    return OracleAgent(suite.get_task(suite_name.removeprefix("tau2-"), task_id))
