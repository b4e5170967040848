"""The environment variables a program reads, found in its code.

A read names the variable as a string literal: `os.environ["NAME"]`, `os.environ.get("NAME")`
(or `environ.get` after `from os import environ`), `os.getenv("NAME")`, `getenv("NAME")`,
`os.environ.setdefault("NAME", ...)`, `os.environ.pop("NAME", ...)`, `"NAME" in os.environ`.
Writes (`os.environ["NAME"] = ...`, `del os.environ["NAME"]`) are not reads. A name computed at
run time is not found. The run that records them (isolate/worker.py) takes their values as
the program started with them, so a repro can set them again, except those that describe
the machine rather than the program (MACHINE_VARIABLES: HOME, PATH, a launcher's RANK...).
"""

from __future__ import annotations

import ast
import fnmatch

from cudadiag.isolate.cellfacts import python_source

READING_METHODS = frozenset({"get", "setdefault", "pop", "__getitem__", "__contains__"})
"""Methods of os.environ that read a variable named by their first argument."""

MACHINE_VARIABLES = (
    "HOME", "USER", "LOGNAME", "USERNAME", "PATH", "PWD", "OLDPWD", "SHELL", "HOSTNAME",
    "TERM", "TERM_*", "COLORTERM", "LANG", "LANGUAGE", "LC_*", "TZ", "DISPLAY", "XDG_*",
    "TMPDIR", "TEMP", "TMP", "SSH_*", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_*",
    "JPY_*", "JUPYTER_*", "KERNEL_*", "VSCODE_*", "RANK", "LOCAL_RANK", "GROUP_RANK",
    "ROLE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_*", "SLURM_*", "CUDADIAG_*",
)
"""Variables that describe the machine, the user, the session or a launcher's process (its
rank), not how the program is configured: a repro carries none of them to another machine
(shell patterns)."""


def environ_reads(source: str) -> list[str]:
    """Return the variables `source` (Python, or a notebook cell with magics) reads by a
    literal name, in the order they first appear; [] for code that does not parse."""
    try:
        tree = ast.parse(python_source(source)[0])
    except SyntaxError:
        return []
    reads = sorted(((node.lineno, node.col_offset), name) for node in ast.walk(tree)
                   if isinstance(node, ast.expr) and (name := _read_name(node)) is not None)
    return list(dict.fromkeys(name for _, name in reads))


def describes_the_machine(name: str) -> bool:
    """True for a variable of MACHINE_VARIABLES."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in MACHINE_VARIABLES)


def _read_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
            and _is_environ(node.value):
        return _literal(node.slice)
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in READING_METHODS \
                and _is_environ(func.value):
            return _literal(node.args[0])
        if (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                isinstance(func, ast.Name) and func.id == "getenv"):
            return _literal(node.args[0])
    if isinstance(node, ast.Compare) and len(node.ops) == 1 \
            and isinstance(node.ops[0], (ast.In, ast.NotIn)) and _is_environ(node.comparators[0]):
        return _literal(node.left)
    return None


def _is_environ(node: ast.expr) -> bool:
    """`os.environ` (any module name before it) or a bare `environ`."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) \
        else None
