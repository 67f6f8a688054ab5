"""Options are checked at configure time: a bad value is one usage error that names the fix."""

from __future__ import annotations

import pytest

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.harness import harness_id, resolve_harness

BAD_OPTIONS = [
    (["--ecdysis-split", "dev"], "--ecdysis-split must be one of train, test, all"),
    (["--ecdysis-threshold", "1.5"], "--ecdysis-threshold must be in ?0.0, 1.0?"),
    (["--ecdysis-threshold", "x"], "--ecdysis-threshold must be a number"),
    (["--ecdysis-threshold", "nan"], "--ecdysis-threshold must be in ?0.0, 1.0?, got nan"),
    (["--ecdysis-gate-tolerance", "nan"], "--ecdysis-gate-tolerance must be in ?0.0, 1.0?, got nan"),
    (["--ecdysis-trials", "0"], "--ecdysis-trials must be an integer >= 1"),
    (["--ecdysis-test-trials", "-1"], "--ecdysis-test-trials must be an integer >= 0"),
    (["--ecdysis-evidence", "some"], "--ecdysis-evidence must be 'all' or 'failure-aware:N'"),
    (["--ecdysis-evidence", "failure-aware:x"], "--ecdysis-evidence failure-aware:N needs N an integer >= 1"),
    (["--ecdysis-evidence", "failure-aware:0"], "--ecdysis-evidence failure-aware:N needs N an integer >= 1"),
    (["--ecdysis-editor", "vim"], "--ecdysis-editor must be 'builtin', 'sim' or 'cmd:"),
    (["--ecdysis-strategy", "magic"], "--ecdysis-strategy must be one of"),
    (["--ecdysis-harness", "no_such_harness"], "is neither a directory nor a registered harness name"),
    (["--ecdysis-evolve", "--ecdysis-split", "test"], "the test split is held out"),
    (["-o", "ecdysis_html=."], "ini key ecdysis_html: . is a directory; pass the page's file name"),
    (["-o", "ecdysis_self_evolution_cap=0"], "ini key ecdysis_self_evolution_cap must be an integer >= 1"),
    (["-o", "ecdysis_proposals=0"], "ini key ecdysis_proposals must be an integer >= 1, got 0"),
    (["-o", "ecdysis_proposals=three"], "ini key ecdysis_proposals must be an integer >= 1, got 'three'"),
    (["-o", "ecdysis_sim_nonce= "], "ini key ecdysis_sim_nonce must be a non-blank text"),
    (
        ["--ecdysis-limits", "trial-budget=0"],
        "--ecdysis-limits trial-budget must be a number of seconds > 0, got '0'",
    ),
    (
        ["--ecdysis-limits=call-timeout=-1"],
        "--ecdysis-limits call-timeout must be a number of seconds > 0, got '-1'",
    ),
    (
        ["--ecdysis-limits", "max-retries=-1"],
        "--ecdysis-limits max-retries must be an integer >= 0, got '-1'",
    ),
    (
        ["--ecdysis-limits", "diagnosis-budget=soon"],
        "--ecdysis-limits diagnosis-budget must be a number of seconds > 0",
    ),
    (["-o", "ecdysis_editor_budget=0"], "--ecdysis-limits editor-budget must be a number of seconds > 0"),
    (
        ["--ecdysis-limits", "retries=3"],
        "--ecdysis-limits takes KEY=VALUE pairs, comma-separated, with KEY one of",
    ),
    (["-o", "ecdysis_editor_context=-5"], "ini key ecdysis_editor_context must be an integer >= 0, got -5"),
    (
        ["--ecdysis-editor-writable", "/nonexistent-ecdysis"],
        "--ecdysis-editor-writable: /nonexistent-ecdysis is not an existing directory; create it first",
    ),
    (
        ["-o", "ecdysis_text_tool_calls=guess"],
        "ini key ecdysis_text_tool_calls must be one of reject, parse, got 'guess'",
    ),
    (["-o", "ecdysis_rescore=sometimes"], "ini key ecdysis_rescore must be one of auto, always, never"),
    (["--ecdysis-accept", "lenient"], "--ecdysis-accept must be one of strict, paired, sequential"),
    (
        ["-o", "ecdysis_accept_method=t-test"],
        "ini key ecdysis_accept_method must be one of sign, wilcoxon, bootstrap",
    ),
    (
        ["-o", "ecdysis_accept_level=0"],
        "ini key ecdysis_accept_level must be a number strictly between 0 and 1*got 0.0",
    ),
    (
        ["-o", "ecdysis_accept_level=1"],
        "ini key ecdysis_accept_level must be a number strictly between 0 and 1*got 1.0",
    ),
    # one message stating the open interval (it said "in [0.0, 1.0]", and then refused 1.0)
    (
        ["-o", "ecdysis_accept_level=1.5"],
        "ini key ecdysis_accept_level must be a number strictly between 0 and 1*got 1.5",
    ),
    (
        ["-o", "ecdysis_accept_level=five"],
        "ini key ecdysis_accept_level must be a number strictly between 0 and 1*'five'",
    ),
    (
        ["--ecdysis-accept-level", "0.01"],
        "--ecdysis-accept-level was removed: set the ini key ecdysis_accept_level",
    ),
    (
        ["--ecdysis-agent-memory", "8"],
        "--ecdysis-agent-memory was removed: pass --ecdysis-limits agent-memory=VALUE",
    ),
    (["--ecdysis-model="], "--ecdysis-model was given an empty value"),
    (["--ecdysis-run-dir="], "--ecdysis-run-dir was given an empty value"),
    (["--ecdysis-harness="], "--ecdysis-harness was given an empty value"),
    (["--ecdysis-test-model="], "--ecdysis-test-model was given an empty value"),
    (["--ecdysis-base-url", "notaurl"], "--ecdysis-base-url (or OPENAI_BASE_URL) must be an http(s) URL"),
]


@pytest.mark.parametrize("args, message", BAD_OPTIONS)
def test_bad_option_is_a_usage_error(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    """Each bad value stops the session at configure time with exit 4 and a message naming the fix."""
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_real_model_without_endpoint_is_a_usage_error(pytester: pytest.Pytester, monkeypatch) -> None:
    """A model that is not sim... with neither a base URL nor OPENAI_API_KEY is refused."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("--ecdysis-model", "gpt-4o-mini")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--ecdysis-model 'gpt-4o-mini' is not simulated*--ecdysis-base-url*OPENAI_API_KEY*"]
    )
    result = pytester.runpytest_subprocess("--ecdysis-test-model", "gpt-4o")  # the hint names the option used
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--ecdysis-test-model 'gpt-4o' is not simulated*or use --ecdysis-test-model sim*"]
    )


@pytest.mark.parametrize(
    "ini, message",
    [
        ("ecdysis_trials = 0", "--ecdysis-trials must be an integer >= 1, got 0"),
        (
            "ecdysis_concurrency = -1",
            "--ecdysis-concurrency must be 'auto' (an adaptive limit for the whole session) or an integer >= 1 (trials in flight per worker), got '-1'",
        ),
        ("ecdysis_editor_context = 8k", "ini key ecdysis_editor_context must be an integer >= 0, got '8k'"),
    ],
)
def test_ini_mirror_is_read(pytester: pytest.Pytester, ini: str, message: str) -> None:
    """An ini key ecdysis_<name> sets the option; a bad ini value is also a usage error."""
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_harness_id_changes_with_content(tmp_path) -> None:
    """The harness id is name@12 hex over paths and bytes: same files same id, one byte more a new id."""
    h = tmp_path / "my_harness"
    h.mkdir()
    (h / "__init__.py").write_text("def build_agent(**kw): ...\n")
    first = harness_id(h)
    assert first.startswith("my_harness@") and len(first.split("@")[1]) == 12
    (h / "__pycache__").mkdir()
    (h / "__pycache__" / "x.pyc").write_bytes(b"cache")
    assert harness_id(h) == first
    (h / "__init__.py").write_text("def build_agent(**kw): ...\n# edit\n")
    assert harness_id(h) != first


def test_harness_directory_without_package_is_refused(tmp_path) -> None:
    """A directory that is not a Python package cannot provide an agent."""
    (tmp_path / "h").mkdir()
    with pytest.raises(UsageError, match="no __init__.py"):
        resolve_harness(str(tmp_path / "h"), tmp_path)


def test_a_harness_without_build_agent_is_refused_on_every_load(tmp_path) -> None:
    """load_harness caches imported harnesses; the missing-agent check must hold for the cached module too."""
    from pytest_ecdysis.core.harness import load_harness

    h = tmp_path / "noagent"
    h.mkdir()
    (h / "__init__.py").write_text("x = 1\n")
    for _ in range(2):
        with pytest.raises(UsageError, match="does not provide an agent"):
            load_harness(h)


def test_time_limits_come_from_option_then_ini_then_env_then_default() -> None:
    """Each limit: the `--ecdysis-limits` key (or its ini key) wins over the env fallback, which wins over the default;
    a bad env value is the same usage error, naming the variable."""
    from pytest_ecdysis.core.config_values import read_limits

    env = {"ECDYSIS_CALL_TIMEOUT_S": "7", "ECDYSIS_MAX_RETRIES": "0", "ECDYSIS_EDITOR_TIMEOUT": "42"}
    limits = read_limits({"call-timeout": "5", "trial-budget": "30"}, env)
    assert limits == {
        "call_timeout_s": 5.0,
        "max_retries": 0,
        "trial_budget_s": 30.0,
        "diagnosis_budget_s": 1800.0,
        "editor_budget_s": 42.0,
    }
    assert read_limits({}, {})["call_timeout_s"] == 60.0 and read_limits({}, {})["max_retries"] == 3
    with pytest.raises(
        UsageError,
        match="--ecdysis-limits trial-budget must be a number of seconds > 0, got '-5' "
        r"\(from env ECDYSIS_TRIAL_BUDGET_S\)",
    ):
        read_limits({}, {"ECDYSIS_TRIAL_BUDGET_S": "-5"})


def test_bad_time_limit_in_the_environment_is_a_usage_error(pytester: pytest.Pytester, monkeypatch) -> None:
    """An env fallback is checked at configure time like the option."""
    monkeypatch.setenv("ECDYSIS_MAX_RETRIES", "many")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--ecdysis-limits max-retries must be an integer >= 0, got 'many' (from env ECDYSIS_MAX_RETRIES)*"]
    )


#: a valid value for each option that only an evolution or a gate reads (None: a flag without value).
JOB_ONLY_VALUES = {
    "diagnosis-model": "sim",
    "editor": "sim",
    "baseline": "b.json",
    "gate-max-regressions": "0",
    "gate-pass-undecided": None,
    "gate-rule": "strict",
    "test-model": "sim",
    "editor-writable": ".",
    "editor-readable": ".",
}


def _job_only_options():
    from pytest_ecdysis.core.options import OPTIONS

    return [o for o in OPTIONS if o.needs]


def test_the_job_only_list_covers_the_options_only_a_job_reads():
    """The list the next test runs over: every evolution-only and gate-only option, none of the others."""
    names = {o.name: o.needs for o in _job_only_options()}
    assert (
        names["rounds"] == ("evolve",)
        and names["test-model"] == ("evolve",)
        and names["max-cost"] == ("evolve",)
    )
    assert names["gate-tolerance"] == ("gate",) and names["accept"] == ("evolve",)
    assert not {"model", "trials", "split", "tasks", "harness", "evolve", "gate", "save-baseline"} & set(
        names
    )


@pytest.mark.parametrize("form", ["space", "equals"])
@pytest.mark.parametrize("name", [o.name for o in _job_only_options()])
def test_an_option_only_a_job_reads_needs_that_job_on_the_command_line(pytester: pytest.Pytester, name, form):
    """`--ecdysis-rounds 5` (or `=5`) without --ecdysis-evolve would be ignored: a usage error naming the
    option and the job it needs. The same key in the ini file is allowed (a project keeps its evolution
    and gate settings there) and the session runs."""
    from pytest_ecdysis.core.options import OPTIONS

    opt = next(o for o in OPTIONS if o.name == name)
    value = JOB_ONLY_VALUES.get(name, opt.default if isinstance(opt.default, str) else "1")
    flag = f"--ecdysis-{name}"
    args = [flag] if value is None else ([flag, value] if form == "space" else [f"{flag}={value}"])
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    needs = (
        "--ecdysis-evolve"
        if opt.needs == ("evolve",)
        else "--ecdysis-gate"
        if opt.needs == ("gate",)
        else "--ecdysis-evolve (or --ecdysis-resume RUN_ID) or --ecdysis-gate"
    )
    assert f"{flag} is read only by" in result.stderr.str() and f"it needs {needs}" in result.stderr.str()
    if opt.ini and form == "space":  # the ini mirror is no error
        pytester.makeini(
            f"[pytest]\necdysis_{name.replace('-', '_')} = {'true' if value is None else value}\n"
        )
        assert pytester.runpytest().ret == pytest.ExitCode.OK


def test_job_only_options_pass_with_their_job_and_are_not_given_to_sub_runs():
    """With its job the option is accepted; validation sub-runs (no job) never inherit it."""
    from types import SimpleNamespace

    from pytest_ecdysis.core.config_values import check_needs
    from pytest_ecdysis.validate.setup import strip_args

    args = [
        "--ecdysis-rounds",
        "5",
        "--ecdysis-evidence=all",
        "--ecdysis-accept=paired",
        "--ecdysis-baseline",
        "b.json",
        "--ecdysis-trials",
        "2",
    ]
    config = SimpleNamespace(invocation_params=SimpleNamespace(args=tuple(args)))
    with pytest.raises(UsageError, match="--ecdysis-baseline is read only by the gate"):
        check_needs(config, evolve=True, gate=False)
    check_needs(
        SimpleNamespace(invocation_params=SimpleNamespace(args=tuple(args[:4]))), evolve=True, gate=False
    )
    assert strip_args(args) == ["--ecdysis-trials", "2"]
