"""Tests judged apart from the program: how `checks.plan` cuts asserts, how values travel
(`confine._plain` / `_rebuild`), and verdicts through the sandbox (`run_program(tests=...)`)."""

from __future__ import annotations

import collections
import decimal
import fractions
import json
import math

import pytest

from diversed.tasks import checks, confine
from diversed.tasks.execution import run_programs
from diversed.tasks.mbpp import MBPP

TIMEOUT = 5.0


def _plan(program: str, *tests: str, setup: str = "") -> checks.Plan:
    return checks.plan(program, setup, list(tests))


def test_a_call_of_the_program_is_a_part_and_the_comparison_is_the_judges() -> None:
    p = _plan(
        "def f(a, b):\n    return a + b\n", "assert f(1, 2) == 3", "assert set(f((1,), (2,))) == set((1, 2))"
    )
    assert p.steps == ((("part", 0, "f(1, 2)"),), (("part", 1, "f((1,), (2,))"),))
    assert p.checks == (("__dv_0__ == 3",), ("set(__dv_1__) == set((1, 2))",))
    assert p.imports == () and p.parts == 2


def test_builtins_and_imported_modules_stay_the_judges_whatever_the_program_binds() -> None:
    program = "set = lambda *a: 0\nimport math\nmath = None\nfrom operator import truth as sorted\n"
    program += "def f(x):\n    return x\n"
    p = _plan(program, "assert set(f(1)) == set(sorted([1]))", "assert math.isclose(f(1.0), 1.0)")
    assert p.checks == (("set(__dv_0__) == set(sorted([1]))",), ("math.isclose(__dv_1__, 1.0)",))
    assert p.imports == ("import math",)  # not the program's `sorted`
    # A module the program imports under another name, or from another module, is the program's.
    p = _plan(
        "import operator as math\nfrom operator import truth as isclose\n",
        "assert math.isclose(1, 2)",
        "assert isclose(1)",
    )
    assert p.imports == () and p.checks == (("__dv_0__",), ("__dv_1__",))


def test_a_builtin_the_program_defines_is_its_own_when_the_test_calls_nothing_else() -> None:
    # MBPP task 126 asks for a function named `sum`.
    p = _plan("def sum(a, b):\n    return a + b\n", "assert sum(10, 15) == 25", "assert sum([1]) == g(2)")
    assert p.checks == (("__dv_0__ == 25",), ("sum([1]) == __dv_1__",))
    # A name the program both imports and defines with def is its function, not the module.
    p = _plan("import heapq\ndef heapq(xs):\n    return xs\n", "assert heapq([1]) == [1]")
    assert p.checks == (("__dv_0__ == [1]",),) and p.imports == ()


def test_statements_imports_and_other_expressions() -> None:
    p = _plan(
        "def f(x):\n    return [x]\n",
        "from math import isclose\nx = f(2)\nassert isclose(x[0], 2.0) and f(1)[0] + 1 == 2",
        "assert not f(0) or [y for y in f(3)] == [3]",
        setup="root = 5",
    )
    assert p.steps[0] == (
        ("exec", "from math import isclose"),
        ("exec", "x = f(2)"),
        ("part", 0, "x[0]"),
        ("part", 1, "f(1)[0] + 1"),
    )
    assert p.checks[0] == ("isclose(__dv_0__, 2.0) and __dv_1__ == 2",)
    assert p.checks[1] == ("not __dv_2__ or __dv_3__ == [3]",)  # the comprehension runs with the program
    assert p.imports == ("from math import isclose",)


def test_tests_the_judge_cannot_check_are_refused_by_line() -> None:
    checks.validate(["assert f(1) == 2", "import math\nx = 1\nassert x"])
    with pytest.raises(checks.TestsNotJudged, match="line 2 is not Python"):
        checks.validate(["assert True", "assert ("], "problem 7: test")
    with pytest.raises(checks.TestsNotJudged, match="line 1 has an assert inside a block"):
        checks.validate(["for i in range(3):\n    assert f(i)"])
    with pytest.raises(checks.TestsNotJudged, match="problem 3: test line 1"):
        MBPP(
            [{"task_id": 3, "text": "t", "code": "", "test_list": ["if 1:\n    assert 1"]}],
            allow_code_execution=True,
        )


def _roundtrip(value: object) -> object:
    return confine._rebuild(json.loads(json.dumps(confine._plain(value, [confine._ITEMS], 0))))


def test_values_travel_as_pythons_own_types() -> None:
    Point = collections.namedtuple("Point", "x y")
    values = [
        None,
        True,
        3,
        -(2**80),
        2.5,
        "é\x00",
        b"\xff",
        bytearray(b"a"),
        1 + 2j,
        [1, (2, {3})],
        frozenset({1}),
        {"a": [1], (1, 2): None},
        collections.OrderedDict(b=1, a=2),
        collections.Counter("aab"),
        collections.defaultdict(list, a=[1]),
        collections.deque([1, 2], maxlen=3),
        fractions.Fraction(1, 3),
        decimal.Decimal("1.10"),
        range(1, 9, 2),
        int,
        str,
    ]
    for value in values:
        back = _roundtrip(value)
        assert type(back) is type(value) and back == value, value
    assert math.isnan(_roundtrip(float("nan"))) and _roundtrip(float("-inf")) == float("-inf")
    assert _roundtrip(Point(1, 2)) == (1, 2) and type(_roundtrip(Point(1, 2))) is tuple  # its base
    assert list(_roundtrip(map(str, [1, 2]))) == ["1", "2"]
    assert list(_roundtrip({1: "a"}.keys())) == [1] and list(_roundtrip({1: "a"}.items())) == [(1, "a")]

    class Mine:
        def __eq__(self, other: object) -> bool:
            return True

        def __bool__(self) -> bool:
            return False

    mine = _roundtrip(Mine())
    assert mine != mine.__class__ and not (mine == 3) and not mine and "Mine" in repr(mine)


def test_values_past_the_limits_are_not_sent() -> None:
    deep: list = []
    for _ in range(confine._TAG_DEPTH + 5):
        deep = [deep]
    with pytest.raises(confine._Unsent, match="deeper"):
        confine._plain(deep, [confine._ITEMS], 0)
    with pytest.raises(confine._Unsent):
        confine._plain(iter(int, 1), [1000], 0)  # endless
    with pytest.raises(ValueError):
        confine._rebuild(["eval", "3"])


def test_verdicts_through_the_sandbox() -> None:
    program = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "def add(a, b):\n    return a + b\n"
        "def squares(xs):\n    with ThreadPoolExecutor(4) as pool:\n"
        "        return list(pool.map(lambda x: x * x, xs))\n"
        "def boom():\n    raise KeyError('k')\n"
    )
    tests = [
        "assert add(1, 2) == 3",
        "assert add(1, 1) == 3",
        "assert squares([1, 2]) == [1, 4]",
        "assert boom() == 1",
        "assert math.isclose(add(0.1, 0.2), 0.3)",
    ]
    early = "def add(a, b):\n    return 3\nimport os\nos._exit(0)\n"
    results = run_programs(
        [(program, checks.plan(program, "import math", tests)), (early, checks.plan(early, "", tests[:1]))],
        timeout=TIMEOUT,
    )
    r = results[0]
    assert r.tests[0] == "passed" and r.tests[2] == "passed" and r.tests[4] == "passed", r
    assert r.tests[1] == "failed: add(1, 1) gave 2"
    assert r.tests[3].startswith("error: boom() raised KeyError") and not r.passed
    assert "diversed judge: test 2: failed" in r.output
    # Exiting before the tests ran is not a pass, with any exit status.
    assert not results[1].passed and "did not run to its end" in results[1].output


def test_the_setup_codes_imports_are_the_judges_in_mbpp() -> None:
    # The program patches math.isclose before the setup imports it under another name: the test's
    # `close` is still the judge's own import, so the wrong area fails.
    row = {
        "task_id": 1,
        "text": "area",
        "code": "",
        "test_list": ["assert close(area(2), 12.566, rel_tol=0.001)"],
        "test_setup_code": "from math import isclose as close",
    }
    task = MBPP([row], allow_code_execution=True, timeout=TIMEOUT)
    wrong = "import math\nmath.isclose = lambda *a, **k: True\ndef area(r):\n    return 1.0\n"
    right = "def area(r):\n    return 3.14159 * r * r\n"
    results = task.execute([row, row], [wrong, right])
    assert results[0].tests == ("failed: area(2) gave 1.0",) and results[1].passed
