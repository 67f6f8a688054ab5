"""Aliases and constant strings for the static check (`validate.static`): what a name stands for.

`_aliases(tree)` follows simple assignments (`m = os`, `e = os.environ`, `self.m = os`, `a, b = os, sys`,
`(m := os)`, `with x as m`) to what they name; `_resolve` maps a dotted use through them; `_const_str`
folds a string built from constants only. What it does not follow (docs/evolution.md, threat model):
values returned by functions, items of containers, names computed at run time, attributes set through
`setattr`, behaviour that depends on the working directory or the time. Pure functions of the AST.
"""

from __future__ import annotations

import ast


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Names bound to an imported module or object by a simple assignment anywhere in the module (scopes
    ignored: a name that aliases a module anywhere is treated as that module everywhere), followed to a
    fixed point (`a = os; b = a` makes `b` stand for `os`). Keys may be dotted (`self.m`)."""
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[(alias.asname or alias.name).split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for assigned in node.targets:
                pairs += _pairs(assigned, node.value)
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            pairs += _pairs(node.target, node.value)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs += _pairs(node.optional_vars, node.context_expr)
    aliases: dict[str, str] = {}
    for _ in range(10):  # chains of aliases, to a fixed point
        changed = False
        for target, value in pairs:
            name, full = _dotted_name(target), _resolve({**imported, **aliases}, _dotted_name(value))
            if name and full and aliases.get(name) != full and name not in imported:
                aliases[name], changed = full, True
        if not changed:
            break
    return aliases


def _pairs(target: ast.AST, value: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    if (
        isinstance(target, ast.Tuple | ast.List)
        and isinstance(value, ast.Tuple | ast.List)
        and len(target.elts) == len(value.elts)
    ):
        return [p for t, v in zip(target.elts, value.elts, strict=True) for p in _pairs(t, v)]
    return [(target, value)]


def _dotted_name(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _resolve(imported: dict[str, str], dotted: str) -> str:
    """`dotted` with its longest imported prefix replaced by what it names; "" when none is imported."""
    parts = dotted.split(".") if dotted else []
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in imported:
            return ".".join([imported[head], *parts[cut:]])
    return ""


def _const_str(node: ast.AST) -> str | None:
    """The value of a string expression built from constants only (`"a" + "b"`, f"{'a'}b", `"".join([...])`,
    `"a" "b"`), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _const_str(node.left), _const_str(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_const_str(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
        return _joined("", parts)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.List | ast.Tuple)
    ):
        sep = _const_str(node.func.value)
        if sep is None and _dotted_name(node.func.value) not in ("os.path", "posixpath"):
            return None
        parts = [_const_str(e) for e in node.args[0].elts]
        return _joined(sep if sep is not None else "/", parts)
    if (
        isinstance(node, ast.Call)
        and _dotted_name(node.func) in ("os.path.join", "posixpath.join")
        and node.args
    ):
        parts = [_const_str(a) for a in node.args]
        return _joined("/", parts)
    return None


def _joined(sep: str, parts: list[str | None]) -> str | None:
    """`sep.join(parts)`, or None when a part is not a constant string (None)."""
    known = [p for p in parts if p is not None]
    return sep.join(known) if len(known) == len(parts) else None
