"""The simulated diagnosis roles' analysis (`sim/roles/answers.py`): from the findings of each group's records
(`sim/roles/evidence.py`) to proposals, one per knob, and the groups left alone, checked against the
history of earlier rounds; the solved tasks a change would run on; the spec.

The mapping of findings to knobs is the table in `sim/roles/answers.py`'s docstring (docs/internals.md, "Spec
parameters").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ecdysis.core.records import SCHEMA_VERSION
from pytest_ecdysis.sim.roles.evidence import (
    KNOBS,
    MAX_MODEL_CALLS_CAP,
    READ_TOOL_RE,
    VALUE_KNOBS,
    Evidence,
    _round_up,
)


class World(Evidence):
    """The evidence of one prompt and what the roles conclude from it."""

    # the analysis ----------------------------------------------------------------------------------

    def analyse(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Proposals (SpecChange-shaped dicts, one per knob) and left-alone groups, from the evidence."""
        changes: dict[str, dict[str, Any]] = {}
        left: list[dict[str, Any]] = []
        unexplained: list[tuple[str, list[dict[str, Any]], set[str]]] = []

        def add(knob: str, sig: str, quote: str, **params: Any) -> None:
            key = knob if knob != "policy_rule" else f"policy_rule:{params.get('text')}"
            ch = changes.get(key)
            if ch is None:
                ch = changes[key] = {"knob": knob, "addresses": [], "quotes": [], "params": {}}
            if sig not in ch["addresses"]:
                ch["addresses"].append(sig)
            if quote and len(ch["quotes"]) < 2 and quote not in ch["quotes"]:
                ch["quotes"].append(quote)
            for k, v in params.items():
                if k == "value":
                    ch["params"]["value"] = max(v, ch["params"].get("value", 0))
                elif k == "rules":
                    ch["params"]["rules"] = sorted(set(ch["params"].get("rules", [])) | set(v))
                else:
                    ch["params"][k] = v

        for g in self.groups:
            sig = g.get("signature", "")
            examples = [r for r in g.get("examples", []) if isinstance(r, dict)]
            if not examples:
                left.append({"signature": sig, "reason": "no example records in the evidence: not diagnosed"})
                continue
            found = [f for rec in examples for f in self.findings(rec)]
            kinds = {f["kind"] for f in found}
            before = {k: len(c["addresses"]) for k, c in changes.items()}
            for f in found:
                if f["kind"] == "id_error" and not f["named"]:
                    add("error_feedback", sig, f["quote"])
                if f["kind"] == "id_error" and f["rules"]:
                    add("id_normalisation", sig, f["quote"], rules=f["rules"])
                if f["kind"] == "truncated":
                    add("max_tool_result_chars", sig, f["quote"], value=_round_up(f["raw"] * 1.25, 500))
                if f["kind"] == "budget" and f.get("n"):
                    add("max_model_calls", sig, f["quote"], value=min(2 * f["n"], MAX_MODEL_CALLS_CAP))
                if f["kind"] == "repeat" and not f["flagged"]:
                    add("repeat_guard", sig, f["quote"])
                if f["kind"] == "trimmed":
                    current = self.setting("keep_last_messages")
                    add("keep_last_messages", sig, f["quote"], value=2 * current if current else 80)
            if any(len(c["addresses"]) != before.get(k, 0) for k, c in changes.items()):
                continue
            unexplained.append((sig, found, kinds))

        # Work left undone with no mechanism in sight: a pattern when it shows on >= 2 tasks, even across
        # groups the signatures split (e.g. `db` vs `db+communicate`); a wrong value in a write stays with
        # its group (model-like), as does an early end seen on one task only.
        early = {
            f["task"]
            for _, found, _ in unexplained
            for f in found
            if f["kind"] == "incomplete" and not f.get("near_miss")
        }
        # values the environment accepted in a write that differ from what the user stated (or an earlier
        # call sent) by one or two characters: on >= 2 tasks a pattern a harness can check before the call
        slipped = {
            f["task"]
            for _, found, _ in unexplained
            for f in found
            if f["kind"] == "incomplete" and f.get("near_miss")
        }
        for sig, found, kinds in unexplained:
            incomplete = [f for f in found if f["kind"] == "incomplete"]
            ended_early = [f for f in incomplete if not f.get("near_miss")]
            near_misses = [f["near_miss"] for f in incomplete if f.get("near_miss")]
            if near_misses and len(slipped) >= 2:
                n = near_misses[0]
                add(
                    "value_check",
                    sig,
                    f"{n['tool']}({n['arg']}={n['wrong']!r}) accepted by the environment; "
                    f"the conversation showed {n['right']!r}",
                )
            elif ended_early and (len(early) >= 2 or self.single_failure):
                # a single-failure prompt (self-evolution) cannot compare tasks: like a real model, it
                # answers work left undone with a completion check
                add("completion_check", sig, ended_early[0]["quote"])
            elif incomplete:
                near = next((f["near_miss"] for f in incomplete if f.get("near_miss")), None)
                if near and sig in self.single_task:
                    text = (
                        f"When calling {near['tool']}, use {near['arg']} {near['right']} exactly as stated "
                        f"earlier in the conversation (not {near['wrong']})."
                    )
                    add(
                        "policy_rule",
                        sig,
                        f"{near['tool']}({near['arg']}={near['wrong']!r}); earlier: {near['right']!r}",
                        text=text,
                    )
                elif near:
                    left.append(
                        {
                            "signature": sig,
                            "reason": "a wrong value in a write on one task only, a near miss "
                            "of a value seen earlier, with no common harness mechanism: a model slip",
                        }
                    )
                else:
                    left.append(
                        {
                            "signature": sig,
                            "reason": "single task, ended with the work incomplete and no "
                            "harness mechanism visible (no tool error, truncation or budget): looks like a "
                            "model blind spot, not a harness defect",
                        }
                    )
            elif "json_handled" in kinds:
                left.append(
                    {
                        "signature": sig,
                        "reason": "the harness already answers invalid JSON arguments with "
                        "a tool error; nothing to change",
                    }
                )
            elif "endpoint" in kinds:
                left.append(
                    {
                        "signature": sig,
                        "reason": "endpoint format errors: the endpoint's replies were "
                        "unusable; not a harness policy defect (no knob addresses it)",
                    }
                )
            elif kinds & {"id_error", "repeat"}:
                left.append(
                    {
                        "signature": sig,
                        "reason": "the harness already names the argument and expected "
                        "form / flags repeats; the remaining errors are the model's",
                    }
                )
            else:
                left.append({"signature": sig, "reason": "no harness-level cause visible in the evidence"})

        proposals = [self._change(c) for _, c in sorted(changes.items())]
        proposals, dropped = self._against_history(proposals)
        for p in list(proposals):  # never propose what the harness map shows the harness already does
            where = self.already_does(p["parameters"]["knob"])
            if where:
                proposals.remove(p)
                dropped.append(
                    (
                        p,
                        f"the harness already does this ({where}: {p['parameters']['knob']}); the "
                        "failures are not explained by its absence",
                    )
                )
        for change, reason in dropped:
            for sig in change["addresses"]:
                left.append({"signature": sig, "reason": reason})
        return proposals, _dedupe_left(left, proposals)

    def _change(self, c: dict[str, Any]) -> dict[str, Any]:
        knob = c["knob"]
        params = {"knob": knob, **c["params"]}
        quote = " | ".join(q[:160] for q in c["quotes"])
        text = KNOB_TEXT[knob]
        value = params.get("value")
        desc = text["description"].format(
            value=value,
            rules=", ".join(params.get("rules", [])),
            text=params.get("text", ""),
            current=self.setting(knob),
        )
        return {
            "component": KNOBS[knob][0],
            "files": [self.file_for(knob)],
            "description": desc,
            "trigger": text["trigger"],
            "addresses": sorted(c["addresses"]),
            "expected_effect": text["effect"] + (f" Evidence: {quote}" if quote else ""),
            "risks": list(text["risks"]),
            "guards": list(text["guards"]),
            "parameters": params,
        }

    def _against_history(self, proposals: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
        kept, dropped = [], []
        for p in proposals:
            params = p["parameters"]
            verdict = None
            for h in self.history:
                for old in h.get("changes") or []:
                    old_params = old.get("parameters") or {}
                    if old_params.get("knob") != params["knob"]:
                        continue
                    if h.get("accepted") and params["knob"] not in VALUE_KNOBS:
                        verdict = (
                            f"{params['knob']} was applied in round {h.get('round')} (accepted); the "
                            "remaining failures are not explained by its absence"
                        )
                    elif (
                        not h.get("accepted") and h.get("outcome") != "inconclusive" and old_params == params
                    ):
                        verdict = (
                            f"{params['knob']} with the same parameters was tried in round {h.get('round')} "
                            f"and rejected (score change {h.get('score_change')}); not proposed unchanged"
                        )
            if verdict:
                dropped.append((p, verdict))
            else:
                kept.append(p)
        return kept, dropped

    def rejected_before(self, change: Mapping[str, Any]) -> dict[str, Any] | None:
        params = change.get("parameters") or {}
        for h in self.history:
            if (
                h.get("accepted") or h.get("outcome") == "inconclusive"
            ):  # not tried and rejected: may be retried
                continue
            for old in h.get("changes") or []:
                if params and (old.get("parameters") or {}) == params:
                    return h
        return None

    def touched(self, knob: str | None, addresses: list[str]) -> list[str]:
        """Solved tasks a change would run on: all of them when only ids are known; with the tools each
        solved task used, those with a write (completion_check) or a tool of the addressed groups."""
        if self.solved_tools is None or knob == "policy_rule":
            return self.solved
        if knob == "completion_check":
            return sorted(
                t for t, tools in self.solved_tools.items() if any(not READ_TOOL_RE.match(x) for x in tools)
            )
        tools = {x for s in addresses for x in self.group_tools.get(s, set())}
        return sorted(t for t, used in self.solved_tools.items() if used & tools)

    def watch(self, proposals: list[dict[str, Any]]) -> list[str]:
        tasks: set[str] = set()
        for p in proposals:
            tasks.update(p.get("watch_tasks", []))
        return sorted(tasks)

    def spec(
        self, proposals: list[dict[str, Any]], left: list[dict[str, Any]], watch: list[str]
    ) -> dict[str, Any]:
        changes = [{k: v for k, v in p.items() if k != "watch_tasks"} for p in proposals]
        knobs = ", ".join(c["parameters"].get("knob", c["component"]) for c in changes) or "nothing"
        addressed = {s for c in changes for s in c["addresses"]}
        tasks = {t for s in addressed for t in self.group_tasks.get(s, [])}
        summary = (
            f"Change {knobs}, addressing {len(addressed)} pattern group(s) over {len(tasks)} task(s); "
            f"leave {len(left)} group(s) alone."
            if changes
            else f"No harness change: {len(left)} group(s) left alone."
        )
        return {
            "schema_version": SCHEMA_VERSION,
            "summary": summary,
            "changes": changes,
            "left_alone": left,
            "watch_tasks": watch,
        }


def _dedupe_left(left: list[dict[str, Any]], proposals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    addressed = {s for p in proposals for s in p.get("addresses", [])}
    out, seen = [], set()
    for item in left:
        if item["signature"] in addressed or item["signature"] in seen:
            continue
        seen.add(item["signature"])
        out.append(item)
    return out


KNOB_TEXT: dict[str, dict[str, Any]] = {
    "error_feedback": {
        "description": "Tool errors name the offending argument and the expected form of its value "
        "(e.g. 'order_id: not found; expected an id like #W1234567') instead of the bare error.",
        "trigger": "a tool call returns an error that concerns one of its arguments",
        "effect": "the model can correct a wrong id format on its next call instead of giving up.",
        "risks": ["longer error messages"],
        "guards": ["successful tool results are passed through unchanged"],
    },
    "id_normalisation": {
        "description": "Normalise id arguments before the call with the rules {rules}.",
        "trigger": "an id argument whose value does not have the expected form",
        "effect": "calls with a mis-formatted id reach the right object instead of 'not found'.",
        "risks": ["rewriting a value that was right"],
        "guards": ["only values not already in the expected form are rewritten"],
    },
    "max_tool_result_chars": {
        "description": "Raise MAX_TOOL_RESULT_CHARS from {current} to {value} so tool results the model needs "
        "later are not truncated.",
        "trigger": "a tool result longer than the current limit",
        "effect": "values first seen in a long tool result stay available at later writes.",
        "risks": ["more context tokens per call"],
        "guards": ["results stay bounded (a limit remains)"],
    },
    "max_model_calls": {
        "description": "Raise MAX_MODEL_CALLS from {current} to {value} model calls per trial.",
        "trigger": "a trial that reaches the step budget before its requests are done",
        "effect": "long tasks finish instead of ending at the budget.",
        "risks": ["longer, costlier trials when the model loops"],
        "guards": ["the budget stays finite"],
    },
    "keep_last_messages": {
        "description": "Keep the last {value} messages (was {current}) when trimming the context.",
        "trigger": "conversations longer than the kept window",
        "effect": "values from early tool results remain in the context at later writes.",
        "risks": ["more context tokens per call"],
        "guards": ["calls and their results are never split"],
    },
    "completion_check": {
        "description": "Before accepting the end of the conversation, ask the model once to check that every "
        "request of the user was carried out and every figure asked for was stated.",
        "trigger": "the agent is about to end the conversation",
        "effect": "compound requests are completed and requested figures are communicated.",
        "risks": ["an extra model call at the end of every conversation"],
        "guards": ["at most one check per conversation"],
    },
    "repeat_guard": {
        "description": "When the model repeats an identical call that just failed, answer with a distinct error "
        "saying it is a repeat and what to change.",
        "trigger": "an identical tool call (name and arguments) right after it failed",
        "effect": "the model stops looping on a failing call.",
        "risks": ["flagging a legitimate retry after a transient error"],
        "guards": ["only identical name and arguments after an error"],
    },
    "value_check": {
        "description": "Before a call that changes a record is executed, check each argument against the values "
        "the conversation showed (the user's words, earlier calls' arguments): a value it never "
        "showed, one or two characters off the one value it did, is replaced by that value.",
        "trigger": "a call that changes a record carries a value the conversation never showed",
        "effect": "writes the environment would accept with a mistyped value carry the value the user stated.",
        "risks": ["rewriting a value that was right but new (e.g. a flight found by a search)"],
        "guards": ["only values never shown, with exactly one shown value one or two characters away"],
    },
    "policy_rule": {
        "description": "Add the rule to the system prompt: {text}",
        "trigger": "always (system prompt)",
        "effect": "the model uses the value the user stated.",
        "risks": ["a rule naming one conversation's value applies to every task"],
        "guards": [],
    },
}
