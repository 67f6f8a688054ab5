"""What the simulated agent makes of the harness's words: rules it follows and values it is told (issue 30).

`Following` is the part of `sim.agent.trial.AgentTrial` that reads, at every request,

- the **rules** of the system and developer text (`sim/agent/instructions.py`): a rule addressing a quirk kind
  is followed at each draw site with the profile's `instruction_compliance` (`_complies`, used by
  `QuirkDraws.fires`: the quirk is recorded `cured` with `by: instruction`); a prohibition of a write the
  plan needs makes the model refuse it (`_refuses`: an `instruction_conflict` entry, origin `harness`,
  effect `gave_up`); a broad rule costs one extra turn per planned call (`_overreach`: an
  `instruction_overreach` entry, origin `harness`; a long task may run into the harness's budget);
- the **values it is told**: one rule for every value a quirk made wrong (an id habit, a value too far
  back, a blind spot, a slip, a value it never saw), in every channel — a harness message before the
  call (a system or developer message, or a user-role note the user simulator did not write) that holds
  the right value prevents the error (`_told`); a message after the call (the tool error answering it,
  or a later harness note) that holds the right value, or shows its form (`reading.informs_form`), makes
  the model resend the call corrected (`_corrected`). A tool *result* is where values come from, not a
  correction of one.

It holds no state of its own beyond `rules`, `addressed`, `wrong_at`, `overreach_*` and `refused`, set by
`AgentTrial.__init__`. This module must not import tau2.
"""

from __future__ import annotations

from typing import Any

from pytest_ecdysis.sim.agent.instructions import Rule, read_rules
from pytest_ecdysis.sim.reading import informs_form, message_text, request_corpus
from pytest_ecdysis.sim.values import _get_path, _set_path

#: Value-carrying entry kinds: a wrong value the model sent that a message holding the right one corrects.
VALUE_KINDS = frozenset({"id_case", "id_prefix", "context_loss", "blind_spot", "slip", "unseen_value"})


def harness_text(messages: list[dict[str, Any]], user_texts: set[str]) -> str:
    """What the harness itself says to the model in a request: system and developer messages, and
    user-role messages the user simulator did not write (a harness's notes and check messages)."""
    parts = []
    for m in messages:
        role = m.get("role")
        text = message_text(m)
        if role in ("system", "developer") or (role == "user" and text.strip() and text.strip() not in user_texts):
            parts.append(text)
    return "\n".join(parts)


class Following:
    """Rules and told values of one trial (a part of `AgentTrial`; module docstring)."""

    def _read_instructions(self, messages: list[dict[str, Any]]) -> None:
        system = "\n".join(message_text(m) for m in messages if m.get("role") in ("system", "developer"))
        writes = tuple(sorted({self.task.plan[i].name for i in self.task.writes}))
        self.rules = read_rules(system, self.task.policy, writes)
        self.addressed = frozenset(k for r in self.rules for k in r.kinds)

    def _rule_for(self, kind: str) -> Rule | None:
        return next((r for r in self.rules if kind in r.kinds), None)

    def _complies(self, kind: str, *where: Any) -> bool:
        """Whether a rule of the prompt addresses quirk `kind` and the model follows it at this site (with
        the profile's `instruction_compliance`; a pure function of the site and nonce, like every draw)."""
        if kind not in self.addressed:
            return False
        return self._u("comply", kind, *where) < self.profile.instruction_compliance

    def _refuses(self, index: int) -> int | None:
        """The `instruction_conflict` entry when a rule forbids the write at plan step `index` and the model
        follows it (refusing the write the policy asks for), else None. Drawn once per step."""
        if index in self.refused:
            return self.refused[index]
        step = self.task.plan[index]
        rule = next((r for r in self.rules if step.name in r.forbids), None)
        entry = None
        if rule is not None and self._u("refuse", index) < self.profile.instruction_compliance:
            entry = self._quirk("instruction_conflict", tool=step.name, rule=rule.text)
        self.refused[index] = entry
        return entry

    def _overreach(self, index: int) -> str:
        """The extra turn a broad rule costs before plan step `index` (`reread`, `confirm` or "" for none);
        the model over-applies a broad rule on a trial with the profile's compliance (drawn per trial)."""
        rule = next((r for r in self.rules if r.broad), None)
        if rule is None or index in self.overreach_done or index == 0:
            return ""
        if self.overreach_follows is None:
            self.overreach_follows = self._u("overreach", "trial") < self.profile.instruction_compliance
        if not self.overreach_follows:
            return ""
        self.overreach_done.add(index)
        if self.overreach_entry is None:
            self.overreach_entry = self._quirk("instruction_overreach", rule=rule.text, cost=rule.kind_of_cost)
        return rule.kind_of_cost

    def _told(self, gold: Any, messages: list[dict[str, Any]]) -> bool:
        """Whether a harness message of the request holds the right value literally (prevents a value quirk)."""
        value = str(gold).strip()
        return bool(value) and value in harness_text(messages, self.user_texts)

    def _corrected(self, index: int, args: dict[str, Any], text: str,
                   messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The arguments of plan step `index` corrected by `text` (a tool error answering the call, or a
        harness note after it) together with everything else the harness said in the request (system,
        developer, notes: after an error the model looks there too), curing each value entry it
        corrects; None when it corrects nothing."""
        step = self.task.plan[index]
        corpus = request_corpus(messages)
        text = f"{text}\n{harness_text(messages, self.user_texts)}"  # with what the harness said before
        fixed = None
        for (at, path), entry in sorted(self.wrong_at.items()):
            if at != index or self.quirks[entry]["cured"]:
                continue
            gold, sent = _get_path(step.arguments, path), _get_path(args, path)
            if gold != sent and informs_form(text, str(gold), str(sent), corpus):
                fixed = _set_path(fixed or args, path, gold)
                self.quirks[entry]["cured"] = True
                self.quirks[entry]["by"] = "information"
        if fixed is not None:
            self.intended[index] = fixed
        return fixed

    def _repaired(self, index: int, args: dict[str, Any], result: str) -> None:
        """A result (not an error) of a call the model sent with a wrong value that shows the right value and
        not the wrong one: the harness repaired the call before executing it; the entry is cured."""
        step = self.task.plan[index]
        for (at, path), entry in sorted(self.wrong_at.items()):
            if at != index or self.quirks[entry]["cured"]:
                continue
            gold, sent = _get_path(step.arguments, path), _get_path(args, path)
            if str(gold) in result and str(sent) not in result:
                self.quirks[entry]["cured"] = True
                self.quirks[entry]["by"] = "harness_repair"
