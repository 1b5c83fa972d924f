"""Grid shapes as text and the divisors they are made of: "4x2" ↔ (4, 2)."""

from __future__ import annotations

from ..errors import SpgnnError


def divisors(m: int) -> list[int]:
    """The divisors of m, ascending."""
    return [d for d in range(1, m + 1) if m % d == 0]


def parse_grid(text: str) -> tuple[int, ...]:
    """"4x2" → (4, 2); raises SpgnnError for anything but positive integers joined by x."""
    try:
        shape = tuple(int(s) for s in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise SpgnnError(f"--grid must be positive integers joined by x (as 4x2 or 2x2x2), got {text!r}")
    return shape


def format_grid(shape) -> str:
    """(4, 2) → "4x2"."""
    return "x".join(map(str, shape))
