"""Markdown helpers of the evidence report sections (RQ4, Table 1, RQ2 on real data)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["interval_holds", "md_table", "plural", "verdict"]

#: The verdict of a claim whose interval contains zero (issue 23: never "yes" or "no").
INCONCLUSIVE = "inconclusive"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A pipe table; floats with 4 significant digits."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(ok: bool | str | None) -> str:
    """``**yes**`` / ``**no**`` / ``**inconclusive**`` / ``n/a``."""
    if isinstance(ok, str):
        if ok != INCONCLUSIVE:
            raise ValueError(f"ok: expected True, False, None or {INCONCLUSIVE!r}, got {ok!r}")
        return f"**{INCONCLUSIVE}**"
    return {True: "**yes**", False: "**no**", None: "n/a"}[ok]


def interval_holds(low: float, high: float) -> bool | str | None:
    """The verdict of "the quantity is positive" from its 95% interval ``[low, high]``:
    True when ``low > 0``, False when ``high < 0``, ``"inconclusive"`` when it contains
    zero, None when the interval is not finite (too few replicates to form one)."""
    import math

    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    if low > 0:
        return True
    if high < 0:
        return False
    return INCONCLUSIVE


def plural(count: int, word: str, many: str | None = None) -> str:
    """``"1 encoder"``, ``"2 encoders"`` (``many`` for an irregular plural)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
