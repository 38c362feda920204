"""Readable numbers: 6.74 B parameters, 1.2 TFLOP, 3.4 GiB. Three significant digits."""

from __future__ import annotations

_DECIMAL = ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "K"))
_COUNT = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K"))
_BINARY = ((2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def _sig(x: float) -> str:
    if abs(x) >= 10**15:  # past the largest prefix: 1.23e+18, not eighteen digits
        return _sci(x)
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def _sci(x: float) -> str:
    """Three significant digits with an exponent, for ints past float's 1.8e308 too."""
    try:
        return f"{float(x):.3g}"
    except OverflowError:
        digits = str(abs(int(x)))
        return f"{'-' * (x < 0)}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


def _div(value: float, scale: float) -> float:
    try:
        return value / scale
    except OverflowError:  # an exact int count past 1.8e308
        return value // scale


def _scaled(value: float, table: tuple[tuple[int, str], ...], unit: str, sep: str = " ") -> str:
    for scale, prefix in table:
        if abs(value) >= scale:
            return f"{_sig(_div(value, scale))}{sep}{prefix}{unit}"
    return f"{_sig(value)}{sep}{unit}".rstrip()


def number(x: float) -> str:
    """Three significant digits, whole numbers from 1000 on: 0.998, 14.3, 14050."""
    return _sig(x)


def count(n: float) -> str:
    """6738415616 -> '6.74 B'."""
    return _scaled(n, _COUNT, "")


def flops(n: float, short: bool = False) -> str:
    """2.93e13 -> '29.3 TFLOP' ('29.3 T' when short)."""
    return _scaled(n, _DECIMAL, "" if short else "FLOP")


def nbytes(n: float) -> str:
    """Binary prefixes: 1073741824 -> '1 GiB'."""
    for scale, prefix in _BINARY:
        if abs(n) >= scale:
            return f"{_sig(_div(n, scale))} {prefix}"
    return f"{_sig(n)} B"


def decimal_bytes(x: float) -> str:
    """Decimal prefixes, as datasheets print them: 80e9 -> '80 GB'."""
    return _scaled(x, _DECIMAL, "B")


def bandwidth(x: float) -> str:
    """3.35e12 -> '3.35 TB/s'."""
    return f"{decimal_bytes(x)}/s"


def intensity(x: float) -> str:
    return f"{_sig(x)} FLOP/B"


def percent(part: float, whole: float) -> str:
    return f"{_div(100 * part, whole):.1f}%" if whole else "-"


def seconds(t: float) -> str:
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if abs(t) >= scale:
            return f"{_sig(t / scale)} {unit}"
    return f"{_sig(t)} s"
