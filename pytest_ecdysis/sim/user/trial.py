"""The simulated user policy: answer the agent as the task's user scenario says, end with τ²'s stop token.

Reads only the agent's latest text (the last message of the request; τ²'s user simulator flips roles,
so it arrives as a `user` message, but any role is accepted) and the scenario from the suite's
knowledge. Deterministic; it never reads the system prompt. Turn rules, first match wins:

1. first turn: the reason for the call and the known info (identity), in the first person;
2. more than `MAX_TURNS` turns: thank and stop (`###STOP###`);
3. the agent says it transferred the user to a human: `###TRANSFER###`;
4. the agent closes (`anything else`): a want of its instructions not said yet is said ("Also: ...",
   `wants`); else, with a profile whose user leaves (`sim.profiles.UserProfile`), a request it made that the
   closing does not name as done (`done: ...`) is said: once repeated, at the profile's `remind_rate`,
   else the user leaves ("You did not ... ###STOP###"); else "No, that's all. Thank you! ###STOP###";
5. the agent asks for a confirmation (confirm / proceed / shall I / would you like): it corrects a value it
   knows listed wrong, asks once for the details when the confirmation lists none (in `DETAIL_SHARE` of
   the tasks), declines at the profile's `decline_rate` when its instructions let it (`may_decline`), else
   "Yes, please go ahead." (`UserTrial._confirm`);
6. the agent asks for details (id, name, zip, email, order, reservation, number): the known info again;
7. otherwise: repeat the reason for the call briefly.

With tools of its own (dual control, τ² telecom: the request offers the user's tool schemas), `message`
answers two more ways before those rules (after the first turn, and never over a closing, a transfer or
a confirmation request): the agent's words ask for one of its tools (`sim.user.tools.requested_call`) ->
it calls that tool (or asks which value, when a required argument is not in the words); the last message
is the result of its own call -> it tells the agent what the phone shows (`sim.user.tools.report`).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pytest_ecdysis.sim.knowledge import SimTask
from pytest_ecdysis.sim.motivation import names_action
from pytest_ecdysis.sim.profiles import Profile, uniform
from pytest_ecdysis.sim.reading import message_text
from pytest_ecdysis.sim.user.tools import missing_argument, report, requested_call, tool_call_message

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
MAX_TURNS = 15
#: The share of tasks whose user asks for the details of a confirmation that lists none (τ²'s policy: the
#: agent must list the action details before a write; its user simulator asks when it does not). A
#: modelling choice; no published rate.
DETAIL_SHARE = 0.5
#: An id-like word: letters, digits, `_`, `-` with at least one digit and one letter (`noah_muller_9847`),
#: an upper-case code (`SDZQKO`, `4OG6T3`) or a `#` order id (`#W0000001`).
_ID = re.compile(r"#[A-Z0-9]{5,}|\b[A-Z0-9]{5,}\b|\b(?=[\w\-]*\d)(?=[\w\-]*[A-Za-z])[A-Za-z0-9][\w\-]{4,}\b")


def _ids(text: str) -> list[str]:
    """The id-like words of a text, in order, without duplicates."""
    return list(dict.fromkeys(m.rstrip(".,;:") for m in _ID.findall(text)))


def _same_form(a: str, b: str) -> bool:
    """Whether two ids have the same form: length, separators and, per position, letter vs digit-or-letter."""
    strip = re.compile(r"[A-Za-z0-9]")
    return len(a) == len(b) and strip.sub("", a) == strip.sub("", b) and a.isupper() == b.isupper()


_PRONOUNS = [
    (r"\bYou are\b", "I am"),
    (r"\byou are\b", "I am"),
    (r"\bYou're\b", "I'm"),
    (r"\byou're\b", "I'm"),
    (r"\bYou have\b", "I have"),
    (r"\byou have\b", "I have"),
    (r"\bYour\b", "My"),
    (r"\byour\b", "my"),
    (r"\bYourself\b", "Myself"),
    (r"\byourself\b", "myself"),
    (r"\byou(?=[.,;!?])", "me"),
    (r"\bYou\b", "I"),
    (r"\byou\b", "I"),
]
_CONFIRM = ("confirm", "proceed", "shall i", "would you like me", "do you want me", "go ahead")
_DETAILS = (
    "user id",
    "your id",
    "name",
    "zip",
    "email",
    "order",
    "reservation",
    "number",
    "identify",
    "verify",
)


#: Instructions that let the user say no to a change (τ²'s scenarios: "You don't want to cancel if you don't
#: get a refund", "only go ahead if the total extra cost is less than $1000").
_MAY_DECLINE = re.compile(
    r"(?:don't|do not|doesn't|does not) want to (?:go ahead|cancel|proceed|change|book|pay|accept)"
    r"|only (?:go ahead|accept|proceed)|if and only if|not willing|(?:don't|do not) accept|unless",
    re.IGNORECASE,
)
_DONE = re.compile(r"\(done: ([^)]*)\)")


def may_decline(instructions: str) -> bool:
    """Whether a task's user instructions let the user decline a confirmation (`_MAY_DECLINE`)."""
    return bool(_MAY_DECLINE.search(instructions))


def _sentences(text: str) -> list[str]:
    return [x.strip() for x in re.split(r"(?<=[.!?])\s+|\n+", text) if x.strip()]


def _conditional(sentence: str) -> bool:
    """A sentence whose want waits on what the agent says ("If the agent says ..., ask to upgrade"; "if
    and only if"); one whose condition is that the agent did not do something is a want ("If the agent
    doesn't offer it, you ask for compensation")."""
    low = sentence.lower()
    if "only if" in low:
        return True
    head = low.split(",")[0]
    return low.startswith("if ") and not re.search(r"\b(?:doesn't|does not|don't|do not|didn't|not)\b", head)


def first_person(text: str) -> str:
    """τ² scenarios are written to the user ('You are Emma Kim.'); say them as the user would."""
    out = " ".join(text.split())
    for pattern, repl in _PRONOUNS:
        out = re.sub(pattern, repl, out)
    return out


class UserTrial:
    """The simulated user's state for one trial: turns taken and everything it said (so the agent side
    can tell a harness's check message from the user's own words)."""

    def __init__(
        self, task: SimTask, profile: Profile | None = None, trial: int = 0, nonce: str = ""
    ) -> None:
        self.task = task
        self.profile = profile
        self.trial = trial
        self.nonce = nonce
        self.done_text = ""  # what the agent's closings named as done (`done: ...`)
        self.reminded = False  # repeated a dropped request once
        self.declined = False
        #: the wants of its instructions that name a write of the task (said at the agent's closing, in order)
        self.wants = [
            w
            for w in _sentences(task.scenario.task_instructions)
            if not _conditional(w)
            and any(
                st.write and st.actor != "user" and names_action(w, st.name, st.arguments) for st in task.plan
            )
        ]
        self.turns = 0
        self.texts: list[str] = []
        self.last: tuple[str, str] | None = None  # (request key, reply) of the latest turn
        self.last_tool: tuple[str, dict[str, Any]] | None = None  # the same for a turn of its own tools
        self.tool_calls = 0
        self.raw = ""  # the agent's latest text as written
        self.asked_details = False  # asked once for the details of a confirmation that listed none
        self.corrections = 0  # confirmations it corrected (a value it knows listed wrong)

    def respond(self, messages: list[dict[str, Any]]) -> str:
        key = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()
        if self.last is not None and self.last[0] == key:
            return self.last[
                1
            ]  # a retry of the same request (the conversation grows every turn): same answer
        agent_text = message_text(messages[-1]) if messages else ""
        self.raw = agent_text  # as written (ids keep their case); `_reply` reads it lower-cased
        text = self._reply(agent_text.lower())
        self.turns += 1
        self.texts.append(text)
        self.last = (key, text)
        return text

    def message(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> dict[str, Any]:
        """The user's next message (OpenAI assistant shape, roles flipped): a tool call of its own when it has
        `tools` and the agent asked for one, else text (`respond`)."""
        if tools and messages and self.turns > 0:
            key = hashlib.sha256(
                json.dumps([messages, "tools"], sort_keys=True, default=str).encode()
            ).hexdigest()
            if self.last_tool is not None and self.last_tool[0] == key:
                return self.last_tool[1]  # a retry of the same request: the same answer
            reply = self._tool_turn(messages, tools)
            if reply is not None:
                self.last_tool = (key, reply)
                if reply.get("content"):
                    self.texts.append(reply["content"])
                return reply
        return {"role": "assistant", "content": self.respond(messages)}

    def _tool_turn(self, messages: list[dict[str, Any]], tools: list[Any]) -> dict[str, Any] | None:
        last = messages[-1]
        if last.get("role") == "tool":  # the result of its own call: say what the phone shows
            return {"role": "assistant", "content": report(message_text(last))}
        said = message_text(last).lower()
        if (
            ("transfer" in said and ("human" in said or "representative" in said))
            or "anything else" in said
            or any(k in said for k in _CONFIRM)
        ):
            return None
        call = requested_call(said, tools)
        if call is None:
            return None
        name, detail = call
        if isinstance(detail, str):  # ("?", parameter): the tool is clear, a required argument is not
            return {"role": "assistant", "content": missing_argument(detail)}
        self.tool_calls += 1
        return tool_call_message(f"user_call_{self.tool_calls}", name, dict(detail))

    def _confirm(self, said: str) -> str:
        """The answer to a confirmation request, as τ²'s policy has the user give it: a value the user knows
        listed wrong (an id of the same form as one of the scenario's, but not one of them) is corrected
        ("No, that is not right: it is X"); a first confirmation that lists nothing that will change (no id,
        no number) is answered with a request for the details, once, in the trials the user asks
        (`DETAIL_SHARE`, drawn from the scenario and the turn); else "Yes, please go ahead."."""
        scenario = f"{self.task.scenario.reason_for_call} {self.task.scenario.known_info}"
        known = _ids(scenario)
        listed = _ids(self.raw)
        for word in listed:
            if word.lower() in {k.lower() for k in known}:
                continue
            # what the agent calls it ("reservation_id 4OG6T3" -> reservation), as the scenario names it
            named = re.search(rf"(\w+)\s+{re.escape(word)}", self.raw)
            what = named.group(1).split("_")[0].lower() if named else ""
            right = [
                k
                for k in known
                if _same_form(k, word)
                and k.lower() not in said
                and what
                and what in scenario[max(0, scenario.find(k) - 40) : scenario.find(k)].lower()
            ]
            if right:
                self.corrections += 1
                return f"No, that is not right: it is {right[0]}, not {word}. Please use {right[0]}."
        if self._declines():
            self.declined = True
            return "No, I don't want to go ahead with that."
        if not listed and not re.search(r"\d", said) and not self.asked_details:
            self.asked_details = True
            digest = hashlib.sha256(f"{self.task.task_id}/{self.task.scenario.reason_for_call}".encode())
            if int.from_bytes(digest.digest()[:4], "big") / 2**32 < DETAIL_SHARE:
                return "Before I say yes: what exactly will you change? Please list the details."
        return "Yes, please go ahead."

    def _draw(self, *where: Any) -> float:
        p = self.profile
        seed = p.seed if p is not None else 0
        return uniform(seed, self.task.suite, self.task.task_id, self.trial, self.nonce, "user", *where)

    def _declines(self) -> bool:
        """Whether it declines this confirmation: its profile's `decline_rate`, where its instructions
        allow it (`may_decline`), at most once a trial; a draw of (profile, task, trial, nonce, turn)."""
        p = self.profile
        if p is None or p.user.decline_rate <= 0 or self.declined:
            return False
        if not may_decline(self.task.scenario.task_instructions):
            return False
        return self._draw("decline", self.turns) < p.user.decline_rate

    def _dropped(self) -> str | None:
        """A write the user asked for (its words name it) that no closing named as done (the action, as the
        agent's `done: ...` words it); None if none."""
        said = " ".join(self.texts)
        for step in self.task.plan:
            if not step.write or step.actor == "user":
                continue
            action = step.name.replace("_", " ")
            if names_action(said, step.name, step.arguments) and action not in self.done_text:
                return action
        return None

    def _closing(self) -> str:
        """The answer to the agent's closing (rule 4 of the module docstring)."""
        for found in _DONE.findall(self.raw):
            self.done_text += f" {found}."
        if self.wants:
            return f"Also: {first_person(self.wants.pop(0))}"
        p = self.profile
        if p is not None and p.user.leaves and not self.declined and (action := self._dropped()):
            if not self.reminded and self._draw("remind", self.turns) < p.user.remind_rate:
                self.reminded = True
                return f"You have not done what I asked: I still need you to {action}. Please do it now."
            return f"You did not {action} as I asked. I will take my business elsewhere. {STOP}"
        return f"No, that's all. Thank you! {STOP}"

    def _known(self) -> str:
        return first_person(self.task.scenario.known_info) or "I don't have more details, sorry."

    def _reply(self, said: str) -> str:
        scenario = self.task.scenario
        if self.turns == 0:
            opening = first_person(scenario.reason_for_call)
            known = first_person(scenario.known_info)
            return f"Hi! {opening} {known}".strip()
        if self.turns >= MAX_TURNS:
            return f"Thank you, that's all for today. {STOP}"
        if "transfer" in said and ("human" in said or "representative" in said):
            return TRANSFER
        if "anything else" in said:
            return self._closing()
        if any(k in said for k in _CONFIRM):
            return self._confirm(said)
        if "?" in said and any(k in said for k in _DETAILS):
            return self._known()
        reason = first_person(scenario.reason_for_call).split(". ")[0].rstrip(".")
        return f"As I said: {reason}. Can you help me with that?"
