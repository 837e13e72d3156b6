"""The shared number formatters (analysis.fmt): the behaviours the reports were written with,
including where two former copies differ (an int, an infinity), so that a merge cannot blur them."""
import math

from analysis import fmt


def test_num_prints_floats_to_digits_and_ints_in_full():
    assert fmt.num(0.123456) == "0.1235"
    assert fmt.num(0.123456, 2) == "0.12"
    assert fmt.num(123456) == "123456"
    assert fmt.num("jsq") == "jsq"
    assert fmt.num(None) == fmt.num(math.nan) == fmt.num(math.inf) == "-"


def test_num_g_formats_every_number():
    assert fmt.num_significant(123456) == "1.235e+05"
    assert fmt.num_significant(0.5, 2) == "0.5"
    assert fmt.num_significant(None) == fmt.num_significant(-math.inf) == "-"


def test_num_nan_keeps_infinities():
    assert fmt.num_nan(math.inf) == "inf"
    assert fmt.num_nan(math.nan) == fmt.num_nan(None) == "-"
    assert fmt.num_nan(123456) == "1.235e+05"


def test_value_short_pct():
    assert fmt.value(0.123456) == "0.1235" and fmt.value(None) == "None" and fmt.value(7) == "7"
    assert fmt.short(0.123456) == "0.123456" and fmt.short(3) == "3"
    assert fmt.pct(0.01234) == "+1.23%" and fmt.pct(0.01234, sign=False) == "1.2%" and fmt.pct(None) == "-"


def test_powers_of_ten():
    assert fmt.sci(1e6) == "10^6" and fmt.sci(10**6.5) == "10^6.5"
    assert fmt.pow10(300.0) == "10^300" and fmt.pow10(2.25) == "10^2.2"
