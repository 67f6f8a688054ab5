"""Model profiles of the simulated model: which quirks it has, at which rates, and its seed.

A profile is a small JSON data file, `pytest_ecdysis/sim/profiles/<name>.json`:

    {"schema_version": 1, "name": "default", "description": "...", "seed": 20260311,
     "difficulty": {"distribution": "beta", "a": 0.6, "b": 0.6},   # or {"distribution": "fixed", "value": 0.5}
     "long_task_min_steps": 7, "noise": 1.0, "recall_chars": 6000, "documented_format_factor": 0.5,
     "quirks": {"id_case": {"rate": 0.15}, ..., "blind_spot": {"task_rate": 0.15, "rate": 0.85}}}

Every draw is a pure function of `(profile seed, suite, task, trial, what, where)` through sha256, so the
same inputs give the same trajectory in any process (no `hash()`, no global random state). Under a run
nonce (fresh per run unless the run fixes it), each draw is, with probability `noise` decided per draw
site *and* nonce, a fresh draw of that nonce: any quirk may fire or not on any trial from one rerun to
the next, so reruns of one harness vary as real models' do; with the nonce fixed, runs are
byte-identical. A per-task
latent difficulty `d ~ Beta(a, b)` multiplies every rate except `blind_spot` by `2*d` (mean 1): trials
of one task are correlated, and pass^k falls the way real models' does (docs/data/tau2-failure-modes.md,
"Consistency across trials"). Extra profiles can live outside the package: `ECDYSIS_SIM_PROFILES`
names a directory searched first.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.errors import UsageError

PROFILE_DIR = Path(__file__).parent / "profiles"
ENV_PROFILE_DIR = "ECDYSIS_SIM_PROFILES"

#: Quirk kinds and their origin (docs/internals.md, "The simulated model's quirks").
QUIRK_ORIGINS: dict[str, str] = {
    "id_case": "systematic",
    "id_prefix": "systematic",
    "context_loss": "systematic",
    "verbose_rereads": "systematic",
    "early_end": "systematic",
    "forget_communicate": "systematic",
    "repeat_after_error": "systematic",
    "malformed_args": "systematic",
    "blind_spot": "model",
    "wrong_choice": "model",
    "slip": "model",
}

#: Model-origin kinds that are reasoning errors: they send a *valid but wrong* value (a real alternative
#: the model was shown, `sim/agent/alternatives.py`), so no generic check can see through them; a harness
#: gain on them is an accommodation or luck, never a systematic fix (`sim/truth/validity.py`). A `slip`
#: (one character off, a copy slip) is model-origin too, but a near-miss check can cure it.
REASONING_KINDS: frozenset[str] = frozenset({"blind_spot", "wrong_choice"})

#: Ground-truth entries that are no profile quirk: the harness itself made the trial fail (a value it
#: cut, dropped or never obtained; its own limit ended the conversation).
HARNESS_ENTRIES: dict[str, str] = {
    "unseen_value": "harness",
    "harness_limit": "harness",
    "instruction_conflict": "harness",
    "instruction_overreach": "harness",
}

#: Ground-truth entries of the model that no rate draws: a write of the task's plan that nothing in the
#: conversation asked for, which the model omits (`sim/motivation.py`; a failure of reasoning).
MODEL_ENTRIES: dict[str, str] = {"omitted_step": "model"}

#: Ground-truth entries of the simulated user: it declined a confirmation its instructions let it decline
#: (`UserProfile.decline_rate`); no harness change cures that.
USER_ENTRIES: dict[str, str] = {"user_declined": "user"}

#: Origin of every kind a ground-truth line may carry.
GROUND_TRUTH_ORIGINS: dict[str, str] = {**QUIRK_ORIGINS, **HARNESS_ENTRIES, **MODEL_ENTRIES, **USER_ENTRIES}

#: The keys a profile may have besides notes (a key ending in `note`); anything else is a usage error
#: naming it: a typo would silently do nothing.
PROFILE_KEYS = frozenset(
    {
        "schema_version",
        "name",
        "description",
        "seed",
        "difficulty",
        "long_task_min_steps",
        "noise",
        "recall_chars",
        "documented_format_factor",
        "instruction_compliance",
        "quirks",
        "user",
    }
)
#: The keys of a profile's `user` object (`UserProfile`).
USER_KEYS = frozenset({"decline_rate", "remind_rate"})


@dataclass(frozen=True)
class UserProfile:
    """How the simulated user holds the agent to its requests (`sim/user/trial.py`); a profile without a
    `user` object has `leaves` False: a user that accepts any closing and never declines.

    `decline_rate`: per confirmation whose task's instructions let the user say no (`sim.user.trial.may_decline`),
    the chance it does; `remind_rate`: when the agent closes with a request of the user's not done, the
    chance the user repeats it once instead of leaving at once. Both in [0, 1]; modelling choices (τ²'s
    LLM users decline and leave, no published rate)."""

    leaves: bool = False
    decline_rate: float = 0.0
    remind_rate: float = 0.0


@dataclass(frozen=True)
class Profile:
    """A parsed, checked profile. Rates are probabilities in [0, 1] before difficulty scaling."""

    name: str
    seed: int
    rates: dict[str, float]
    blind_spot_task_rate: float = 0.0
    difficulty_a: float = 1.0
    difficulty_b: float = 1.0
    difficulty_fixed: float | None = None  # every task has this difficulty (tests, controlled worlds)
    long_task_min_steps: int = 7
    noise: float = 0.0  # share of draws that also depend on the run nonce (run-to-run variation)
    recall_chars: int = 6000  # context_loss fires only for a value further back than this in the request
    documented_format_factor: float = 0.5  # id-habit rate multiplier when the schema shows the id's form
    #: chance the model follows a prompt rule at a site (sim/agent/instructions.py)
    instruction_compliance: float = 0.5
    user: UserProfile = UserProfile()
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def rate(self, kind: str) -> float:
        return self.rates.get(kind, 0.0)

    def difficulty(self, suite: str, task_id: str) -> float:
        """The task's latent difficulty in [0, 1] (Beta(a, b) drawn from the seed, suite and task)."""
        if self.difficulty_fixed is not None:
            return self.difficulty_fixed
        return _difficulty(self.seed, self.difficulty_a, self.difficulty_b, suite, task_id)

    def scaled(self, kind: str, suite: str, task_id: str) -> float:
        """The rate of `kind` on this task: `min(1, rate * 2 * difficulty)` (blind_spot: unscaled)."""
        base = self.rate(kind)
        if kind == "blind_spot":
            return base
        return min(1.0, base * 2.0 * self.difficulty(suite, task_id))


@functools.lru_cache(maxsize=4096)
def _difficulty(seed: int, a: float, b: float, suite: str, task_id: str) -> float:
    rng = random.Random(_digest(seed, "difficulty", suite, task_id))
    return rng.betavariate(a, b)


def _digest(*parts: Any) -> int:
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def uniform(*parts: Any) -> float:
    """A uniform number in [0, 1) that depends only on `parts` (sha256 of their string forms)."""
    return _digest(*parts) / 2.0**64


def choose(n: int, *parts: Any) -> int:
    """An index in [0, n) that depends only on `parts`."""
    return _digest("choose", *parts) % n


def _bad(source: str, what: str) -> UsageError:
    return UsageError(f"simulated-model profile {source}: {what}; see docs/simulated-model.md for the format")


def parse_profile(data: Any, source: str = "<data>") -> Profile:
    """Check and parse a profile's JSON data.

    Raises:
        UsageError: not an object, missing `name`/`seed`/`quirks`, an unknown field, an unknown quirk kind,
            or a rate that is not a number in [0, 1] (a boolean included); the message names the file and
            the field.
    """
    if not isinstance(data, dict):
        raise _bad(source, "must be a JSON object")
    unknown = sorted(k for k in set(data) - PROFILE_KEYS if not str(k).endswith("note"))  # notes: free text
    if unknown:
        raise _bad(source, f"unknown field {unknown[0]!r} (known: {', '.join(sorted(PROFILE_KEYS))})")
    for key in ("name", "seed", "quirks"):
        if key not in data:
            raise _bad(source, f"missing field {key!r}")
    if not isinstance(data["seed"], int):
        raise _bad(source, "'seed' must be an integer")
    quirks = data["quirks"]
    if not isinstance(quirks, dict):
        raise _bad(source, "'quirks' must be an object {kind: {rate: ...}}")
    rates: dict[str, float] = {}
    task_rate = 0.0
    for kind, spec in quirks.items():
        if kind not in QUIRK_ORIGINS:
            raise _bad(source, f"unknown quirk kind {kind!r} (known: {', '.join(QUIRK_ORIGINS)})")
        if not isinstance(spec, dict) or "rate" not in spec:
            raise _bad(source, f"quirk {kind!r} needs an object with a 'rate'")
        if "task_rate" in spec and kind != "blind_spot":
            raise _bad(source, f"quirk {kind!r}: 'task_rate' is a field of 'blind_spot' only")
        for key in ("rate", "task_rate"):
            if key in spec:
                value = spec[key]
                if not _share(value):
                    raise _bad(source, f"quirk {kind!r}: {key!r} must be a number in [0, 1], got {value!r}")
        rates[kind] = float(spec["rate"])
        if kind == "blind_spot":
            task_rate = float(spec.get("task_rate", 0.0))
    diff = data.get("difficulty", {"distribution": "beta", "a": 1.0, "b": 1.0})
    if not isinstance(diff, dict) or diff.get("distribution", "beta") not in ("beta", "fixed"):
        raise _bad(source, "'difficulty' must be {distribution: beta, a, b} or {distribution: fixed, value}")
    fixed = None
    if diff.get("distribution") == "fixed":
        fixed = diff.get("value")
        if not isinstance(fixed, (int, float)) or not 0.0 <= fixed <= 1.0:
            raise _bad(source, "'difficulty' value must be a number in [0, 1]")
    a, b = diff.get("a", 1.0), diff.get("b", 1.0)
    if not all(isinstance(x, (int, float)) and x > 0 for x in (a, b)):
        raise _bad(source, "'difficulty' a and b must be positive numbers")
    long_min = data.get("long_task_min_steps", 7)
    if not isinstance(long_min, int) or long_min < 1:
        raise _bad(source, "'long_task_min_steps' must be a positive integer")
    shares = {}
    for key, default in (("noise", 0.0), ("documented_format_factor", 0.5), ("instruction_compliance", 0.5)):
        value = data.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
            raise _bad(source, f"{key!r} must be a number in [0, 1], got {value!r}")
        shares[key] = float(value)
    user = _user_profile(data.get("user"), source)
    recall = data.get("recall_chars", 6000)
    if not isinstance(recall, int) or isinstance(recall, bool) or recall < 0:
        raise _bad(source, f"'recall_chars' must be an integer >= 0, got {recall!r}")
    return Profile(
        name=str(data["name"]),
        seed=data["seed"],
        rates=rates,
        blind_spot_task_rate=task_rate,
        difficulty_a=float(a),
        difficulty_b=float(b),
        difficulty_fixed=None if fixed is None else float(fixed),
        long_task_min_steps=long_min,
        noise=shares["noise"],
        recall_chars=recall,
        documented_format_factor=shares["documented_format_factor"],
        instruction_compliance=shares["instruction_compliance"],
        user=user,
        description=str(data.get("description", "")),
        raw=data,
    )


def _share(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def _user_profile(spec: Any, source: str) -> UserProfile:
    if spec is None:
        return UserProfile()
    if not isinstance(spec, dict):
        raise _bad(source, "'user' must be an object {decline_rate, remind_rate}")
    unknown = sorted(k for k in set(spec) - USER_KEYS if not str(k).endswith("note"))
    if unknown:
        raise _bad(source, f"unknown field 'user.{unknown[0]}' (known: {', '.join(sorted(USER_KEYS))})")
    rates = {}
    for key in sorted(USER_KEYS):
        value = spec.get(key, 0.0)
        if not _share(value):
            raise _bad(source, f"'user.{key}' must be a number in [0, 1], got {value!r}")
        rates[key] = float(value)
    return UserProfile(leaves=True, **rates)


def _dirs() -> list[Path]:
    extra = os.environ.get(ENV_PROFILE_DIR)
    return ([Path(extra)] if extra else []) + [PROFILE_DIR]


def known_profiles() -> list[str]:
    """Names of the profiles found (the `ECDYSIS_SIM_PROFILES` directory first, then the package's)."""
    names: set[str] = set()
    for directory in _dirs():
        if directory.is_dir():
            names.update(p.stem for p in directory.glob("*.json"))
    return sorted(names)


@functools.lru_cache(maxsize=64)
def _load(path: str, mtime: float) -> Profile:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise _bad(path, f"cannot be read as JSON ({exc})") from None
    return parse_profile(data, path)


def load_profile(name: str) -> Profile:
    """The profile called `name`.

    Raises:
        UsageError: no such profile (the message lists the known ones) or a malformed file.
    """
    for directory in _dirs():
        path = directory / f"{name}.json"
        if path.is_file():
            return _load(str(path), path.stat().st_mtime)
    raise UsageError(
        f"unknown simulated-model profile {name!r}; known profiles: {', '.join(known_profiles())} "
        f"(use model 'sim' or 'sim/<profile>')"
    )


def can_fail(profile: Profile) -> bool:
    """Whether the profile can produce a failure of its own: some quirk rate above 0 (a blind spot also
    needs its `task_rate` above 0) or a user that declines. A harness can still fail on it (a value it
    cuts, its own limits), and so can a write no conversation asked for (`omitted_step`)."""
    return profile.user.decline_rate > 0 or any(
        rate > 0 and (kind != "blind_spot" or profile.blind_spot_task_rate > 0)
        for kind, rate in profile.rates.items()
    )


def check_models(models: list[str]) -> list[str]:
    """Load the profile of every `sim/<profile>` model name (bare `sim`: the `default` profile, the server's
    default); the notes to print before any trial (one per profile that cannot produce a failure).

    Raises:
        UsageError: an unknown or malformed profile (the message lists the known ones).
    """
    notes = []
    for name in dict.fromkeys(m[4:] if m.startswith("sim/") else "default" for m in models if _is_sim(m)):
        profile = load_profile(name)
        if not can_fail(profile):
            notes.append(
                f"ecdysis: simulated-model profile {name!r} cannot produce a failure (every quirk rate is 0, "
                "and its user never declines): "
                "only the harness's own defects (values it cuts, its limits) can fail a trial"
            )
    return notes


def _is_sim(model: str) -> bool:
    return model == "sim" or model.startswith("sim/")
