"""The DRA CEL environment: device maps, Kubernetes libraries, errors and the cache."""

from __future__ import annotations

import pytest

from dralet.allocation import cel, cel_syntax, quantity, semver

DRIVER = "gpu.example.com"


@pytest.fixture(scope="module")
def engine() -> cel.CelEngine:
    return cel.CelEngine()


@pytest.fixture(scope="module")
def gpu() -> cel.DeviceView:
    return cel.device_view(
        driver=DRIVER,
        attributes={
            "model": {"string": "A100"},
            f"{DRIVER}/index": {"int": 3},
            "mig": {"bool": False},
            "driverVersion": {"version": "1.2.3-rc.1"},
            "numa.example.com/node": {"int": 1},
        },
        capacity={"memory": {"value": "80Gi"}, "cores": {"value": "1500m"}},
    )


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f'device.driver == "{DRIVER}"', True),
        (f'device.attributes["{DRIVER}"].model == "A100"', True),
        (f'device.attributes["{DRIVER}"].index == 3', True),
        (f'device.attributes["{DRIVER}"].mig', False),
        ('device.attributes["numa.example.com"].node == 1', True),
        ('device.attributes["other.example.com"].size() == 0', True),
        ('"other.example.com" in device.attributes', False),
        (
            '"other.example.com" in device.attributes && '
            'device.attributes["other.example.com"].model == "x"',
            False,
        ),
        (f'"model" in device.attributes["{DRIVER}"]', True),
        (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) == 1', True),
        (f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("80Gi"))', False),
        (f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("81Gi"))', True),
        (f'device.capacity["{DRIVER}"].memory.asInteger() == 85899345920', True),
        (f'device.capacity["{DRIVER}"].cores.isInteger()', False),
        (f'device.capacity["{DRIVER}"].cores.add(quantity("500m")).asInteger() == 2', True),
        (f'device.capacity["{DRIVER}"].cores.sub(1).asApproximateFloat() == 0.5', True),
        ('quantity("-1").sign() == -1', True),
        ('isQuantity("1Gi") && !isQuantity("1GB")', True),
        (f'device.attributes["{DRIVER}"].driverVersion.isLessThan(semver("1.2.3"))', True),
        (f'device.attributes["{DRIVER}"].driverVersion.compareTo(semver("1.2.3-rc.0")) == 1', True),
        ('semver("1.10.0").isGreaterThan(semver("1.9.0"))', True),
        ('semver("2.3.4").major() == 2 && semver("2.3.4").patch() == 4', True),
        ('isSemver("1.0.0") && !isSemver("v1.0.0") && !isSemver("1.0")', True),
        (f'device.attributes["{DRIVER}"].model.lowerAscii() == "a100"', True),
        (f'device.attributes["{DRIVER}"].model.matches("^A[0-9]+$")', True),
        (f'device.attributes["{DRIVER}"].?missing.orValue("none") == "none"', True),
        (f'cel.bind(a, device.attributes["{DRIVER}"], a.index > 2 && a.model == "A100")', True),
        ("[1, 2, 3].isSorted() && [1, 2, 3].sum() == 6 && [4, 2].min() == 2", True),
        ("sets.contains([1, 2], [2]) && !sets.intersects([1], [2])", True),
        ('"a1b22".findAll("[0-9]+") == ["1", "22"] && "abc".find("b.") == "bc"', True),
    ],
)
def test_selector_results(
    engine: cel.CelEngine, gpu: cel.DeviceView, expression: str, *, expected: bool
) -> None:
    assert engine.compile(expression).matches(gpu) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f'device.attributes["{DRIVER}"].missing == "x"', "no such key: missing"),
        (f'device.capacity["{DRIVER}"].cores.asInteger() == 1', "cannot convert value to integer"),
        ('quantity("1GB").sign() == 1', "quantities must match the regular expression"),
    ],
)
def test_runtime_errors_are_raised_not_false(
    engine: cel.CelEngine, gpu: cel.DeviceView, expression: str, message: str
) -> None:
    with pytest.raises(cel.CelRuntimeError, match="^" + message.replace(".", r"\.")):
        engine.compile(expression).matches(gpu)


@pytest.mark.parametrize(
    ("expression", "message", "column"),
    [
        ('device.driver == "a" &&', "compilation failed: Syntax error: mismatched input", 23),
        ("1 + 1", "must evaluate to bool or the unknown type, not INT", None),
        # `device` has its declared type, as in the API server: these do not type-check.
        ("device.driver", "must evaluate to bool or the unknown type, not STRING", None),
        (
            "device.attributes[true].model == 'x'",
            "compilation failed: found no matching overload for '_[_]' applied to "
            "'(map(string, map(string, dyn)), bool)'",
            17,
        ),
        (
            "device.driver == 1",
            "compilation failed: found no matching overload for '_==_' applied to '(string, int)'",
            14,
        ),
        ("device.model == 'x'", "compilation failed: undefined field 'model'", 6),
        (
            'semver("1.0.0").compareTo(quantity("1Gi")) == 0',
            "compilation failed: found no matching overload for 'compareTo' applied to "
            "'(dralet.cel.v1.Semver, dralet.cel.v1.Quantity)'",
            25,
        ),
        ("nothing == 1", "compilation failed: undeclared reference to 'nothing'", 0),
        # Kubernetes CEL has no math extension (k8s.io/apiserver v0.37.2 environment/base.go).
        ("math.greatest(1, 5) == 5", "compilation failed: undeclared reference to 'math'", 0),
        ('device.driver == "a" &&\n  nothing', "compilation failed: undeclared reference", 26),
    ],
)
def test_compile_errors_carry_message_and_column(
    engine: cel.CelEngine, expression: str, message: str, column: int | None
) -> None:
    with pytest.raises(cel.CelCompileError) as caught:
        engine.compile(expression)
    assert caught.value.message.startswith(message)
    assert caught.value.column == column


def test_too_long_expression_is_refused(engine: cel.CelEngine) -> None:
    with pytest.raises(cel.CelCompileError, match="too long"):
        engine.compile("true || " * 2000 + "true")


def test_compiled_once_per_expression_string() -> None:
    engine = cel.CelEngine()
    assert engine.compile("true") is engine.compile("true")
    uncached = cel.CelEngine(cache_compiled=False)
    assert uncached.compile("true") is not uncached.compile("true")


def test_unconvertible_device_fails_every_evaluation(engine: cel.CelEngine) -> None:
    view = cel.device_view(driver=DRIVER, attributes={"bad": {"version": "v1"}}, capacity={})
    assert view.conversion_error is not None
    with pytest.raises(cel.CelRuntimeError, match="not a semantic version"):
        engine.compile("true").matches(view)
    empty = cel.device_view(driver=DRIVER, attributes={"none": {}}, capacity={})
    with pytest.raises(cel.CelRuntimeError, match="attribute none: unsupported attribute value"):
        engine.compile("true").matches(empty)


def test_first_false_clause(engine: cel.CelEngine, gpu: cel.DeviceView) -> None:
    selector = engine.compile(
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].index > 5 '
        f'&& device.attributes["{DRIVER}"].model == "A100"'
    )
    assert selector.first_false_clause(gpu) == f'device.attributes["{DRIVER}"].index > 5'
    assert engine.compile('device.driver == "x" || false').first_false_clause(gpu) is None


@pytest.mark.parametrize(
    ("expression", "clauses"),
    [
        ("a && b && c", ("a", "b", "c")),
        ("a && (b || c)", ("a", "(b || c)")),
        ("a && b || c", ("a && b || c",)),
        ('a == "x && y" && b', ('a == "x && y"', "b")),
        ("a ? b && c : d", ("a ? b && c : d",)),
        ("f(a && b) && [x && y][0]", ("f(a && b)", "[x && y][0]")),
    ],
)
def test_split_conjunction(expression: str, clauses: tuple[str, ...]) -> None:
    assert cel_syntax.split_conjunction(expression) == clauses


@pytest.mark.parametrize(
    ("expression", "rewritten"),
    [
        ('device.attributes["d"].m', 'device.attributes[?("d")].orValue({}).m'),
        ("device.capacity[x[1]].m", "device.capacity[?(x[1])].orValue({}).m"),
        ('"device.attributes[" + a', '"device.attributes[" + a'),
        ("mydevice.attributes[1]", "mydevice.attributes[1]"),
    ],
)
def test_default_missing_domains(expression: str, rewritten: str) -> None:
    assert cel_syntax.default_missing_domains(expression) == rewritten


@pytest.mark.parametrize(
    ("text", "value"),
    [("1Gi", 2**30), ("1500m", 1.5), ("1e3", 1000), ("2k", 2000), (".5", 0.5), ("-3", -3)],
)
def test_quantity_values(text: str, value: float) -> None:
    assert quantity.parse_quantity(text) == value


def test_quantity_format_round_trips() -> None:
    for text in ("1.5", "-0.001", "3", "0.000000001"):
        assert quantity.format_quantity(quantity.parse_quantity(text)) == text


@pytest.mark.parametrize(
    ("left", "right", "order"),
    [
        ("1.0.0", "1.0.0+build", 0),
        ("1.0.0-alpha", "1.0.0", -1),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta", -1),
        ("1.0.0-rc.10", "1.0.0-rc.2", 1),
        ("1.0.0-alpha", "1.0.0-alpha.1", -1),
        ("2.0.0", "10.0.0", -1),
    ],
)
def test_semver_precedence(left: str, right: str, order: int) -> None:
    assert semver.compare_versions(semver.parse_version(left), semver.parse_version(right)) == order
