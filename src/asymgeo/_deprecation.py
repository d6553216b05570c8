"""Deprecation helpers: renamed keyword arguments and methods, kept one release with a warning.

scikit-learn's style: the old name still works for one release and emits a
:class:`DeprecationWarning` naming the new one and the release that removes it.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["REMOVED_IN", "renamed_argument", "warn_deprecated"]

#: The release that removes what 0.2 deprecates.
REMOVED_IN = "0.3"


def warn_deprecated(message: str, stacklevel: int = 3) -> None:
    """Emit a :class:`DeprecationWarning` ``"<message> (deprecated in 0.2, removed in 0.3)"``."""
    warnings.warn(f"{message} (deprecated in 0.2, removed in {REMOVED_IN})", DeprecationWarning,
                  stacklevel=stacklevel)


def renamed_argument(owner: str, old: str, new: str, old_value: Any, new_value: Any, default: Any,
                     *, stacklevel: int = 4) -> Any:
    """Resolve a keyword renamed from ``old`` to ``new``.

    ``old_value`` is ``None`` when the caller did not pass the old name (the default of the
    deprecated keyword).  Passing the old name warns and returns its value; passing both
    (the new one not at its ``default``) raises ``TypeError`` naming both.
    """
    if old_value is None:
        return new_value
    if new_value != default:
        raise TypeError(f"{owner}: got both {old}= (deprecated) and {new}=; pass only {new}=")
    warn_deprecated(f"{owner}: {old}= is renamed to {new}=", stacklevel=stacklevel)
    return old_value
