"""The static check of a candidate harness: an AST pass over its code, before any of it runs.

A candidate is code written by a model; this pass flags what a harness has no business doing
(docs/evolution.md, threat model). The rules (`file_access`, `dynamic_code`, `introspection`,
`patches_code`, `process`, `network`, `environment`, `internals`, `gold_data`, `file_kind`) and the
tables that decide them are in `validate.static_rules`; `check_file` applies them to one file, `_Visitor`
walking its AST.

Only what the candidate *adds* is reported: findings of a file are compared with those of the same file
in the base harness by (rule, source text), so a base that already reads an environment variable is not
flagged again. This module reads source text only; it never imports or runs candidate code.
"""

from __future__ import annotations

import ast
import re
from collections import Counter

from pytest_ecdysis.validate.static_aliases import _aliases, _const_str, _resolve
from pytest_ecdysis.validate.static_rules import (
    ALIAS_BUILTINS,
    ALLOWED_IMPORTS,
    BINARY_SUFFIXES,
    BUILTIN_CALLS,
    DUNDERS,
    FORBIDDEN_FILES,
    GOLD_PATTERNS,
    INTERNAL_ROOTS,
    MODULE_RULES,
    OS_ATTRS,
    PATH_IO,
    REASONS,
    ROUTING_ATTRS,
    SYS_ATTRS,
    Finding,
)

__all__ = ["REASONS", "Finding", "check_candidate", "check_file"]


def check_candidate(candidate: dict[str, bytes | None], base: dict[str, bytes]) -> list[Finding]:
    """Findings the candidate adds over `base`, sorted by path and line.

    `candidate` maps each harness file (POSIX path relative to the harness) to its bytes, or to None for a
    symlink (never followed); `base` holds the base harness's files the same way.
    """
    out: list[Finding] = []
    for path in sorted(candidate):
        data = candidate[path]
        new = check_file(path, data)
        if not new:
            continue
        old = Counter((f.rule, f.text) for f in check_file(path, base[path])) if path in base else Counter()
        for finding in new:
            if old[(finding.rule, finding.text)] > 0:
                old[(finding.rule, finding.text)] -= 1
            else:
                out.append(finding)
    return out


def check_file(path: str, data: bytes | None) -> list[Finding]:
    """Every finding of one file (not compared with a base)."""
    if data is None:
        return [Finding(path, 0, "file_kind", "a symlink (the candidate's files must be regular files)")]
    if FORBIDDEN_FILES.search(path):
        return [
            Finding(path, 0, "file_kind", "a file Python or pytest runs on its own (startup hook/conftest)")
        ]
    if path.endswith(BINARY_SUFFIXES) or b"\0" in data:
        return [Finding(path, 0, "file_kind", "compiled or binary content")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [Finding(path, 0, "file_kind", "not UTF-8 text")]
    if not path.endswith(".py"):
        return [
            Finding(path, i, "gold_data", f"{reason}: {line.strip()[:100]}")
            for i, line in enumerate(text.splitlines(), 1)
            for reason in _gold(line)
        ]
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        return [Finding(path, exc.lineno or 0, "file_kind", f"does not parse: {exc.msg}")]
    visitor = _Visitor(path, text)
    visitor.imported.update(_aliases(tree))
    visitor.visit(tree)
    return sorted(set(visitor.findings), key=lambda f: (f.line, f.rule, f.text))


def _gold(text: str) -> list[str]:
    return [reason for pattern, reason in GOLD_PATTERNS if re.search(pattern, text)][:1]


class _Visitor(ast.NodeVisitor):
    """Collects findings; `imported` maps local names bound by imports to the dotted module or object."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.source = source
        self.findings: list[Finding] = []
        self.imported: dict[str, str] = {}
        self.called: set[int] = set()  # ids of Name nodes that are the function of a call

    def flag(self, node: ast.AST, rule: str, what: str = "") -> None:
        snippet = (ast.get_source_segment(self.source, node) or "").splitlines()[0:1]
        text = what or (snippet[0].strip()[:100] if snippet else type(node).__name__)
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0), rule, text))

    # imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._import(node, alias.name)
            self.imported[(alias.asname or alias.name).split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:  # the harness's own modules
            for alias in node.names:
                self.imported.pop(alias.asname or alias.name, None)
            return
        module = node.module or ""
        self._import(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            self._import(node, full, also_module=False)
            self.imported[alias.asname or alias.name] = full

    def _import(self, node: ast.AST, module: str, also_module: bool = True) -> None:
        root = module.split(".")[0]
        if root in INTERNAL_ROOTS:
            if also_module and not any(module == a or module.startswith(a + ".") for a in ALLOWED_IMPORTS):
                if not any(a.startswith(module + ".") for a in ALLOWED_IMPORTS):
                    self.flag(node, "internals", f"imports {module}")
            return
        for name, rule in MODULE_RULES.items():
            if module == name or module.startswith(name + "."):
                self.flag(node, rule, f"imports {module}")
                return
        if module in ("sys.modules",):
            self.flag(node, "introspection", f"imports {module}")

    # names, attributes and calls
    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        full = _resolve(self.imported, dotted)  # aliases followed: `m = os; m.environ` is `os.environ`
        if full:
            if self._module_attr(node, full):
                return  # one finding per use (`os.environ.get` is not also `os.environ`)
            if full.startswith("os.") and node.attr in OS_ATTRS:
                self.flag(node, OS_ATTRS[node.attr], dotted)
        if node.attr in ROUTING_ATTRS:
            self.flag(
                node,
                "gold_data",
                f"reads the client's routing .{node.attr} (the trial header names the task)",
            )
        if node.attr in DUNDERS and not (node.attr == "__file__" and self._own_module(node.value)):
            if node.attr != "__dict__" or self._root_imported(node.value):
                self.flag(node, "introspection", f"attribute {node.attr}")
        if node.attr in PATH_IO and isinstance(node.ctx, ast.Load) and self._path_like(node.value):
            if not self._inside_harness(node.value):
                self.flag(node, "file_access")
        for reason in _gold(node.attr):
            self.flag(node, "gold_data", f"{reason}: .{node.attr}")
        self.generic_visit(node)

    def _module_attr(self, node: ast.AST, full: str) -> bool:
        """Flag `os.<attr>` / `sys.<attr>` uses by their resolved name; True when flagged."""
        parts = full.split(".")
        if parts[0] == "os" and len(parts) > 1 and parts[1] in OS_ATTRS:
            self.flag(node, OS_ATTRS[parts[1]], f"os.{parts[1]}")
            return True
        if parts[0] == "sys" and len(parts) > 1 and parts[1] in SYS_ATTRS:
            self.flag(node, "introspection", f"sys.{parts[1]}")
            return True
        return False

    def visit_arg(self, node: ast.arg) -> None:
        if node.arg in ALIAS_BUILTINS:
            self.flag(node, "patches_code", f"rebinds builtin {node.arg} (a parameter)")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ALIAS_BUILTINS and node.id not in self.imported and id(node) not in self.called:
            if isinstance(node.ctx, ast.Load):
                rule = BUILTIN_CALLS.get(node.id) or (
                    "introspection" if node.id in ("__builtins__", "locals") else "patches_code"
                )
                self.flag(node, rule, f"uses builtin {node.id} as a value (an alias escapes the check)")
            else:
                self.flag(node, "patches_code", f"rebinds builtin {node.id}")
        target = self.imported.get(node.id, "")
        if target in ("os.environ", "os.getenv", "os.putenv"):
            self.flag(node, "environment", target)
        for reason in _gold(node.id):
            self.flag(node, "gold_data", f"{reason}: {node.id}")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str | bytes):
            value = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            for reason in _gold(value):
                self.flag(node, "gold_data", f"{reason}: {value.strip()[:80]!r}")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.called.add(id(func))
        joined = _const_str(node)
        if joined is not None:
            for reason in _gold(joined):
                self.flag(node, "gold_data", f"{reason}: {joined.strip()[:80]!r} (joined)")
        if isinstance(func, ast.Name) and func.id not in self.imported:
            rule = BUILTIN_CALLS.get(func.id)
            if func.id == "open" and node.args and self._inside_harness(node.args[0]):
                rule = None
            if rule:
                self.flag(node, rule, f"calls {func.id}()")
            if func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2:
                if not (isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                    self.flag(node, "patches_code", f"{func.id}() with a computed attribute name")
                else:
                    self._constant_getattr(node, func.id, node.args[0], node.args[1].value)
        elif isinstance(func, ast.Attribute) and func.attr == "fromhex":
            self.flag(node, "dynamic_code", "bytes.fromhex()")
        self.generic_visit(node)

    def _constant_getattr(self, node: ast.Call, fn: str, obj: ast.AST, name: str) -> None:
        """`getattr(x, "name")` checked as `x.name` would be (`getattr(os, "environ")` is `os.environ`)."""
        full = _resolve(self.imported, self._dotted(obj))
        if full and self._module_attr(node, f"{full}.{name}"):
            return
        if name in DUNDERS and not (name == "__file__" and self._own_module(obj)):
            self.flag(node, "introspection", f"{fn}() of attribute {name}")
        elif name in ROUTING_ATTRS:
            self.flag(node, "gold_data", f"{fn}() of the client's routing .{name}")
        elif fn == "getattr" and self._root_imported(obj):
            self.flag(node, "patches_code", f"getattr() on imported {self._dotted(obj)}")
        for reason in _gold(name):
            self.flag(node, "gold_data", f"{reason}: {fn}() of .{name}")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        joined = _const_str(node)
        if joined is not None:
            for reason in _gold(joined):
                self.flag(node, "gold_data", f"{reason}: {joined.strip()[:80]!r} (joined)")
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        joined = _const_str(node)
        if joined is not None:
            for reason in _gold(joined):
                self.flag(node, "gold_data", f"{reason}: {joined.strip()[:80]!r} (joined)")
        self.generic_visit(node)

    def _assign_target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Attribute) and self._root_imported(target.value):
            self.flag(target, "patches_code", f"assigns {self._dotted(target) or target.attr}")
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._assign_target(element)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._assign_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assign_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._assign_target(target)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name in self.imported:
                self.flag(node, "patches_code", f"rebinds imported {name}")

    # helpers
    def _dotted(self, node: ast.AST) -> str:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            return ".".join([node.id, *reversed(parts)])
        return ""

    def _root_imported(self, node: ast.AST) -> bool:
        while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
            node = node.func if isinstance(node, ast.Call) else node.value
        return isinstance(node, ast.Name) and node.id in self.imported

    def _own_module(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id not in self.imported

    def _path_like(self, node: ast.AST) -> bool:
        """An expression that is (or is built from) a pathlib path: `Path(...)`, `x / "y"`, `.parent`."""
        while isinstance(node, ast.Attribute | ast.Call | ast.BinOp):
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Name) and self.imported.get(node.func.id, "").startswith(
                    "pathlib"
                ):
                    return True
                node = node.func
            elif isinstance(node, ast.BinOp):
                node = node.left
            else:
                if node.attr in ("parent", "parents"):
                    return True
                node = node.value
        return isinstance(node, ast.Name) and self.imported.get(node.id, "").startswith("pathlib")

    def _inside_harness(self, node: ast.AST) -> bool:
        """A path expression rooted in this module's `__file__` that never climbs (`..`, `.parent.parent`)."""
        text = ast.get_source_segment(self.source, node) or ""
        if "__file__" not in text or ".." in text or "parents" in text or text.count(".parent") > 1:
            return False
        for n in ast.walk(node):  # only __file__, pathlib / os.path and literals: nothing computed elsewhere
            if isinstance(n, ast.Name) and n.id != "__file__" and n.id not in self.imported:
                return False
            if (
                isinstance(n, ast.Name)
                and n.id in self.imported
                and not (
                    self.imported[n.id].startswith("pathlib") or self.imported[n.id] in ("os", "os.path")
                )
            ):
                return False
            if isinstance(n, ast.Constant) and not isinstance(n.value, str):
                return False
        return True
