"""The GitHub Action's inputs, read from the environment `action.yml` gives its main step, and checked.

`action.yml` passes every input as `INPUT_<NAME>` (upper case, dashes as underscores: `base-url` ->
`INPUT_BASE_URL`), as GitHub does for JavaScript actions; a composite action has to spell them out.
`ActionInputs.from_env` reads them into one frozen object or raises `ActionInputError` whose message is the
one line the step prints (`::error::`): what is wrong and which input to set. Nothing runs before the
inputs are checked, so a bad input costs no trial.

This module does no I/O beyond `Path.is_file` on the baseline; it must not run anything.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_ecdysis.core.config_values import GATE_RULES
from pytest_ecdysis.core.errors import ActionInputError

MODES = ("gate", "evolve", "baseline")
#: The `sandbox:` input's values (`--ecdysis-sandbox`'s).
SANDBOX_MODES = ("on", "auto", "off")
#: `--ecdysis-sandbox` by mode when `sandbox:` is empty: evolve runs harness and editor code from a
#: model's edits, so there the sandbox is required (a runner where it cannot start fails the step); None =
#: the plugin's default (`auto`).
SANDBOX_DEFAULT = {"evolve": "on"}
RULES = ("adaptive", "sequential", "paired", "strict")
#: what a workflow passes for a pull request's token when it has none: an unset secret is an empty string.
TOKEN_HINT = (
    "set `token:` to a token that may push and open pull requests, e.g. "
    "`token: ${{ secrets.ECDYSIS_PR_TOKEN || github.token }}` with `permissions: contents: write, "
    "pull-requests: write`"
)


@dataclass(frozen=True)
class ActionInputs:
    """The action's inputs, checked. Strings are as given (stripped); empty means "not set"."""

    mode: str  #: gate | evolve | baseline
    paths: tuple[str, ...]  #: test paths (whitespace-separated in the input); () = pytest's `testpaths`
    model: str  #: the task model; "" = the simulated model (said with a notice)
    base_url: str  #: OpenAI-compatible endpoint of a model that is not `sim`
    api_key: bool  #: whether an API key was given (the key itself stays in the environment)
    baseline: str  #: the baseline file the gate reads and `baseline` mode writes
    shards: int  #: shards of the suite (pytest-split); 1 = unsharded
    shard: int | None  #: this job's shard, 1..shards (shards > 1 only)
    merge: str  #: glob of shard run directories to merge and gate (gate mode, final job of a sharded gate)
    accept: str  #: the acceptance rule (`--ecdysis-accept`); "" = the plugin's default
    budget_usd: float | None  #: evolve: the most USD its model calls may spend (`--ecdysis-max-cost`)
    rounds: int | None  #: evolve: at most R rounds
    strategy: str  #: evolve: `--ecdysis-strategy`; "" = the plugin's default
    trials: int  #: trials per task
    workers: int  #: pytest-xdist workers (`-n`); 0 = no xdist
    harness: str  #: `--ecdysis-harness`; "" = the plugin's default
    run_dir: str  #: where runs are written
    args: tuple[str, ...]  #: more pytest arguments, split like a shell does
    token: bool  #: whether a token for the pull request was given (evolve)
    #: `--ecdysis-sandbox`: "" = `on` in evolve mode (`SANDBOX_DEFAULT`), the plugin's default otherwise
    sandbox: str = ""
    gate_rule: str = ""  #: gate: `--ecdysis-gate-rule` (`ecdysis gate --rule`); "" = the plugin's default
    gate_margin: float | None = None  #: gate: `--ecdysis-gate-margin`; None = the plugin's default (0.05)
    gate_pass_undecided: bool = False  #: gate: `--ecdysis-gate-pass-undecided`

    @property
    def sharded(self) -> bool:
        """True for one shard's job of a sharded gate (no verdict: the merge job gates)."""
        return self.shards > 1

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ActionInputs:
        """Read `INPUT_*` variables.

        Raises:
            ActionInputError: an unknown mode, a gate without its baseline file, evolve without a token, a
                number that is not one, a shard outside 1..shards, an unknown rule, `accept` in gate mode, a
                gate margin outside [0, 1); the message names the input to set.
        """

        def get(name: str, default: str = "") -> str:
            return (env.get("INPUT_" + name.upper().replace("-", "_")) or default).strip()

        mode = get("mode")
        if mode not in MODES:
            raise ActionInputError(
                f"mode {mode!r} is not one of {', '.join(MODES)}: set `mode:` to one of them"
            )
        shards = _int(get("shards", "1"), "shards", 1)
        shard = _int(get("shard"), "shard", 1) if get("shard") else None
        if shards > 1 and (shard is None or shard > shards):
            raise ActionInputError(
                f"shards is {shards} but shard is {get('shard') or 'not set'}: set `shard:` to "
                f"this job's group, 1..{shards} (e.g. `shard: ${{{{ matrix.group }}}}`)"
            )
        if shards > 1 and mode != "gate":
            raise ActionInputError(
                f"shards is {shards} in {mode} mode: sharding is for `mode: gate`; "
                "set `shards: 1` or `mode: gate`"
            )
        baseline = get("baseline", ".ecdysis/baseline.json")
        if mode == "gate" and shards == 1 and not Path(baseline).is_file():
            raise ActionInputError(
                f"no baseline file {baseline!r} for the gate: set `baseline:` to your "
                "committed baseline, or make one with `mode: baseline` and commit it"
            )
        token = bool(get("token"))
        if mode == "evolve" and not token:
            raise ActionInputError(f"no token for the pull request in evolve mode: {TOKEN_HINT}")
        accept = get("accept")
        _one_of("accept", accept, RULES, "a rule")
        if accept and mode == "gate":
            raise ActionInputError(
                f"accept is the evolution's acceptance rule, the gate does not read it: set `gate-rule:` to one "
                f"of {', '.join(GATE_RULES)} (empty: noninferiority) and leave `accept:` empty in gate mode"
            )
        gate_rule = get("gate-rule")
        _one_of("gate-rule", gate_rule, GATE_RULES, "a gate rule")
        margin = get("gate-margin")
        gate_margin = _margin(margin) if margin else None
        undecided = get("gate-pass-undecided", "false").lower()
        if undecided not in ("true", "false"):
            raise ActionInputError(
                f"gate-pass-undecided {undecided!r} is not true or false: set `gate-pass-undecided:` to one"
            )
        sandbox = get("sandbox")
        _one_of("sandbox", sandbox, SANDBOX_MODES, "a mode")
        budget = get("budget")
        try:
            args = tuple(shlex.split(get("args")))
        except ValueError as exc:
            raise ActionInputError(
                f"args cannot be split like a shell line ({exc}): fix the quoting of `args:`"
            ) from None
        return cls(
            mode=mode,
            paths=tuple(get("paths").split()),
            model=get("model"),
            base_url=get("base-url"),
            api_key=bool(get("api-key")),
            baseline=baseline,
            shards=shards,
            shard=shard if shards > 1 else None,
            merge=get("merge"),
            accept=accept,
            budget_usd=_float(budget, "budget") if budget else None,
            rounds=_int(get("rounds"), "rounds", 1) if get("rounds") else None,
            strategy=get("strategy"),
            trials=_int(get("trials", "1"), "trials", 1),
            workers=_int(get("workers", "2"), "workers", 0),
            harness=get("harness"),
            run_dir=get("run-dir", ".ecdysis/runs"),
            args=args,
            token=token,
            sandbox=sandbox,
            gate_rule=gate_rule,
            gate_margin=gate_margin,
            gate_pass_undecided=undecided == "true",
        )


def _int(value: str, name: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low:
        raise ActionInputError(f"{name} {value!r} is not a whole number >= {low}: set `{name}:` to one")
    return number


def _float(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number > 0:
        raise ActionInputError(
            f"{name} {value!r} is not an amount of USD > 0: set `{name}:` to one, or leave "
            "it empty for no limit"
        )
    return number


def _one_of(name: str, value: str, choices: Sequence[str], noun: str) -> None:
    """Nothing when input `name` is empty or one of `choices`; else `ActionInputError` naming them."""
    if value and value not in choices:
        raise ActionInputError(
            f"{name} {value!r} is not {noun}: set `{name}:` to one of {', '.join(choices)}"
        )


def _margin(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 <= number < 1:
        raise ActionInputError(
            f"gate-margin {value!r} is not a rate share in [0, 1): set `gate-margin:` to one, e.g. 0.05 for "
            "5 points, or leave it empty for the plugin's default (0.05)"
        )
    return number
