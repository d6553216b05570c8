"""The built-in selectors' names and modules: the one line a new rule adds (no imports, so the
command line can list the names without loading numpy)."""

from __future__ import annotations

__all__ = ["BUILTIN_RULES", "ALIASES", "DEFAULT_SELECTOR", "REFERENCE_RULE", "LEGACY_SURE_RULES", "LEGACY_CV_RULE"]

#: name -> module defining ``RULE`` (imported on first lookup; order = listing order).
BUILTIN_RULES: dict[str, str] = {
    "cars": "asymgeo.selectors.cars",
    "sure": "asymgeo.selectors.sure",
    "anisotropic": "asymgeo.selectors.anisotropic",
    "cv": "asymgeo.selectors.cross_validation",
    "cv0": "asymgeo.selectors.cross_validation_sign",
    "cvx": "asymgeo.selectors.extrapolated_cv",
    "cvp": "asymgeo.selectors.pooled_cv",
    "bsure": "asymgeo.selectors.bootstrap_sure",
    "pairwise": "asymgeo.selectors.pairwise",
    "ranking": "asymgeo.selectors.ranking",
    "validation": "asymgeo.selectors.validation",
}

#: Names accepted for one release, each pointing to its registered name.
ALIASES: dict[str, str] = {"aniso": "anisotropic"}

#: The rule ``asymgeo select`` and :class:`~asymgeo.estimators.projections.GeometrySelector` use by default.
DEFAULT_SELECTOR = "cars"

#: The paper's selector (eq. 7), computed and reported beside every other rule (Table 1's headline).
REFERENCE_RULE = "cars"

#: ``validate_selection(sure=False)`` (0.2.0's keyword) leaves these out; ``cv_folds >= 2`` adds
#: :data:`LEGACY_CV_RULE`.
LEGACY_SURE_RULES: tuple[str, ...] = ("sure", "anisotropic")
LEGACY_CV_RULE = "cv"
