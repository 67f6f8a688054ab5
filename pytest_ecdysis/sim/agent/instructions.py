"""The rules a harness's prompt gives the simulated model: a parser of imperative sentences.

The model reads the system and developer text of a request as a real model does: the sentences that are
not the domain policy's own (the policy is what the model acts by: its gold plan) and that are
*imperatives addressed to it* are rules. A rule *addresses* a quirk kind when it names the behaviour
the quirk is (a `Frame`: groups of word stems, each group needing one word of the sentence); the model
then follows it with the profile's `instruction_compliance` per draw site (`sim/agent/draws.py`),
never with certainty. Two costs a real model shows:

- a **broad** rule (a universal `always` / `every` / `each` / `any` / `all` without the situation the
  behaviour belongs to, e.g. "always look the record up again before every call") is over-applied: one
  extra turn per planned call (a re-read or a confirmation question), so a long task may run into the
  harness's budget;
- a **prohibition contradicting the policy** (`never` / `do not` / `avoid` + the verb and object of a
  write tool the plan needs, e.g. "never cancel reservations") makes the model refuse that write.

A declarative sentence ("the harness checks ids", "ids are normalised") is no rule: a prompt that only
claims what the harness does gains nothing. The frames describe behaviours in general English, not
sentences this repository writes; `tests/test_sim_instructions.py` tries paraphrases. Pure functions,
cached per text; no I/O. This module must not import tau2, a suite or a harness.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

#: Sentence ends, line breaks and bullet markers split a prompt into sentences.
_SPLIT = re.compile(r"(?<=[.!?;])\s+|\n+")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\(?[a-z]\))\s+")
_WORDS = re.compile(r"[a-z][a-z0-9'#\-]*|#")
#: Openers that make a sentence a directive to the reader.
_DIRECTIVE = re.compile(
    r"^(always|never|do not|don't|dont|please|make sure|ensure|be sure|remember( to)?|avoid|only|"
    r"you (must|should|need to|have to|shall|may not|must not|should not|cannot|can't)|must|should|"
    r"refrain from|stop|keep|try to|take care to)\b"
)
#: Conditional openers whose clause (up to the first comma) states when the rule applies.
_CONDITION = re.compile(
    r"^(before|after|when|whenever|if|once|until|while|unless|as soon as|each time|every time|"
    r"in case|on)\b[^,]*,\s*"
)
#: Words after which a sentence describes rather than directs (within its first four words).
_DECLARATIVE = re.compile(
    r"\b(is|are|was|were|will|has|have|had|does|can|may|gets|get|handles|checks|"
    r"normalises|normalizes|provides|sends|adds)\b"
)
_NOT_VERBS = frozenset(
    "the a an this that these those it its we our i my you your they their there here "
    "he she his her each every all some any no ids id tools tool harness system note".split()
)
_PROHIBIT = re.compile(
    r"\b(never|do not|don't|dont|must not|should not|may not|cannot|can't|avoid|refrain from|"
    r"under no circumstances|not allowed to)\b"
)
#: A universal over the model's every move: the shape of a rule a model over-applies at each turn.
_PER_CALL = re.compile(
    r"\b(always|every|each|any|all)\b[^.]*\b(call|tool|step|action|message|reply|turn|request)s?\b"
)


@dataclass(frozen=True)
class Frame:
    """A behaviour in words: every group (a tuple of stems) must match a word of the sentence (a word
    matches a stem it starts with; a stem with a space matches as a phrase)."""

    groups: tuple[tuple[str, ...], ...]
    negated: bool = False  # the behaviour is something *not* to do: the sentence must prohibit or limit


_VALUES = ("id", "identifier", "value", "number", "code", "detail", "information", "info", "data", "figure")
_EXACT = ("exact", "verbatim", "character", "as shown", "as given", "as written", "copy", "format", "spell")
#: quirk kind -> frames (any one matching suffices). Model-origin kinds (blind_spot, slip) have none:
#: a general rule does not cure a reasoning failure on a particular task.
FRAMES: dict[str, tuple[Frame, ...]] = {
    "early_end": (
        Frame(
            (
                (
                    "end",
                    "close",
                    "finish",
                    "conclude",
                    "wrap",
                    "stop",
                    "terminat",
                    "goodbye",
                    "sign off",
                    "hang up",
                ),
                (
                    "all",
                    "every",
                    "each",
                    "remaining",
                    "pending",
                    "outstanding",
                    "until",
                    "rest",
                    "done",
                    "complet",
                    "fulfil",
                    "handled",
                    "other",
                    "multiple",
                    "whole",
                ),
            )
        ),
        Frame(
            (
                (
                    "complete",
                    "finish",
                    "handle",
                    "fulfil",
                    "carry",
                    "perform",
                    "address",
                    "resolve",
                    "process",
                ),
                ("all", "every", "each", "remaining", "whole", "part", "multiple"),
                ("request", "task", "action", "change", "item", "part", "thing", "step", "ask"),
            )
        ),
    ),
    "forget_communicate": (
        Frame(
            (
                (
                    "state",
                    "tell",
                    "give",
                    "includ",
                    "mention",
                    "report",
                    "share",
                    "say",
                    "communicat",
                    "provide",
                    "inform",
                    "quote",
                    "list",
                ),
                (
                    "figure",
                    "amount",
                    "total",
                    "price",
                    "cost",
                    "refund",
                    "balance",
                    "sum",
                    "fee",
                    "charge",
                    "how much",
                    "compensation",
                ),
            )
        ),
    ),
    "repeat_after_error": (
        Frame(
            (
                ("repeat", "retry", "resend", "again", "same", "identical", "loop", "re-send", "re-try"),
                ("error", "fail", "reject", "unsuccess", "not found", "invalid"),
            )
        ),
        Frame(
            (
                ("error", "fail", "reject"),
                ("read", "fix", "correct", "change", "adjust", "different", "learn", "understand", "follow"),
            )
        ),
    ),
    "id_case": (Frame((_VALUES[:5], (*_EXACT, "case", "uppercase", "lowercase", "capital"))),),
    "id_prefix": (Frame((_VALUES[:5], (*_EXACT, "prefix", "#", "includ", "keep", "hash"))),),
    "context_loss": (
        Frame(
            (
                (
                    "invent",
                    "guess",
                    "make up",
                    "fabricat",
                    "assum",
                    "recall",
                    "memory",
                    "remember",
                    "re-read",
                    "reread",
                    "look",
                    "check",
                    "verify",
                    "copy",
                    "use only",
                    "only use",
                    "refer",
                ),
                _VALUES,
                (
                    "result",
                    "record",
                    "lookup",
                    "look",
                    "earlier",
                    "previous",
                    "tool",
                    "source",
                    "user",
                    "conversation",
                    "history",
                    "above",
                ),
            )
        ),
    ),
    "malformed_args": (
        Frame(
            (
                ("json", "argument", "parameter"),
                ("valid", "json", "syntax", "well-formed", "parse", "object", "quote"),
            )
        ),
    ),
    "verbose_rereads": (
        Frame(
            (
                (
                    "again",
                    "re-read",
                    "reread",
                    "twice",
                    "redundant",
                    "already",
                    "duplicate",
                    "unnecessar",
                    "repeat",
                    "once",
                ),
                ("look", "read", "fetch", "lookup", "query", "retriev"),
            ),
            negated=True,
        ),
    ),
}


@dataclass(frozen=True)
class Rule:
    """One imperative sentence of a prompt: `kinds` the quirk kinds it addresses, `broad` whether it is
    over-applied (universal without the behaviour's situation), `forbids` the write tools it prohibits
    that the plan needs (a contradiction of the policy)."""

    text: str
    kinds: frozenset[str]
    broad: bool = False
    forbids: tuple[str, ...] = ()
    kind_of_cost: str = ""  # `reread` or `confirm` for a broad rule: the extra turn it costs


def sentences(text: str) -> list[str]:
    """The prompt's sentences (split at sentence ends and line breaks; bullet markers removed)."""
    out = []
    for part in _SPLIT.split(text):
        part = _BULLET.sub("", part).strip()
        if len(part) >= 8 and not part.endswith(":"):
            out.append(part)
    return out


def _norm(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def is_directive(sentence: str) -> bool:
    """Whether a sentence is an imperative addressed to the reader (not a description of anything).

    `Always state the refund amount.` and `Before ending, check every request is done.` are;
    `The harness checks ids for you.` and `You are a customer service agent.` are not.
    """
    raw = re.sub(r"\([^)]*\)", "", sentence.lower()).strip()  # an aside in brackets is no clause
    low = _norm(_CONDITION.sub("", raw, count=1))
    low = re.sub(r"^(and|then|also|so|but)\s+", "", low)
    if _DIRECTIVE.match(low):
        return True
    words = low.split()
    if not words or words[0] in _NOT_VERBS or words[0].endswith(("ed", "ing")):
        return False
    if words[0].endswith("s") and not words[0].endswith(("ss", "us")):
        return False  # third person ("checks", "normalises") or a plural noun
    return not _DECLARATIVE.search(" ".join(words[1:4]))


def _has(words: str, stems: tuple[str, ...]) -> bool:
    """Whether a normalised sentence has a word starting with one of `stems` (a word's `-` parts count as
    words; a stem with a space matches as a phrase)."""
    return _group(stems).search(words) is not None


@functools.lru_cache(maxsize=256)
def _group(stems: tuple[str, ...]) -> re.Pattern[str]:
    """One compiled pattern per group of stems (compiled once per process)."""
    return re.compile(
        r"(?:^|[ \-])(?:" + "|".join(re.escape(s) for s in sorted(stems, key=len, reverse=True)) + ")"
    )


def addressed(sentence: str) -> frozenset[str]:
    """The quirk kinds whose behaviour a (directive) sentence names: every group of one of its frames."""
    words = _norm(sentence)
    return frozenset(
        kind
        for kind, frames in FRAMES.items()
        if any(
            all(_has(words, g) for g in f.groups)
            and (not f.negated or _PROHIBIT.search(words) or " only " in f" {words} ")
            for f in frames
        )
    )


def _tool_words(tool: str) -> tuple[str, str]:
    """(verb stem, object stem) of a tool name such as `cancel_reservation` or `exchange_delivered_order_items`."""
    parts = tool.lower().split("_")
    verb = parts[0][:5]
    obj = parts[-1].rstrip("s")[:5] if len(parts) > 1 else ""
    return verb, obj


#: Words of a prohibition of every write: "never call a tool that changes a reservation", "do not
#: modify the database", "make no updates to any order".
_WRITE_VERBS = ("chang", "modif", "updat", "alter", "mutat")
_ANY_OBJECT = ("tool", "anything", "database", "record", "data", "state", "action", "call")


def _forbids_writes(norm: str, tool: str) -> bool:
    """Whether a prohibition (`norm`, normalised) forbids write tool `tool` by forbidding changes in
    general: a write verb and either the tool's object ("a reservation") or any object ("a tool")."""
    if not _has(norm, _WRITE_VERBS):
        return False
    obj = _tool_words(tool)[1]
    return (bool(obj) and re.search(rf"\b{re.escape(obj)}", norm) is not None) or _has(norm, _ANY_OBJECT)


@functools.lru_cache(maxsize=64)
def read_rules(system_text: str, policy: str, write_tools: tuple[str, ...]) -> tuple[Rule, ...]:
    """The rules of a request's system/developer text that are not the policy's own sentences.

    `write_tools`: the write tools the task's plan needs (a prohibition of one contradicts the policy).
    Deterministic; cached per (text, policy, tools), so a harness's fixed prompt is parsed once.
    """
    policy_sentences = {_norm(x) for x in sentences(policy)}
    rules = []
    for sentence in sentences(system_text):
        norm = _norm(sentence)
        if not norm or norm in policy_sentences or not is_directive(sentence):
            continue
        kinds = addressed(sentence)
        forbids: tuple[str, ...] = ()
        if _PROHIBIT.search(norm):
            forbids = tuple(
                t
                for t in write_tools
                if all(w and re.search(rf"\b{re.escape(w)}", norm) for w in _tool_words(t))
                or _forbids_writes(norm, t)
            )
        broad, cost = False, ""
        if not _PROHIBIT.search(norm) and _PER_CALL.search(norm):
            if _has(norm, ("look", "re-read", "reread", "check", "verify", "fetch", "read", "review")):
                broad, cost = True, "reread"
            elif _has(norm, ("confirm", "permission", "approv", "ask")):
                broad, cost = True, "confirm"
        if kinds or forbids or broad:
            rules.append(
                Rule(text=sentence[:200], kinds=kinds, broad=broad, forbids=forbids, kind_of_cost=cost)
            )
    return tuple(rules)
