"""Every option and ini-only setting is declared with help that names its default, is read (option and ini
mirror alike), and a bad value is a usage error; a former option is a usage error naming its replacement.

The tables below list every `--ecdysis-*` option (`CLI_CASES`) and every ini-only setting (`INI_CASES`);
`test_every_setting_has_help_an_ini_key_and_a_case` fails when one is declared without a row here, without
help naming its default, or without an ini key (`NO_INI` says why a job flag has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_ecdysis.core.config import read_config
from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.options import GROUPS, INI_ONLY, LIMIT_KEYS, OPTIONS, removed_message

EVOLVE, GATE = ("--ecdysis-evolve",), ("--ecdysis-gate",)


@dataclass(frozen=True)
class Case:
    value: str | None  #: a good value (None: a flag without value)
    want: dict[str, Any]  #: `EcdysisConfig` fields it sets
    bad: str | list[str] | None  #: a bad value (a list: whole arguments), None: any text is taken
    message: str = ""  #: what the usage error says (fnmatch pattern for a session, else a substring)
    extra: tuple[str, ...] = ()  #: arguments the value needs (its job)
    session: bool = False  #: the bad value is refused by the session's configure, not by `read_config`


#: One row per command-line option.
CLI_CASES: dict[str, Case] = {
    "split": Case("all", {"split": "all"}, "dev", "--ecdysis-split must be one of train, test, all"),
    "tasks": Case("3, 7", {"tasks": ("3", "7")}, ",", "--ecdysis-tasks was given but names no task id"),
    "trials": Case("2", {"trials": 2}, "0", "--ecdysis-trials must be an integer >= 1, got 0"),
    "trial-offset": Case(
        "3", {"trial_offset": 3}, "-1", "--ecdysis-trial-offset must be an integer >= 0, got -1"
    ),
    "threshold": Case("0.5", {"threshold": 0.5}, "1.5", "--ecdysis-threshold must be in [0.0, 1.0], got 1.5"),
    "harness": Case(
        "direct",
        {"harness": "direct"},
        "no_such_harness",
        "*is neither a directory nor a registered harness name*",
        session=True,
    ),
    "run-dir": Case("out", {"run_dir": Path("out")}, "", "--ecdysis-run-dir was given an empty value"),
    "concurrency": Case(
        "4",
        {"concurrency": 4, "concurrency_auto": False},
        "0",
        "--ecdysis-concurrency must be 'auto' (an adaptive limit for the whole session) or an integer >= 1",
    ),
    "max-rps": Case(
        "5", {"max_rps": 5.0}, "0", "--ecdysis-max-rps must be a number > 0 (requests per second"
    ),
    "max-tpm": Case(
        "90000", {"max_tpm": 90000.0}, "-1", "--ecdysis-max-tpm must be a number > 0 (tokens per minute"
    ),
    "model": Case("sim/strong", {"model": "sim/strong"}, "gpt-x", "--ecdysis-model 'gpt-x' is not simulated"),
    "base-url": Case(
        "http://localhost:9/v1",
        {"base_url": "http://localhost:9/v1"},
        "notaurl",
        "--ecdysis-base-url (or OPENAI_BASE_URL) must be an http(s) URL",
    ),
    "user-model": Case(
        "sim/strong", {"user_model": "sim/strong"}, "gpt-x", "--ecdysis-user-model 'gpt-x' is not simulated"
    ),
    "diagnosis-model": Case(
        "sim/strong",
        {"diagnosis_model": "sim/strong"},
        "gpt-x",
        "--ecdysis-diagnosis-model 'gpt-x' is not simulated",
        EVOLVE,
    ),
    "sim-latency": Case(
        "0.5", {"sim_latency_s": 0.5}, "-1", "--ecdysis-sim-latency must be >= 0.0, got -1.0"
    ),
    "evolve": Case(
        None, {"evolve": True}, ["--ecdysis-evolve", "--ecdysis-split", "test"], "the test split is held out"
    ),
    "resume": Case(
        "r1",
        {"resume": "r1", "evolve": True},
        "nosuch",
        "*--ecdysis-resume nosuch: no such run*",
        session=True,
    ),
    "rounds": Case("2", {"rounds": 2}, "0", "--ecdysis-rounds must be an integer >= 1, got 0", EVOLVE),
    "strategy": Case(
        "self-harness", {"strategy": "self-harness"}, "magic", "--ecdysis-strategy must be one of", EVOLVE
    ),
    "fdcr-passes": Case(
        "1", {"fdcr_passes": 1}, "0", "--ecdysis-fdcr-passes must be an integer >= 1", EVOLVE
    ),
    "editor": Case(
        "builtin", {"editor": "builtin"}, "vim", "--ecdysis-editor must be 'builtin', 'sim' or 'cmd:", EVOLVE
    ),
    "evidence": Case(
        "failure-aware:5",
        {"evidence": "failure-aware:5", "evidence_limit": 5},
        "some",
        "--ecdysis-evidence must be 'all' or 'failure-aware:N'",
        EVOLVE,
    ),
    "test-trials": Case(
        "1", {"test_trials": 1}, "-1", "--ecdysis-test-trials must be an integer >= 0", EVOLVE
    ),
    "test-model": Case(
        "sim/strong",
        {"test_models": ("sim/strong",)},
        "gpt-x",
        "--ecdysis-test-model 'gpt-x' is not simulated",
        EVOLVE,
    ),
    "accept": Case(
        "strict",
        {"accept": "strict"},
        "lenient",
        "--ecdysis-accept must be one of strict, paired, sequential, adaptive",
        EVOLVE,
    ),
    "max-cost": Case(
        "2.5", {"max_cost_usd": 2.5}, "-1", "--ecdysis-max-cost must be >= 0.0, got -1.0", EVOLVE
    ),
    "max-tokens": Case(
        "1_000", {"max_tokens": 1000}, "x", "--ecdysis-max-tokens must be an integer >= 0", EVOLVE
    ),
    "limits": Case(
        "call-timeout=5,agent-cpu=10",
        {"call_timeout_s": 5.0, "agent_cpu_s": 10, "max_retries": 3},
        "foo=1",
        "--ecdysis-limits takes KEY=VALUE pairs, comma-separated, with KEY one of",
    ),
    "sandbox": Case("off", {"sandbox": "off"}, "maybe", "--ecdysis-sandbox must be one of auto, on, off"),
    "preflight": Case("off", {"preflight": "off"}, "maybe", "--ecdysis-preflight must be one of on, off"),
    "editor-writable": Case(
        "/",
        {"editor_writable": ("/",)},
        "/nonexistent-ecdysis",
        "--ecdysis-editor-writable: /nonexistent-ecdysis is not an existing directory",
        EVOLVE,
    ),
    "editor-readable": Case(
        "/",
        {"editor_readable": ("/",)},
        "/nonexistent-ecdysis",
        "--ecdysis-editor-readable: /nonexistent-ecdysis does not exist",
        EVOLVE,
    ),
    "gate": Case(None, {"gate": True}, ["--ecdysis-gate", "--ecdysis-evolve"], "are separate jobs"),
    "baseline": Case(
        "b.json", {"baseline": Path("b.json")}, "", "--ecdysis-baseline was given an empty value", GATE
    ),
    "save-baseline": Case(
        "b.json", {"save_baseline": Path("b.json")}, ".", "--ecdysis-save-baseline . is a directory"
    ),
    "gate-rule": Case(
        "strict",
        {"gate_rule": "strict"},
        "lenient",
        "--ecdysis-gate-rule must be one of noninferiority, strict, paired, got 'lenient'",
        GATE,
    ),
    "gate-margin": Case(
        "0.1", {"gate_margin": 0.1}, "1", "--ecdysis-gate-margin must be a rate share in [0, 1)", GATE
    ),
    "gate-pass-undecided": Case(
        None,
        {"gate_pass_undecided": True},
        ["--ecdysis-gate", "-o", "ecdysis_gate_pass_undecided=maybe"],
        "ini option ecdysis_gate_pass_undecided must be true or false, got 'maybe'",
        GATE,
    ),
    "gate-tolerance": Case(
        "0.1", {"gate_tolerance": 0.1}, "nan", "--ecdysis-gate-tolerance must be in [0.0, 1.0], got nan", GATE
    ),
    "gate-max-regressions": Case(
        "2",
        {"gate_max_regressions": 2},
        "-1",
        "--ecdysis-gate-max-regressions must be an integer >= 0, got -1",
        GATE,
    ),
}

#: Options without an ini mirror, and why.
NO_INI = {
    "evolve": "a job: an ini key would make every pytest run an evolution",
    "gate": "a job: an ini key would gate every pytest run",
    "resume": "one interrupted run's id, never a project setting",
    "save-baseline": "a job writing a file, chosen per session",
    "limits": "each of its keys is an ini key of its own (ecdysis_call_timeout, ...)",
}

#: One row per ini-only setting (the value given as `-o ecdysis_<name>=VALUE`).
INI_CASES: dict[str, Case] = {
    "progress": Case("5", {"progress_s": 5.0}, "-1", "ini key ecdysis_progress must be >= 0.0, got -1.0"),
    "html": Case("page.html", {"html": Path("page.html")}, ".", "ini key ecdysis_html: . is a directory"),
    "text-tool-calls": Case(
        "parse",
        {"text_tool_calls": "parse"},
        "guess",
        "ini key ecdysis_text_tool_calls must be one of reject, parse, got 'guess'",
    ),
    "sim-nonce": Case("ci", {"sim_nonce": "ci"}, " ", "ini key ecdysis_sim_nonce must be a non-blank text"),
    "self-evolution-cap": Case(
        "2",
        {"self_evolution_cap": 2},
        "0",
        "ini key ecdysis_self_evolution_cap must be an integer >= 1, got 0",
    ),
    "proposals": Case(
        "1", {"proposals": 1}, "three", "ini key ecdysis_proposals must be an integer >= 1, got 'three'"
    ),
    "editor-context": Case(
        "8000",
        {"editor_context_tokens": 8000},
        "8k",
        "ini key ecdysis_editor_context must be an integer >= 0, got '8k'",
    ),
    "response-cache": Case(
        "on", {"response_cache": "on"}, "maybe", "ini key ecdysis_response_cache must be one of on, off"
    ),
    "cache-dir": Case("c", {"cache_dir": Path("c")}, None),  # its writability: tests/test_response_cache.py
    "uncacheable": Case("m1, m2", {"uncacheable": ("m1", "m2")}, None),
    "ablate": Case(
        "true", {"ablate": True}, "maybe", "ini option ecdysis_ablate must be true or false", EVOLVE
    ),
    "heldout": Case(
        "off", {"heldout": "off"}, "warn", "ini key ecdysis_heldout must be one of refuse, off", EVOLVE
    ),
    "rescore": Case(
        "never", {"rescore": "never"}, "sometimes", "ini key ecdysis_rescore must be one of auto"
    ),
    "accept-level": Case(
        "0.01",
        {"accept_level": 0.01},
        "1",
        "ini key ecdysis_accept_level must be a number strictly between 0 and 1",
    ),
    "accept-method": Case(
        "wilcoxon",
        {"accept_method": "wilcoxon"},
        "t-test",
        "ini key ecdysis_accept_method must be one of sign, wilcoxon, bootstrap",
    ),
    "accept-budget": Case(
        "400",
        {"accept_budget": 400},
        "1",
        "ini key ecdysis_accept_budget must be 0 (the default budget) or at least 2",
    ),
    "accept-extra-trials": Case(
        "2",
        {"accept_extra_trials": 2},
        "-1",
        "ini key ecdysis_accept_extra_trials must be an integer >= 0",
        ("--ecdysis-evolve", "--ecdysis-accept", "sequential"),
    ),
    "gate-max-cost-rise": Case(
        "0.1", {"gate_max_cost_rise": 0.1}, "-0.1", "ini key ecdysis_gate_max_cost_rise must be >= 0.0"
    ),
    "call-timeout": Case(
        "5",
        {"call_timeout_s": 5.0},
        "0",
        "--ecdysis-limits call-timeout must be a number of seconds > 0, got '0'",
    ),
    "max-retries": Case(
        "0", {"max_retries": 0}, "-1", "--ecdysis-limits max-retries must be an integer >= 0"
    ),
    "trial-budget": Case(
        "30", {"trial_budget_s": 30.0}, "0", "--ecdysis-limits trial-budget must be a number"
    ),
    "diagnosis-budget": Case(
        "60",
        {"diagnosis_budget_s": 60.0},
        "soon",
        "--ecdysis-limits diagnosis-budget must be a number of seconds > 0",
    ),
    "editor-budget": Case(
        "60", {"editor_budget_s": 60.0}, "0", "--ecdysis-limits editor-budget must be a number"
    ),
    "agent-memory": Case(
        "512",
        {"agent_memory_mb": 512},
        "-1",
        "--ecdysis-limits agent-memory must be an integer >= 0, got '-1'",
    ),
    "agent-cpu": Case("0", {"agent_cpu_s": 0}, "x", "--ecdysis-limits agent-cpu must be an integer >= 0"),
}


def _cli(name: str, value: str | None) -> list[str]:
    return [f"--ecdysis-{name}"] if value is None else [f"--ecdysis-{name}={value}"]


def _read(pytester: pytest.Pytester, *args: str):
    return read_config(pytester.parseconfig(*args))


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that is not simulated needs a key or a base URL: neither, so 'gpt-x' is a bad value."""
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ECDYSIS_MODEL",
        "ECDYSIS_EDITOR_WRITABLE",
        "ECDYSIS_CALL_TIMEOUT_S",
        "ECDYSIS_MAX_RETRIES",
        "ECDYSIS_TRIAL_BUDGET_S",
    ):
        monkeypatch.delenv(name, raising=False)


def test_every_setting_has_help_an_ini_key_and_a_case(pytester: pytest.Pytester) -> None:
    """Each option is in a help group, names its default, has an ini mirror (or a reason in NO_INI) and a
    row in CLI_CASES; each ini-only setting names its default and has a row in INI_CASES."""
    assert {o.name for o in OPTIONS} == set(CLI_CASES), (
        "an option without a row in CLI_CASES (or a stale row)"
    )
    assert {o.name for o in INI_ONLY} == set(INI_CASES), "an ini-only setting without a row in INI_CASES"
    assert set(NO_INI) == {o.name for o in OPTIONS if not o.ini}
    assert set(LIMIT_KEYS) <= set(INI_CASES)
    config = pytester.parseconfig()
    for opt in (*OPTIONS, *INI_ONLY):
        assert opt.group in GROUPS, opt.name
        assert "(default: " in opt.help, f"--ecdysis-{opt.name}: its help names no default"
        if opt.ini:
            config.getini(opt.dest)  # registered: an unknown key raises ValueError
    assert not {o.name for o in OPTIONS} & {o.name for o in INI_ONLY}


def test_help_groups_the_options_by_job_and_hides_the_removed_ones(pytester: pytest.Pytester) -> None:
    """`pytest --help` shows one titled group per job; the former options are not listed."""
    result = pytester.runpytest("--help")
    text = result.stdout.str()
    for title in GROUPS.values():
        assert f"{title}:" in text
    for opt in OPTIONS:
        assert f"--ecdysis-{opt.name}" in text
    for opt in INI_ONLY:
        assert f"--ecdysis-{opt.name}=" not in text and f"--ecdysis-{opt.name} " not in text
        assert opt.dest in text  # the ini key is listed
    run_at = text.index(GROUPS["run"])
    assert run_at < text.index("--ecdysis-trials=") < text.index(GROUPS["endpoint"])


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_an_option_and_its_ini_mirror_are_read(pytester: pytest.Pytester, name: str) -> None:
    """The option's value reaches `EcdysisConfig`; so does the same value as `-o ecdysis_<name>=VALUE`."""
    case = CLI_CASES[name]
    cfg = _read(pytester, *case.extra, *_cli(name, case.value))
    assert {k: getattr(cfg, k) for k in case.want} == case.want
    if name in NO_INI:
        return
    key = "ecdysis_" + name.replace("-", "_")
    cfg = _read(pytester, *case.extra, "-o", f"{key}={'true' if case.value is None else case.value}")
    assert {k: getattr(cfg, k) for k in case.want} == case.want


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_a_bad_option_value_is_a_usage_error(pytester: pytest.Pytester, name: str) -> None:
    """A bad value stops the session at configure time (exit 4) with a message naming the option."""
    case = CLI_CASES[name]
    args = case.bad if isinstance(case.bad, list) else [*case.extra, *_cli(name, case.bad)]
    if case.session:
        pytester.makepyfile("def test_x(): pass")
        result = pytester.runpytest(*args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([case.message])
        return
    with pytest.raises(UsageError) as err:
        _read(pytester, *args)
    assert case.message in str(err.value)


@pytest.mark.parametrize("name", sorted(INI_CASES))
def test_an_ini_only_setting_is_read_and_checked(pytester: pytest.Pytester, name: str) -> None:
    """`-o ecdysis_<name>=VALUE` (as the ini file) reaches `EcdysisConfig`; a bad value is a usage error
    naming the ini key (a `--ecdysis-limits` key: the option)."""
    case = INI_CASES[name]
    key = "ecdysis_" + name.replace("-", "_")
    cfg = _read(pytester, *case.extra, "-o", f"{key}={case.value}")
    assert {k: getattr(cfg, k) for k in case.want} == case.want
    if case.bad is None:
        return
    with pytest.raises(UsageError) as err:
        _read(pytester, *case.extra, "-o", f"{key}={case.bad}")
    assert case.message in str(err.value)


@pytest.mark.parametrize("name", sorted(INI_CASES))
def test_a_removed_option_is_a_usage_error_naming_its_replacement(
    pytester: pytest.Pytester, name: str
) -> None:
    """`--ecdysis-<former option>` stops the session with exit 4 and says what sets it now."""
    opt = next(o for o in INI_ONLY if o.name == name)
    value = None if opt.action == "store_true" else (INI_CASES[name].value or "1")
    with pytest.raises(UsageError) as err:
        _read(pytester, *_cli(name, value))
    assert str(err.value) == removed_message(opt)
    assert f"--ecdysis-{name} was removed: " in str(err.value)
    assert (f"--ecdysis-limits {name}=" if name in LIMIT_KEYS else f"ini key {opt.dest}") in str(err.value)


def test_removed_option_in_a_session_exits_4(pytester: pytest.Pytester) -> None:
    """The way a user meets it: the session's usage error, exit status 4, with the replacement."""
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("--ecdysis-sim-nonce", "ci")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--ecdysis-sim-nonce was removed: set the ini key ecdysis_sim_nonce*ECDYSIS_SIM_NONCE*"]
    )


def test_limit_keys_come_from_the_option_then_the_ini_key_then_env(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--ecdysis-limits` keys win over the keys' ini keys, which win over the env fallback; repeated
    `--ecdysis-limits` options add up (a later key wins); keys not given keep their defaults."""
    monkeypatch.setenv("ECDYSIS_CALL_TIMEOUT_S", "9")
    monkeypatch.setenv("ECDYSIS_MAX_RETRIES", "7")
    cfg = _read(
        pytester,
        "-o",
        "ecdysis_call_timeout=8",
        "-o",
        "ecdysis_max_retries=6",
        "--ecdysis-limits",
        "call-timeout=5",
        "--ecdysis-limits",
        "agent-memory=100,call-timeout=4",
    )
    assert (cfg.call_timeout_s, cfg.max_retries, cfg.agent_memory_mb, cfg.agent_cpu_s) == (4.0, 6, 100, 900)
    assert _read(pytester).max_retries == 7


def test_ini_file_holds_the_settings(pytester: pytest.Pytester) -> None:
    """The ini file (not only `-o`) sets options and ini-only settings; the test-model key takes several."""
    pytester.makeini(
        "[pytest]\necdysis_trials = 3\necdysis_accept_level = 0.02\necdysis_agent_cpu = 60\n"
        "ecdysis_test_model = sim, sim/strong\n"
    )
    cfg = _read(pytester, "--ecdysis-evolve")
    assert (cfg.trials, cfg.accept_level, cfg.agent_cpu_s) == (3, 0.02, 60)
    assert cfg.test_models == ("sim", "sim/strong")


def test_sub_runs_get_what_the_controller_had() -> None:
    """A validation sub-run keeps the session's `-o` ini overrides and `--ecdysis-limits` (ini-only settings
    reach it as they reached the controller), never writes the HTML page, and drops the job options."""
    from pytest_ecdysis.validate.setup import subrun_args

    args = [
        "suite",
        "-o",
        "ecdysis_sim_nonce=ci",
        "--ecdysis-limits",
        "call-timeout=5",
        "-o",
        "ecdysis_html=page.html",
        "--ecdysis-evolve",
        "--ecdysis-rounds",
        "2",
    ]
    out = subrun_args(args, harness_dir=Path("/c/h"), run_dir=Path("/r"))
    assert out[:7] == [
        "suite",
        "-o",
        "ecdysis_sim_nonce=ci",
        "--ecdysis-limits",
        "call-timeout=5",
        "-o",
        "ecdysis_html=page.html",
    ]
    assert (
        out[-2:] == ["-o", "ecdysis_html="]
        and "--ecdysis-evolve" not in out
        and "--ecdysis-rounds" not in out
    )


def test_the_options_table_lists_every_option_and_ini_key() -> None:
    """docs/options.md names every option, every ini-only key and every removed option."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "options.md").read_text()
    for opt in OPTIONS:
        assert f"`--ecdysis-{opt.name}" in text, opt.name
    for opt in INI_ONLY:
        assert f"`{opt.dest}`" in text and f"`--ecdysis-{opt.name}`" in text, opt.name


@pytest.mark.parametrize(
    ("args", "runs", "each"),
    [
        (["-n", "2"], 2, "0"),  # two sub-runs of one process each, not two controllers with two workers
        (["-n2"], 2, "0"),
        (["--numprocesses=8"], 2, "4"),
        (["--numprocesses", "8", "-n", "6"], 3, "2"),  # the last one given counts, as for pytest
        (["-n", "2"], 1, None),  # a sub-run alone keeps the session's workers
        (["-n", "auto"], 2, None),
        (["-n", "0"], 2, None),
        (["pytest_ecdysis_tau2/test_airline.py"], 2, None),
    ],
)
def test_sub_runs_started_together_share_the_sessions_workers(
    args: list[str], runs: int, each: str | None
) -> None:
    from pytest_ecdysis.validate.setup import subrun_args, workers_each

    assert workers_each(args, runs) == each
    if each is not None:  # the override replaces every form of the option in the sub-run's arguments
        out = subrun_args(
            args, harness_dir=Path("h"), run_dir=Path("r"), overrides={"-n": each, "--numprocesses": None}
        )
        assert out[-2:] == ["-n", each] and not any(a.startswith("--numprocesses") for a in out)
