"""The projection of what an evolution can spend, and its budgets (`--ecdysis-max-cost`, `--ecdysis-max-tokens`).

After the starting run (tokens and model calls per trial measured there) `project` bounds what the configured
evolution can still spend, in model calls, tokens and USD, part by part:

- trials per round: the validation sub-run (the starting run's trials), the incumbent's re-run beside it
  when ini `ecdysis_rescore` re-scores (`evolve/paired.rescore_plan`), the adaptive rule's budget less those
  (`evolve/looks.py`; its budget is in turn cut to what `--ecdysis-max-cost` / `--ecdysis-max-tokens`
  leave, `looks.affordable_trials`) or ini `ecdysis_accept_extra_trials` K for both harnesses on every task
  (the most that can flip), and with ini `ecdysis_ablate` up to `MAX_CHANGES`
  re-validations; times the candidates a round validates (ini `ecdysis_self_evolution_cap`, ini `ecdysis_proposals`);
  each trial at the starting run's mean agent and user-simulator tokens and calls;
- diagnosis per round: 3K+1 role calls and one spec repair (K = `--ecdysis-fdcr-passes`); call i (from 0)
  reads the evidence (at most `DEFAULT_MAX_CHARS` characters plus `ROLE_PROMPT_CHARS` of role prompt, at
  `CHARS_PER_TOKEN`) and the i earlier replies, and replies at most `DEFAULT_MAX_TOKENS`;
- the editor per candidate: 2 calls (one and a repair) of the harness's characters plus a spec, replying at
  most `DEFAULT_MAX_TOKENS` (the `sim` editor calls no model; a `cmd:` editor's own calls are not counted);
- the test split: start and frozen harness (and each `--ecdysis-test-model`) at `--ecdysis-test-trials` per
  task, with the train split's task count (τ²'s train split is the larger one).

USD: each part priced with its model (`core.prices`); unknown when a model with tokens has no price.

The budgets are checked at stage boundaries (`before_stage`): before a stage (diagnosis, editor call,
validation, confirmation trials, ablation, test split) starts, the tokens and USD spent so far
(`evolve/cost.py`: every session's starting run, the rounds' files) plus the stage's estimate (the most an
earlier round's same stage spent, else the bound above) must stay within the budget; otherwise
`BudgetReached` is raised after the state is saved, and the run resumes with `--ecdysis-resume` (a higher
budget is allowed). A budget below one starting run is a usage error before any trial (`check_start`), and so
is `--ecdysis-max-cost` with a model that has no price (`check_priced`, at configure time).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import EcdysisError, UsageError
from pytest_ecdysis.core.prices import Prices, cost_usd, load_prices
from pytest_ecdysis.endpoint.role_client import DEFAULT_MAX_TOKENS
from pytest_ecdysis.evidence.build import DEFAULT_MAX_CHARS
from pytest_ecdysis.evolve.context import RoundContext

#: characters per token of JSON-heavy English text, on the low side so that token bounds are not too low.
CHARS_PER_TOKEN = 3
#: the longest role prompt (instructions, answer format) in characters.
ROLE_PROMPT_CHARS = 8_000
#: the most changes the ablation re-validates one by one (`evolve/ablation_changes.MAX_CHANGES`).
MAX_ABLATION = 8


class BudgetReached(EcdysisError):
    """The next stage could pass `--ecdysis-max-cost` / `--ecdysis-max-tokens`; the state is saved."""


def _part(
    calls: float, prompt: float, completion: float, model: str | None, prices: Prices
) -> dict[str, Any]:
    usd, _ = cost_usd(model or "unknown", {"prompt": int(prompt), "completion": int(completion)}, prices)
    return {"calls": int(calls), "tokens": int(prompt + completion), "usd": usd}


def _sum(parts: list[dict[str, Any]], times: float = 1) -> dict[str, Any]:
    usd = [p["usd"] for p in parts if p["tokens"]]
    return {
        "calls": int(sum(p["calls"] for p in parts) * times),
        "tokens": int(sum(p["tokens"] for p in parts) * times),
        "usd": None if any(u is None for u in usd) else sum(usd) * times,
    }


def per_trial(run_path: Path, summary: dict[str, Any]) -> dict[str, float]:
    """Mean agent and user-simulator prompt/completion tokens and calls (assistant / user messages) of one
    trial of the starting run (`summary.json` and `trials.jsonl`)."""
    n = max(1, int(summary.get("n_trials") or 0))
    agent, user = summary.get("tokens") or {}, summary.get("user_tokens") or {}
    calls = {"assistant": 0, "user": 0}
    try:
        with open(run_path / "trials.jsonl", encoding="utf-8") as fh:
            for line in fh:
                for m in json.loads(line).get("messages") or []:
                    if m.get("role") in calls:
                        calls[m["role"]] += 1
    except (OSError, ValueError):
        pass
    return {
        "agent_prompt": agent.get("prompt", 0) / n,
        "agent_completion": agent.get("completion", 0) / n,
        "user_prompt": user.get("prompt", 0) / n,
        "user_completion": user.get("completion", 0) / n,
        "agent_calls": calls["assistant"] / n,
        "user_calls": calls["user"] / n,
    }


def _trials(n: float, t: dict[str, float], cfg: EcdysisConfig, prices: Prices) -> dict[str, Any]:
    return _sum(
        [
            _part(n * t["agent_calls"], n * t["agent_prompt"], n * t["agent_completion"], cfg.model, prices),
            _part(
                n * t["user_calls"], n * t["user_prompt"], n * t["user_completion"], cfg.user_model, prices
            ),
        ]
    )


def diagnosis_bound(cfg: EcdysisConfig, prices: Prices) -> dict[str, Any]:
    """The most one round's diagnosis can spend: 3K+1 role calls and a repair (module docstring)."""
    calls = 3 * int(getattr(cfg, "fdcr_passes", 2)) + 2
    evidence = (DEFAULT_MAX_CHARS + ROLE_PROMPT_CHARS) / CHARS_PER_TOKEN
    prompt = calls * evidence + DEFAULT_MAX_TOKENS * calls * (calls - 1) / 2
    return _part(calls, prompt, calls * DEFAULT_MAX_TOKENS, cfg.diagnosis_model, prices)


def editor_bound(cfg: EcdysisConfig, harness_dir: Path, prices: Prices) -> dict[str, Any]:
    """The most one editor call (and its repair) can spend; nothing for the `sim` and `cmd:` editors."""
    if cfg.editor != "builtin":
        return {"calls": 0, "tokens": 0, "usd": 0.0}
    chars = sum(p.stat().st_size for p in Path(harness_dir).rglob("*.py") if "__pycache__" not in p.parts)
    prompt = 2 * (chars + ROLE_PROMPT_CHARS * 2) / CHARS_PER_TOKEN
    return _part(2, prompt, 2 * DEFAULT_MAX_TOKENS, cfg.diagnosis_model, prices)


def project(
    cfg: EcdysisConfig,
    summary: dict[str, Any],
    run_path: Path,
    harness_dir: Path,
    prices: Prices | None = None,
) -> dict[str, Any]:
    """`{"rounds", "per_round": {"diagnosis", "editor", "validation", "confirmation", "ablation", "heldout"},
    "test", "total"}`,
    each part `{"calls", "tokens", "usd"}` (`usd` None when a price is unknown): the most the evolution can
    spend after its starting run."""
    from pytest_ecdysis.evolve.paired import rescore_plan

    prices = load_prices(getattr(cfg, "rootdir", None)) if prices is None else prices
    t = per_trial(run_path, summary)
    n_train, n_tasks = int(summary.get("n_trials") or 0), int(summary.get("n_tasks") or 0)
    candidates = {
        "self-evolution": getattr(cfg, "self_evolution_cap", 5),
        "self-harness": getattr(cfg, "proposals", 3),
        "harnessfix": getattr(cfg, "proposals", 3),
    }.get(cfg.strategy, 1)
    rescore = rescore_plan(cfg, os.environ)[0]
    per_round = {
        "diagnosis": diagnosis_bound(cfg, prices),
        "editor": _sum([editor_bound(cfg, harness_dir, prices)], candidates),
        "validation": _trials(n_train * (1 + rescore) * candidates, t, cfg, prices),
        "confirmation": _trials(
            _confirmation_trials(cfg, n_train, n_tasks, rescore) * candidates, t, cfg, prices
        ),
        "ablation": _trials(MAX_ABLATION * n_train if getattr(cfg, "ablate", False) else 0, t, cfg, prices),
        # the held-out check of each train-accepted candidate: it and its incumbent on test (`evolve.heldout`)
        "heldout": _trials(
            2 * n_tasks * cfg.test_trials * candidates if getattr(cfg, "heldout", "refuse") != "off" else 0,
            t,
            cfg,
            prices,
        ),
    }
    test = _trials(2 * (1 + len(cfg.test_models)) * n_tasks * cfg.test_trials, t, cfg, prices)
    rounds = _sum(list(per_round.values()), cfg.rounds)
    return {
        "rounds": cfg.rounds,
        "per_round": per_round,
        "test": test,
        "total": _sum([rounds, test]),
        "start_run": _trials(n_train, t, cfg, prices),
        "start_trials": n_train,
        "candidates": candidates,
    }


def _confirmation_trials(cfg: EcdysisConfig, n_train: int, n_tasks: int, rescore: bool) -> int:
    """The most trials one decision adds after the validation (and the incumbent's re-run): under
    `adaptive` its budget (`evolve.looks.configured_budget`) less those two runs; else ini
    `ecdysis_accept_extra_trials` K for both harnesses on every task."""
    if getattr(cfg, "accept", None) == "adaptive":
        from pytest_ecdysis.evolve.looks import configured_budget

        return max(0, configured_budget(cfg, n_tasks) - n_train * (1 + rescore))
    return 2 * getattr(cfg, "accept_extra_trials", 0) * n_tasks


def tokens_text(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(int(n))


def usd_text(usd: float | None, cfg: EcdysisConfig) -> str:
    if usd is None:
        return "USD unknown (a model has no price: see the cost table)"
    models = (cfg.model, cfg.user_model, cfg.diagnosis_model, *cfg.test_models)
    return (
        "$0 (simulated model)"
        if usd == 0 and all(str(m).startswith("sim") for m in models)
        else f"${usd:,.4g}"
    )


def projection_line(p: dict[str, Any], cfg: EcdysisConfig) -> str:
    """One line: the most calls, tokens and USD, and what they are made of."""
    total, r = p["total"], p["per_round"]
    parts = [k for k in ("validation", "confirmation", "ablation", "heldout") if k in r]
    trials = sum(r[k]["calls"] for k in parts)
    return (
        f"projection: this evolution can spend at most {total['calls']:,} model calls, "
        f"{tokens_text(total['tokens'])} tokens, {usd_text(total['usd'], cfg)}: {p['rounds']} round(s) of "
        f"{r['diagnosis']['calls']} role calls ({tokens_text(r['diagnosis']['tokens'])}), {r['editor']['calls']} "
        f"editor calls, {trials:,} trial calls ({tokens_text(sum(r[k]['tokens'] for k in parts))}, held-out checks included); "
        f"test split {tokens_text(p['test']['tokens'])}; the starting run spent {tokens_text(p['start_run']['tokens'])}"
        + _limits(cfg)
    )


def _limits(cfg: EcdysisConfig) -> str:
    limits = ([f"--ecdysis-max-tokens {cfg.max_tokens:,}"] if cfg.max_tokens is not None else []) + (
        [f"--ecdysis-max-cost ${cfg.max_cost_usd:g}"] if cfg.max_cost_usd is not None else []
    )
    return f"; budget {', '.join(limits)}" if limits else ""


# --- the budgets at stage boundaries --------------------------------------------------------------------

#: a stage checkpoint file -> the stage it starts (None: its inner stages are checked instead).
STAGES = {
    "diagnosis.json": "diagnosis",
    "edit.json": "editor",
    "validation.json": "validation",
    "extra_trials.json": "confirmation",
    "heldout.json": "heldout",
    "ablation.json": None,
}
ROLE_KINDS = {
    "diagnosis": lambda role: role not in ("agent", "user", "editor"),
    "editor": lambda role: role == "editor",
}


def spent(ev: RoundContext) -> dict[str, Any]:
    """Tokens and USD spent so far: `evolve/cost.py`'s total plus the round in progress."""
    from pytest_ecdysis.evolve import cost

    prices = load_prices(getattr(ev.cfg, "rootdir", None))
    total = cost.evolution_cost(ev.doc, ev.dir, ev.cfg.diagnosis_model, prices)
    done = {r["round"] for r in ev.doc.get("rounds") or []}
    book = cost.CostBook(prices)
    book.add_block(total)
    for rdir in (ev.dir / "rounds").glob("*") if (ev.dir / "rounds").is_dir() else []:
        if rdir.name.isdigit() and int(rdir.name) not in done:
            book.add_block(cost.round_cost(ev.dir, int(rdir.name), ev.cfg.diagnosis_model, prices))
    block = book.block()
    return {"tokens": block["tokens"], "usd": block["usd"]}


def stage_estimate(ev: RoundContext, stage: str) -> dict[str, Any]:
    """What the next `stage` may spend: the most an earlier round's same stage spent (diagnosis, editor), else
    the projection's figure for one of it (`ev.doc["projection"]`)."""
    proj = ev.doc.get("projection") or {}
    if stage in ROLE_KINDS:
        earlier = [
            sum(
                s.get("total", 0)
                for role, s in ((r.get("cost") or {}).get("roles") or {}).items()
                if ROLE_KINDS[stage](role)
            )
            for r in ev.doc.get("rounds") or []
        ]
        earlier = [e for e in earlier if e]
        if earlier:
            base = (proj.get("per_round") or {}).get(stage) or {}
            scale = max(earlier) / base["tokens"] if base.get("tokens") else 0
            return {"tokens": max(earlier), "usd": None if base.get("usd") is None else base["usd"] * scale}
    if stage in ("test", "heldout"):  # a held-out check scores two harnesses on test, as the test stage
        return dict(proj.get("test") or {"tokens": 0, "usd": 0.0})
    if stage == "ablation":
        one = dict((proj.get("per_round") or {}).get("ablation") or {"tokens": 0, "usd": 0.0})
        return {
            "tokens": one["tokens"] / MAX_ABLATION,
            "usd": None if one.get("usd") is None else one["usd"] / MAX_ABLATION,
        }
    part = dict((proj.get("per_round") or {}).get(stage) or {"tokens": 0, "usd": 0.0})
    if stage == "editor":
        candidates = max(1, (part.get("calls") or 0) // 2)
        part = {
            "tokens": part["tokens"] / candidates,
            "usd": None if part.get("usd") is None else part["usd"] / candidates,
        }
    return part


def before_stage(ev: RoundContext, stage: str, where: str) -> None:
    """Raise `BudgetReached` when spent + the stage's estimate would pass a budget (state saved first).

    `where` names the stage in messages (`round 2 validation`)."""
    cfg = ev.cfg
    if cfg.max_tokens is None and cfg.max_cost_usd is None:
        return
    now, est = spent(ev), stage_estimate(ev, stage)
    over = []
    if cfg.max_tokens is not None and now["tokens"] + est["tokens"] > cfg.max_tokens:
        over.append(
            f"--ecdysis-max-tokens {cfg.max_tokens:,}: spent {now['tokens']:,} tokens, the {where} may "
            f"spend {int(est['tokens']):,} more"
        )
    if (
        cfg.max_cost_usd is not None
        and now["usd"] is not None
        and est.get("usd") is not None
        and now["usd"] + est["usd"] > cfg.max_cost_usd
    ):
        over.append(
            f"--ecdysis-max-cost ${cfg.max_cost_usd:g}: spent ${now['usd']:.4g}, the {where} may spend "
            f"${est['usd']:.4g} more"
        )
    if not over:
        return
    ev.doc["budget_stop"] = {
        "stage": where,
        "spent": now,
        "estimate": est,
        "max_tokens": cfg.max_tokens,
        "max_cost_usd": cfg.max_cost_usd,
    }
    ev.doc["status"] = "stopped_budget"
    ev.checkpoint()
    flag = (
        "--ecdysis-max-tokens N"
        if cfg.max_tokens is not None and any("tokens" in o.split(":")[0] for o in over)
        else "--ecdysis-max-cost USD"
    )
    message = (
        f"budget reached before the {where} ({'; '.join(over)}); the state is saved: continue with "
        f"--ecdysis-resume {ev.state.run_id} {flag} with a higher budget (the other options as before)"
    )
    ev.say(message)
    raise BudgetReached(message)


def check_priced(cfg: EcdysisConfig) -> None:
    """`--ecdysis-max-cost` needs a price for every model that spends tokens (a USD cap that cannot be counted
    would not hold).

    Raises:
        UsageError: a model (task, user simulator, diagnosis, test) has no price; names it and what to do.
    """
    if cfg.max_cost_usd is None:
        return
    from pytest_ecdysis.core.config import is_sim_model
    from pytest_ecdysis.core.prices import price_of

    prices = load_prices(getattr(cfg, "rootdir", None))
    models = dict.fromkeys((cfg.model, cfg.user_model, cfg.diagnosis_model, *cfg.test_models))
    unknown = [m for m in models if not is_sim_model(m) and price_of(m, prices) is None]
    if unknown:
        raise UsageError(
            f"--ecdysis-max-cost cannot be counted: no price for {', '.join(map(repr, unknown))} in "
            "litellm's price map; add it to .ecdysis/prices.json (0 for a local server) or use "
            "--ecdysis-max-tokens"
        )


def check_start(cfg: EcdysisConfig, n_cases: int, run_dir: Path) -> str | None:
    """Before any trial: the projection of one starting run of `n_cases` trials, from the latest earlier run in
    `run_dir` of the same model (tokens per trial); None when there is none to estimate from.

    Raises:
        UsageError: the budget is smaller than that starting run (names the projection).
    """
    if cfg.max_tokens is None and cfg.max_cost_usd is None or not run_dir.is_dir():
        return None
    for summary_path in sorted(run_dir.glob("*/summary.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            s = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if s.get("model") != cfg.model or not s.get("n_trials"):
            continue
        t = per_trial(summary_path.parent, s)
        one = _trials(n_cases, t, cfg, load_prices(getattr(cfg, "rootdir", None)))
        text = (
            f"one starting run of {n_cases} trial(s) is projected at {one['tokens']:,} tokens"
            + (f", ${one['usd']:.4g}" if one["usd"] is not None else "")
            + f" (tokens per trial of run {summary_path.parent.name})"
        )
        if cfg.max_tokens is not None and one["tokens"] > cfg.max_tokens:
            raise UsageError(
                f"--ecdysis-max-tokens {cfg.max_tokens:,} is smaller than one starting run: {text}; "
                "raise the budget (or select fewer tasks/trials)"
            )
        if cfg.max_cost_usd is not None and one["usd"] is not None and one["usd"] > cfg.max_cost_usd:
            raise UsageError(
                f"--ecdysis-max-cost ${cfg.max_cost_usd:g} is smaller than one starting run: {text}; "
                "raise the budget (or select fewer tasks/trials)"
            )
        return text
    return None
