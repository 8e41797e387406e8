"""Split a program's `assert` tests into what runs beside the program and what a judge checks apart.

A test such as ``assert set(similar_elements((3, 4), (4, 5))) == set((4,))`` has two kinds of code:
the *parts* that need the program (``similar_elements((3, 4), (4, 5))``), and the *check* around
them (``set(__dv_0__) == set((4,))``). `plan` cuts every test that way. The sandbox
(`execution.run_program(..., tests=...)`, `confine.py`) then evaluates the parts in the program's
process, after the program, and sends back their values as plain data (Python's own types, rebuilt
by the judge, never the program's objects); a separate judge process, which never ran the program,
rebuilds them and evaluates the checks with its own builtins and its own imports. So a program
cannot pass by returning an object equal to everything, by shadowing `set`, `sorted` or
`math.isclose`, or by printing a marker: the comparison is made where its code cannot run.

Which names a check resolves itself (*clean*) and which belong to the program:
- names imported by the setup code or the tests, and modules the program imports under their own
  name (`import math`, not `import x as math` or `from x import math`), are the judge's own import
  of the same statement, whatever the program rebinds them to;
- builtins are the judge's, whatever the program assigns to them, except where a test line uses no
  program name but builtins the program defines with def or class (MBPP task 126 asks for a
  function named `sum`): those are the program's;
- every other name (the program's functions, names bound by the setup code or by a test's own
  statements, names bound nowhere) is the program's: its value comes from the program's process.
Compare, `and`/`or`/`not`, `x if c else y`, calls of clean functions and tuple, list, set and dict
displays are checked by the judge; any other expression that uses a program name (a call of the
program's function, an index, arithmetic on its value) is a part, evaluated whole by the program.

Not closed here: a comparison written *inside* a comprehension or lambda of a test that uses program
names runs with the program's values (it is part of a part); MBPP has none. A program that knows
the expected values can return them (the prompt shows the tests): that is what pass@1 measures.
Assertions nested in a test's own blocks (`for ...: assert ...`) are refused by `validate`.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Sequence
from dataclasses import dataclass

PART = "__dv_{}__"  # the name a part's value has in the judge's check
_BUILTINS = frozenset(dir(builtins))
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


class TestsNotJudged(ValueError):
    """A test the judge cannot check: not Python, or an `assert` inside a block."""


@dataclass(frozen=True)
class Plan:
    """What the sandbox runs for a program's tests (`to_config` is what crosses to it).

    steps: per test line, in order: ("exec", source) for its other statements (run with the
        program), ("part", k, source) for each part of its asserts.
    checks: per test line, one expression per assert, over the names PART.format(k).
    imports: import statements the judge runs first (the test's clean module names).
    """

    steps: tuple[tuple[tuple, ...], ...]
    checks: tuple[tuple[str, ...], ...]
    imports: tuple[str, ...]
    parts: int

    def to_config(self) -> dict:
        return {
            "steps": [[list(step) for step in line] for line in self.steps],
            "checks": [list(line) for line in self.checks],
            "imports": list(self.imports),
            "parts": self.parts,
        }


def validate(tests: Sequence[str], where: str = "test") -> None:
    """Raise TestsNotJudged naming the line if a test line cannot be judged: not Python, or an
    `assert` below the top level of the line (the judge checks top-level asserts only)."""
    for i, line in enumerate(tests):
        try:
            tree = ast.parse(line)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            raise TestsNotJudged(f"{where} line {i + 1} is not Python ({e}): {line[:200]!r}") from None
        for statement in tree.body:
            nested = [n for n in ast.walk(statement) if isinstance(n, ast.Assert) and n is not statement]
            if nested:
                raise TestsNotJudged(
                    f"{where} line {i + 1} has an assert inside a block; the sandbox's judge checks only "
                    f"top-level `assert` statements (write one assert per condition): {line[:200]!r}"
                )


def _bound(source: str, plain: bool = False) -> tuple[dict[str, str], set[str]]:
    """What a module's top level binds: (imports: name -> that one alias's import statement, names
    defined by def or class). Bodies of functions, classes and lambdas are not looked into. With
    `plain`, only imports that bind a module to its own name count."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}, set()  # it will fail when run: nothing to resolve
    imports: dict[str, str] = {}
    defined: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*" or (plain and (alias.asname or isinstance(node, ast.ImportFrom))):
                    continue  # (with `plain`, only `import x` and `import x.y`: x is module x)
                one = (
                    ast.Import([alias])
                    if isinstance(node, ast.Import)
                    else ast.ImportFrom(node.module, [alias], node.level)
                )
                imports.setdefault(alias.asname or alias.name.split(".")[0], ast.unparse(one))
        elif isinstance(node, _SCOPES):
            if not isinstance(node, ast.Lambda):
                defined.add(node.name)
        else:
            todo.extend(ast.iter_child_nodes(node))
    return imports, defined


class _Split:
    """Cut one assert's expression into parts and a check (see the module docstring)."""

    def __init__(self, clean: set[str], parts: list[str]) -> None:
        self.clean, self.parts = clean, parts

    def touches(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id not in self.clean for n in ast.walk(node))

    def clean_function(self, func: ast.expr) -> bool:
        while isinstance(func, ast.Attribute):
            func = func.value
        return isinstance(func, ast.Name) and func.id in self.clean

    def part(self, node: ast.expr) -> ast.expr:
        self.parts.append(ast.unparse(node))
        return ast.Name(PART.format(len(self.parts) - 1), ast.Load())

    def cut(self, node: ast.expr) -> ast.expr:
        if not self.touches(node):
            return node
        if isinstance(node, ast.Compare):
            return ast.Compare(self.cut(node.left), node.ops, [self.cut(c) for c in node.comparators])
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(node.op, [self.cut(v) for v in node.values])
        if isinstance(node, ast.UnaryOp):
            return ast.UnaryOp(node.op, self.cut(node.operand))
        if isinstance(node, ast.IfExp):
            return ast.IfExp(self.cut(node.test), self.cut(node.body), self.cut(node.orelse))
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = [
                ast.Starred(self.cut(e.value), ast.Load()) if isinstance(e, ast.Starred) else self.cut(e)
                for e in node.elts
            ]
            return ast.Set(elts) if isinstance(node, ast.Set) else type(node)(elts, ast.Load())
        if isinstance(node, ast.Dict):
            return ast.Dict(
                [k if k is None else self.cut(k) for k in node.keys], [self.cut(v) for v in node.values]
            )
        if isinstance(node, ast.Call) and self.clean_function(node.func):
            args = [
                ast.Starred(self.cut(a.value), ast.Load()) if isinstance(a, ast.Starred) else self.cut(a)
                for a in node.args
            ]
            keywords = [ast.keyword(k.arg, self.cut(k.value)) for k in node.keywords]
            return ast.Call(node.func, args, keywords)
        return self.part(node)


def plan(program: str, setup: str, tests: Sequence[str]) -> Plan:
    """The parts, checks and imports for `tests` (lines of Python, each with top-level asserts),
    run after `program` and `setup`. Call `validate` first: a line that does not parse here has no
    step and a check that fails."""
    prog_imports, prog_defined = _bound(program, plain=True)
    setup_imports = _bound(setup)[0]
    trees: list[ast.Module | None] = []
    test_imports: dict[str, str] = {}
    for line in tests:
        try:
            tree = ast.parse(line)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            trees.append(None)
            continue
        trees.append(tree)
        for statement in tree.body:
            if isinstance(statement, ast.Assert):
                continue
            for name, source in _bound(ast.unparse(statement))[0].items():
                test_imports.setdefault(name, source)
    # The judge's imports: the tests' and the setup's first, then the modules the program imports
    # under their own names (`import math`: with an alias or `from`, the program would choose what
    # a test's name means to the judge), never a builtin's name nor a name it defines.
    program_modules = {k: v for k, v in prog_imports.items() if k not in prog_defined | _BUILTINS}
    imports = {**program_modules, **setup_imports, **test_imports}
    steps, checks, parts = [], [], []
    used: set[str] = set()  # the names the checks read: the imports the judge needs
    for tree in trees:
        if tree is None:
            steps.append(())
            checks.append(("False",))
            continue
        line_steps: list[tuple] = []
        line_checks: list[str] = []
        for statement in tree.body:
            if not isinstance(statement, ast.Assert):
                line_steps.append(("exec", ast.unparse(statement)))
                continue
            names = {n.id for n in ast.walk(statement.test) if isinstance(n, ast.Name)}
            subjects = names - set(imports) - _BUILTINS
            # No program name but builtins the program defines: those are what the test calls.
            own = set() if subjects else {n for n in names & _BUILTINS if n in prog_defined}
            clean = (names & (set(imports) | _BUILTINS)) - own
            first = len(parts)
            check = _Split(clean, parts).cut(statement.test)
            line_steps += [("part", k, parts[k]) for k in range(first, len(parts))]
            line_checks.append(ast.unparse(check))
            used |= {n.id for n in ast.walk(check) if isinstance(n, ast.Name)}
        steps.append(tuple(line_steps))
        checks.append(tuple(line_checks) or ("True",))
    judge_imports = tuple(source for name, source in imports.items() if name in used)
    return Plan(tuple(steps), tuple(checks), judge_imports, len(parts))
