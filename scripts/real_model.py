"""A real model end to end: a llama.cpp server with a small GGUF model from PyPI, then τ² trials, a gate and
one evolution round against it. Run through `scripts/real-model.sh` (which sets up `.venv` first).

    ./scripts/real-model.sh                         # SmolLM2-135M, 3 airline cases, gate, 1 round
    ./scripts/real-model.sh --model gemma3 --ctx 16384 --threads 2 --tasks 0,1
    ./scripts/real-model.sh --stages trials --repeat 3 --temperature 0.7     # run-to-run noise

Stages (`--stages`, comma-separated, in this order): `trials` (the cases, saved as a baseline), `gate`
(the same cases gated against that baseline), `noise` (the cases `--repeat` times at `--temperature`),
`evolve` (one round: FDCR roles and the built-in editor on the same real model, `--ecdysis-test-trials
0`), `editor` (the built-in editor alone on the real model, with a small valid spec, on a copy of the
example harness: the round reaches the editor only when the model's own spec validates). The user simulator is the simulated one by default (`--user-model real` puts the real model there too).

Everything goes to `.ecdysis/real-model/<session>/`: `server.log`, `replies.jsonl` (every request's summary
and the server's raw reply, recorded by a loopback proxy between pytest and the server), `runs/<run-id>/`
(the plugin's run directories) and `real-model.json` (the measured figures, `measure.py`). What was done
stays there whatever stops the script. Costs and measured numbers: docs/real-model.md.

Bad input gets one message each and exit status 2: the server package missing (with `--no-install`),
the model file missing, the port in use, the server dying at start (its log's last lines).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_server import (  # noqa: E402
    MODELS,
    ServerError,
    ensure_model,
    ensure_server,
    port_free,
    start_server,
)
from measure import measure  # noqa: E402
from record_proxy import RecordingProxy  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STAGES = ("probe", "trials", "gate", "noise", "evolve", "editor")
#: the editor stage's spec: one small, valid change (these models' own specs do not validate, so the
#: evolve stage's round seldom reaches the editor; this stage gives the built-in editor a real model anyway).
EDITOR_SPEC = {
    "summary": "Raise the model-call budget: trials end with the budget reached before the work is done.",
    "changes": [
        {
            "component": "trajectory_regulation",
            "files": ["config.py"],
            "description": "Raise MAX_MODEL_CALLS by ten.",
            "trigger": "every trial",
            "addresses": ["max_steps|budget"],
            "parameters": {"knob": "max_model_calls"},
        }
    ],
    "left_alone": [],
    "watch_tasks": [],
}
#: the probe stage's requests: small, so each shape of reply is recorded in seconds, not a whole trial.
TOOL = {
    "type": "function",
    "function": {
        "name": "get_reservation_details",
        "description": "Get the details of a reservation.",
        "parameters": {
            "type": "object",
            "properties": {"reservation_id": {"type": "string"}},
            "required": ["reservation_id"],
        },
    },
}
PROBES = [
    ("text", {"messages": [{"role": "user", "content": "Say hello in five words."}], "max_tokens": 24}),
    (
        "tool_call",
        {
            "messages": [
                {"role": "system", "content": "Use the tools to answer."},
                {"role": "user", "content": "Show me reservation JMO1MG."},
            ],
            "tools": [TOOL],
            "tool_choice": "auto",
            "max_tokens": 48,
        },
    ),
    (
        "no_tool_choice",
        {
            "messages": [
                {"role": "system", "content": "Use the tools to answer."},
                {"role": "user", "content": "Show me reservation JMO1MG."},
            ],
            "tools": [TOOL],
            "max_tokens": 48,
        },
    ),
    (
        "json_mode",
        {
            "messages": [{"role": "user", "content": "Answer with a JSON object with a key summary."}],
            "response_format": {"type": "json_object"},
            "max_tokens": 48,
        },
    ),
    ("context_overflow", {"messages": [{"role": "user", "content": "word " * 40000}], "max_tokens": 8}),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="real-model.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="smollm2",
        help="which PyPI-packaged GGUF model (default: smollm2)",
    )
    p.add_argument("--model-file", type=Path, help="any other GGUF file (then also give --chat-format)")
    p.add_argument("--chat-format", help="llama-cpp-python chat format (default: the model's, see docs)")
    p.add_argument("--ctx", type=int, default=8192, help="context size in tokens (default: 8192)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads of the server (default: 1: on a loaded machine two threads wait on each other "
        "at every step; measured in docs/real-model.md)",
    )
    p.add_argument("--port", type=int, default=8765, help="server port on 127.0.0.1 (default: 8765)")
    p.add_argument(
        "--domain",
        choices=("airline", "retail", "telecom"),
        default="airline",
        help="the τ² suite to run (default: airline; telecom: the user holds tools too)",
    )
    p.add_argument("--tasks", default="0,1,3", help="train task ids of --domain (default: 0,1,3, airline's)")
    p.add_argument("--trials", type=int, default=1, help="trials per task (default: 1)")
    p.add_argument("--stages", default="trials,gate,evolve", help="comma-separated: " + ", ".join(STAGES))
    p.add_argument("--repeat", type=int, default=3, help="repetitions of the noise stage (default: 3)")
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature the proxy sets on agent requests (default: the harness's own)",
    )
    p.add_argument(
        "--no-tool-choice-shim",
        action="store_true",
        help="do not add tool_choice 'auto' to requests with tools (llama-cpp-python then never calls "
        'tools), nor turn an assistant\'s content null into "" (llama-cpp-python: HTTP 500)',
    )
    p.add_argument(
        "--agent-max-tokens",
        type=int,
        default=512,
        help="max_tokens the proxy sets on agent requests that have none (default: 512; 0: none)",
    )
    p.add_argument(
        "--user-model",
        choices=("sim", "real"),
        default="sim",
        help="user simulator: the simulated one (default) or the same real model",
    )
    p.add_argument("--fdcr-passes", type=int, default=1, help="FDCR passes in the evolve stage (default: 1)")
    p.add_argument("--call-timeout", type=float, default=600.0, help="seconds per model call (default: 600)")
    p.add_argument("--trial-budget", type=float, default=1800.0, help="seconds per trial (default: 1800)")
    p.add_argument(
        "--no-install", action="store_true", help="never pip-install; fail if something is missing"
    )
    p.add_argument(
        "--wheel-dir",
        type=Path,
        default=Path.home() / ".cache" / "pytest-ecdysis" / "wheels",
        help="where the built llama-cpp-python wheel is kept (default: ~/.cache/pytest-ecdysis/wheels)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=REPO / ".ecdysis" / "real-model",
        help="parent of the session directory (default: .ecdysis/real-model)",
    )
    args = p.parse_args(argv)
    args.stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown:
        p.error(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    if args.model_file and not args.chat_format:
        p.error(
            "--model-file needs --chat-format (e.g. chatml-tools, chatml-function-calling, gemma, chatml)"
        )
    return args


def pytest_stage(
    name: str, session: Path, args: argparse.Namespace, url: str, alias: str, extra: list[str]
) -> dict:
    """Run one pytest stage against the proxy; returns `{stage, run_id, exit, wall_s}`."""
    run_id = f"{session.name}-{name}"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        f"pytest_ecdysis_tau2/test_{args.domain}.py",
        "-n",
        "0",
        "-p",
        "no:cacheprovider",
        "--ecdysis-model",
        alias,
        "--ecdysis-base-url",
        url,
        "--ecdysis-user-model",
        alias if args.user_model == "real" else "sim",
        "--ecdysis-tasks",
        args.tasks,
        "--ecdysis-trials",
        str(args.trials),
        "--ecdysis-run-dir",
        str(session / "runs"),
        *extra,
    ]
    env = dict(
        os.environ,
        ECDYSIS_RUN_ID=run_id,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        ECDYSIS_CALL_TIMEOUT_S=str(args.call_timeout),
        ECDYSIS_TRIAL_BUDGET_S=str(args.trial_budget),
        ECDYSIS_MAX_RETRIES="1",
    )
    env.pop("ECDYSIS_SIM_URL", None)
    print(f"\n== {name}: {' '.join(cmd[2:])}", flush=True)
    started = time.monotonic()
    with (session / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                print("   " + line.rstrip(), flush=True)
        except KeyboardInterrupt:
            proc.terminate()  # the plugin stops the run on SIGTERM and keeps its run directory
            proc.wait(timeout=120)
            raise
        code = proc.wait()
    wall = round(time.monotonic() - started, 1)
    print(f"== {name}: exit {code} in {wall:.0f} s (run directory {session / 'runs' / run_id})", flush=True)
    too_long = context_too_long(session / "runs" / run_id, args)
    if too_long:
        print(f"== {name}: {too_long}", flush=True)
    return {"stage": name, "run_id": run_id, "exit": code, "wall_s": wall, "context_too_long": too_long}


def probe(url: str, alias: str) -> dict:
    """Send `PROBES` through the proxy (header `X-Ecdysis-Role: probe-<name>`, so `replies.jsonl` says which;
    `no_tool_choice` goes without the proxy's shim); returns `{name: {status, seconds}}`."""
    out = {}
    for name, body in PROBES:
        started = time.monotonic()
        headers = {"X-Ecdysis-Role": f"probe-{name}"}
        if name == "no_tool_choice":
            headers["X-Ecdysis-No-Shim"] = "1"
        response = httpx2.post(
            f"{url}/chat/completions",
            json={"model": alias, "temperature": 0, **body},
            headers=headers,
            timeout=1800,
        )
        out[name] = {"status": response.status_code, "seconds": round(time.monotonic() - started, 1)}
        print(
            f"== probe {name}: HTTP {response.status_code} in {out[name]['seconds']} s: "
            f"{response.text[:160]}",
            flush=True,
        )
    return out


def editor_stage(session: Path, url: str, alias: str, args: argparse.Namespace) -> dict:
    """The built-in editor on the real model with `EDITOR_SPEC`, on a copy of the example harness under
    `<session>/editor/`, its prompt fitted to the server's `--ctx`; returns `{ok, detail, calls, tokens, wall_s,
    changed, prompt}` (`prompt`: the files shown and listed, `edit_prompt`; `changed`: files that differ
    from the example harness afterwards; a failed edit restores them, so it is empty then)."""
    import shutil
    from types import SimpleNamespace

    from pytest_ecdysis.edit.editors import BuiltinEditor
    from pytest_ecdysis.edit.prompt import reply_tokens
    from pytest_ecdysis.endpoint.role_client import RoleClient

    work = session / "editor"
    harness = work / "example_harness"
    shutil.copytree(
        REPO / "pytest_ecdysis_tau2" / "example_harness",
        harness,
        ignore=shutil.ignore_patterns("__pycache__", "recipes"),
    )
    spec = work / "spec.json"
    spec.write_text(json.dumps(EDITOR_SPEC, indent=2) + "\n")
    client = RoleClient(
        alias,
        base_url=url,
        timeout_s=max(180.0, args.call_timeout),
        max_retries=0,
        stage="editor",
        max_tokens=reply_tokens(args.ctx),
    )  # as BuiltinEditor.client with ecdysis_editor_context
    print("\n== editor: the built-in editor, spec: raise MAX_MODEL_CALLS in config.py", flush=True)
    cfg = SimpleNamespace(editor_context_tokens=args.ctx)  # ecdysis_editor_context: the server's --ctx
    result = BuiltinEditor(cfg, client=client).edit(None, harness, spec_path=spec)
    changed = sorted(
        p.relative_to(harness).as_posix()
        for p in harness.rglob("*.py")
        if not (REPO / "pytest_ecdysis_tau2" / "example_harness" / p.relative_to(harness)).is_file()
        or p.read_bytes()
        != (REPO / "pytest_ecdysis_tau2" / "example_harness" / p.relative_to(harness)).read_bytes()
    )
    out = {
        "stage": "editor",
        "ok": result.ok,
        "detail": result.detail,
        "calls": result.calls,
        "tokens": result.tokens,
        "wall_s": round(result.wall_s, 1),
        "changed": changed,
        "prompt": result.prompt,
    }
    print(
        f"== editor: {'edited ' + ', '.join(changed) if result.ok else 'no change'}: {result.detail} "
        f"({result.calls} call(s), {out['wall_s']:.0f} s)",
        flush=True,
    )
    return out


def context_too_long(run: Path, args: argparse.Namespace) -> str | None:
    """One message when trials or the evolution round met the model's context limit, else None."""
    lines = (
        [json.loads(x) for x in (run / "trials.jsonl").read_text().splitlines() if x.strip()]
        if (run / "trials.jsonl").is_file()
        else []
    )
    over = [t for t in lines if t.get("termination_reason") == "context_overflow"]
    evo = json.loads((run / "evolution.json").read_text()) if (run / "evolution.json").is_file() else {}
    rounds = [r for r in evo.get("rounds", []) if "context window" in str(r.get("reason"))]
    if not over and not rounds:
        return None
    limit = MODELS.get(args.model, {}).get("context")
    return (
        f"context too long: {len(over)} of {len(lines)} trial(s) ended context_overflow"
        + (
            f" and the evolution round's {'diagnosis' if rounds[0]['outcome'] == 'no_spec' else 'edit'} did not "
            "fit"
            if rounds
            else ""
        )
        + f"; the server ran with --ctx {args.ctx}"
        + (f" (this model takes at most {limit})" if limit else "")
        + ": raise --ctx, or let the harness keep fewer or shorter messages"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (and SIGINT in a background job, where it is ignored) stop the server too


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    args = parse_args(argv)
    session = args.out / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{args.model}-{os.getpid()}"
    session.mkdir(parents=True, exist_ok=True)
    facts: dict = {
        "schema_version": 1,
        "model": args.model,
        "ctx": args.ctx,
        "threads": args.threads,
        "tasks": args.tasks,
        "trials": args.trials,
        "stages": [],
        "temperature": args.temperature,
    }
    server = proxy = None
    try:
        if not port_free(args.port) or not port_free(args.port + 1):
            raise ServerError(
                f"port {args.port} or {args.port + 1} on 127.0.0.1 is in use (another server, or an "
                "earlier run still going?): pass --port N with two free ports N and N+1, or stop the "
                "process listening there"
            )
        facts["install_s"] = ensure_server(install=not args.no_install, wheel_dir=args.wheel_dir)
        model_path, chat_format, facts["model_install_s"] = ensure_model(
            args.model, install=not args.no_install, model_file=args.model_file, chat_format=args.chat_format
        )
        facts.update(model_file=str(model_path), chat_format=chat_format)
        print(
            f"model {args.model}: {model_path} ({model_path.stat().st_size / 1e6:.0f} MB), chat format "
            f"{chat_format}, context {args.ctx}, {args.threads} thread(s)",
            flush=True,
        )
        server, facts["server_start_s"] = start_server(
            model_path,
            chat_format=chat_format,
            ctx=args.ctx,
            threads=args.threads,
            port=args.port + 1,
            alias=args.model,
            log_path=session / "server.log",
        )
        print(
            f"server ready in {facts['server_start_s']:.1f} s at http://127.0.0.1:{args.port + 1}", flush=True
        )
        proxy = RecordingProxy(
            upstream=f"http://127.0.0.1:{args.port + 1}",
            port=args.port,
            record=session / "replies.jsonl",
            agent_temperature=args.temperature,
            tool_choice_auto=not args.no_tool_choice_shim,
            agent_max_tokens=args.agent_max_tokens or None,
        )
        proxy.start()
        url = f"http://127.0.0.1:{args.port}/v1"
        baseline = session / "baseline.json"
        for stage in args.stages:
            if stage == "probe":
                facts["probes"] = probe(url, args.model)
                continue
            if stage == "editor":
                facts["stages"].append(editor_stage(session, url, args.model, args))
                continue
            if stage == "trials":
                extra = ["--ecdysis-save-baseline", str(baseline)]
            elif stage == "gate":
                if not baseline.is_file():
                    print("== gate: skipped, no baseline (run the trials stage first)", flush=True)
                    continue
                extra = ["--ecdysis-gate", "--ecdysis-baseline", str(baseline)]
            elif stage == "evolve":
                extra = [
                    "--ecdysis-evolve",
                    "--ecdysis-rounds",
                    "1",
                    "--ecdysis-diagnosis-model",
                    args.model,
                    "--ecdysis-editor",
                    "builtin",
                    "-o",
                    "ecdysis_editor_context=" + str(args.ctx),
                    "--ecdysis-test-trials",
                    "0",
                    "--ecdysis-fdcr-passes",
                    str(args.fdcr_passes),
                ]
            else:  # noise
                for i in range(1, args.repeat + 1):
                    facts["stages"].append(pytest_stage(f"noise{i}", session, args, url, args.model, []))
                continue
            facts["stages"].append(pytest_stage(stage, session, args, url, args.model, extra))
    except ServerError as exc:
        print(f"\nreal-model: {exc}", file=sys.stderr, flush=True)
        facts["error"] = str(exc)
        return 2
    except KeyboardInterrupt:
        facts["error"] = "interrupted"
        print(
            "\nreal-model: interrupted; the server is stopped and the session directory keeps what was done",
            file=sys.stderr,
            flush=True,
        )
        return 130
    finally:
        if proxy is not None:
            proxy.stop()
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        facts.update(measure(session))
        (session / "real-model.json").write_text(json.dumps(facts, indent=2) + "\n")
        print(f"\nfigures: {session / 'real-model.json'}", flush=True)
    return 0


if __name__ == "__main__":
    if importlib.util.find_spec("pytest_ecdysis") is None:
        sys.exit("real-model: run through ./scripts/real-model.sh (it installs the project into .venv first)")
    sys.exit(main())
