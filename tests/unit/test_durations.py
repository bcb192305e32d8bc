import pytest

from taskherd.policy.durations import DurationError, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("2d", 172800.0),
        ("1d2h3m4s", 93784.0),
        ("1.5h", 5400.0),
        ("0s", 0.0),
        ("45", 45.0),
        ("2.5", 2.5),
        (" 10M ", 600.0),
        (30, 30.0),
        (0.25, 0.25),
    ],
)
def test_reads_people_spellings(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "ten minutes",
        "10x",
        "-5",
        "-5s",
        "1m30h",
        "1h1h",
        "h",
        "10 m s",
        True,
        None,
        [10],
        -1,
        float("inf"),
        float("nan"),
    ],
)
def test_rejects_with_field_value_and_accepted_forms(bad):
    with pytest.raises(DurationError) as err:
        parse_duration(bad, field="roles.coder.timeout")
    message = str(err.value)
    assert message.startswith("roles.coder.timeout: ")
    assert repr(bad) in message
    assert "'1h30m'" in message


def test_duration_error_is_a_value_error():
    assert issubclass(DurationError, ValueError)


def test_units_out_of_order_say_why():
    with pytest.raises(DurationError, match="largest first"):
        parse_duration("30m1h")
