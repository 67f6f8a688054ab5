"""The rules of the static check of a candidate harness (`validate.static`): what each `Finding.rule` flags.

A candidate is code written by a model; this pass flags what a harness has no business doing
(docs/evolution.md, threat model). Rules, each a `Finding.rule`:

- `file_access`: `open`, `os.open`/`listdir`/`walk`/..., `Path(...).read_text()`/`write_*`/`glob`/...,
  `shutil`, `glob`, `tempfile`: anything reading or writing files outside the harness. A path built
  from the module's own `__file__` (no `..`, no `.parent.parent`) is the harness's own file and allowed.
- `dynamic_code`: `importlib`, `__import__`, `exec`, `eval`, `compile`, `runpy`, `pkgutil`, `marshal`,
  `pickle`, decoding at run time (`base64`, `codecs`, `zlib`, `bytes.fromhex`, `binascii`).
- `introspection`: `sys.modules`, `sys._getframe`, `sys.path`, `gc`, `inspect`, `ctypes`, `builtins`,
  dunder attributes that reach other code (`__globals__`, `__code__`, `__subclasses__`, another
  module's `__file__`, ...).
- `patches_code`: `setattr`/`delattr`, or an assignment to an attribute of an imported name
  (`ScorerClient.score = ...`, `module.attr = ...`); `getattr`/`hasattr` with a name that is not a string
  literal.
- `process`: `subprocess`, `os.system`/`popen`/`exec*`/`spawn*`/`fork`/`kill`, `multiprocessing`, `signal`,
  `pty`.
- `network`: `socket`, `ssl`, `urllib`, `http`, `requests`, `httpx`, `aiohttp`, ... (model calls go
  through the client the suite hands the harness).
- `environment`: `os.environ`, `os.getenv`, `os.putenv`, `dotenv`.
- `internals`: imports of τ² beyond its agent and message interface (`tau2.agent`, `tau2.data_model.message`,
  `tau2.environment.tool`), of the plugin beyond `pytest_ecdysis.core.errors`, of `pytest_ecdysis_tau2`.
- `gold_data`: a string or name that mentions τ²'s task files, data directory, gold fields, evaluator,
  or the simulated model's ground truth (the literal patterns of the earlier diff check).
- aliases are followed: a simple assignment (`m = os`, `e = os.environ`, `self.m = os`,
  `a, b = os, sys`, `(m := os)`) makes the name stand for what it names, so `m.environ` is `os.environ`;
  `ALIAS_BUILTINS` used as a value (`_r = open`) or rebound are flagged; `getattr(x, "name")` with a
  constant is checked as `x.name`; string constants joined at the source level (`"tasks" + ".json"`,
  f-strings of constants, `"".join([...])`) are checked against the gold patterns; the client's routing
  attributes (`ROUTING_ATTRS`: the trial header names the task) are flagged as `gold_data`.
- `file_kind`: a symlink, compiled or binary code, `sitecustomize.py`/`usercustomize.py`/`*.pth`/
  `conftest.py`, or a file that does not parse.

The tables below say, by module, attribute, call and literal pattern, which rule a construct falls under;
`validate.static._Visitor` walks the AST against them. This module holds data and `Finding` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Literal patterns that name τ²'s gold data, its scoring, or the simulated model's ground truth.
GOLD_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"evaluation_criteria", "reads a task's evaluation criteria (gold actions)"),
    (r"tasks\.json|tasks_voice\.json|split_tasks\.json", "opens a τ² task file"),
    (r"tau2[/\\.]data\b|\bDATA_DIR\b|data/tau2|domains[/\\]\w+[/\\](db|tasks)", "reads τ²'s data directory"),
    (
        r"\b(expected_actions|communicate_info|reward_basis|nl_assertions|env_assertions)\b",
        "reads gold task fields",
    ),
    (r"tau2\.evaluator|\bevaluate_simulation\b|\bEnvironmentEvaluator\b", "touches τ²'s evaluator"),
    (r"\bpytest_ecdysis\b|\bpytest_ecdysis_tau2\b", "touches the plugin or the task suites"),
    (
        r"ground_truth|sim_knowledge|telecom_knowledge|knowledge\.providers",
        "reads the simulated model's ground truth",
    ),
)

ALLOWED_IMPORTS = (
    "tau2.agent",
    "tau2.data_model.message",
    "tau2.environment.tool",
    "pytest_ecdysis.core.errors",
)
INTERNAL_ROOTS = ("tau2", "pytest_ecdysis", "pytest_ecdysis_tau2", "example_harness")

MODULE_RULES: dict[str, str] = {
    **dict.fromkeys(
        (
            "subprocess",
            "multiprocessing",
            "signal",
            "pty",
            "concurrent.futures.process",
            "asyncio.subprocess",
        ),
        "process",
    ),
    **dict.fromkeys(
        (
            "socket",
            "ssl",
            "urllib",
            "http",
            "requests",
            "httpx",
            "httpx2",
            "aiohttp",
            "ftplib",
            "smtplib",
            "websocket",
            "websockets",
            "webbrowser",
            "xmlrpc",
            "litellm",
        ),
        "network",
    ),
    **dict.fromkeys(
        (
            "importlib",
            "runpy",
            "pkgutil",
            "marshal",
            "pickle",
            "shelve",
            "base64",
            "codecs",
            "zlib",
            "bz2",
            "lzma",
            "binascii",
            "zipimport",
        ),
        "dynamic_code",
    ),
    **dict.fromkeys(
        ("gc", "inspect", "ctypes", "cffi", "builtins", "site", "sysconfig", "mmap", "resource", "fcntl"),
        "introspection",
    ),
    **dict.fromkeys(
        ("shutil", "glob", "tempfile", "io", "zipfile", "tarfile", "sqlite3", "dbm", "fnmatch"), "file_access"
    ),
    "dotenv": "environment",
}
OS_ATTRS: dict[str, str] = {
    **dict.fromkeys(("environ", "environb", "getenv", "putenv", "unsetenv"), "environment"),
    **dict.fromkeys(
        (
            "system",
            "popen",
            "fork",
            "forkpty",
            "kill",
            "killpg",
            "setsid",
            "posix_spawn",
            "posix_spawnp",
            "execv",
            "execve",
            "execvp",
            "execl",
            "execlp",
            "spawnv",
            "spawnl",
            "spawnve",
            "startfile",
        ),
        "process",
    ),
    **dict.fromkeys(
        (
            "open",
            "listdir",
            "scandir",
            "walk",
            "fwalk",
            "remove",
            "unlink",
            "rename",
            "replace",
            "rmdir",
            "mkdir",
            "makedirs",
            "chmod",
            "chown",
            "symlink",
            "link",
            "readlink",
            "stat",
            "lstat",
            "utime",
            "truncate",
            "chdir",
            "getcwd",
            "fdopen",
            "dup",
            "dup2",
            "write",
            "read",
            "sendfile",
            "memfd_create",
        ),
        "file_access",
    ),
}
SYS_ATTRS = {
    "modules",
    "_getframe",
    "path",
    "meta_path",
    "path_hooks",
    "settrace",
    "setprofile",
    "addaudithook",
    "stdout",
    "stderr",
    "__stdout__",
    "__stderr__",
    "executable",
    "argv",
    "exit",
    "_current_frames",
    "setrecursionlimit",
}
BUILTIN_CALLS: dict[str, str] = {
    "open": "file_access",
    "exec": "dynamic_code",
    "eval": "dynamic_code",
    "compile": "dynamic_code",
    "__import__": "dynamic_code",
    "globals": "introspection",
    "vars": "introspection",
    "breakpoint": "process",
    "input": "process",
    "setattr": "patches_code",
    "delattr": "patches_code",
}
#: Builtins that are flagged when used as a value (an alias: `_r = open`, `f(getattr)`) or rebound (`def
#: f(open=...)`): a call through the alias would escape `BUILTIN_CALLS` and the `getattr` constant check.
ALIAS_BUILTINS = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "__import__",
        "getattr",
        "setattr",
        "delattr",
        "globals",
        "vars",
        "__builtins__",
        "locals",
    }
)
#: Attributes of the client the suite hands the harness that carry routing (the trial header names the task).
ROUTING_ATTRS = frozenset({"default_headers", "_custom_headers", "custom_auth", "api_key", "base_url"})
PATH_IO = {
    "open",
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "iterdir",
    "glob",
    "rglob",
    "unlink",
    "rmdir",
    "mkdir",
    "touch",
    "rename",
    "replace",
    "chmod",
    "symlink_to",
    "hardlink_to",
    "walk",
    "readlink",
    "resolve",
    "home",
    "cwd",
    "expanduser",
    "exists",
    "is_file",
    "is_dir",
    "stat",
}
DUNDERS = {
    "__globals__",
    "__code__",
    "__subclasses__",
    "__builtins__",
    "__closure__",
    "__loader__",
    "__spec__",
    "__path__",
    "__bases__",
    "__mro__",
    "__getattribute__",
    "__reduce__",
    "__reduce_ex__",
    "__file__",
    "__dict__",
    "__func__",
    "__self__",
    "__import__",
    "__defaults__",
    "__kwdefaults__",
}
FORBIDDEN_FILES = re.compile(r"(^|/)(sitecustomize\.py|usercustomize\.py|conftest\.py|[^/]*\.pth)$")
BINARY_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib", ".whl", ".egg", ".zip")
REASONS = {
    "file_access": "file access outside the harness",
    "dynamic_code": "dynamic import or code at run time",
    "introspection": "introspection of other code",
    "patches_code": "patches or looks up code dynamically",
    "process": "starts or signals processes",
    "network": "network access",
    "environment": "reads or sets environment variables",
    "internals": "imports benchmark or plugin internals",
    "gold_data": "mentions gold data or scoring",
    "file_kind": "a file a harness must not ship",
}


@dataclass(frozen=True)
class Finding:
    """One flagged construct: `path` relative to the harness, 1-based `line` (0 for the file itself)."""

    path: str
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {REASONS[self.rule]}: {self.text}"
