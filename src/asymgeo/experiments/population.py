r"""Selectors judged where the truth is known: the two-view model's exact population risk (issue #37).

A held-out fold is as noisy as the rules it judges (``heldout_noise``); in the paper's two-view
model (Appendix F, :mod:`asymgeo.estimators.simulation`) the population relevance moment
:math:`C` is known exactly, so each cell is judged without a test sample:

.. math:: R_g = \|\mathcal P_{g,r}(\widehat C) - C\|_F^2 / \|C\|_F^2,\qquad g \in \{s, d\},

the population risk of each family's closed form fitted on the cell's training triples
(:math:`\widehat C = X^\top (Y^+ - Y^-)/n`).  The winner is the family with the lower risk (ties
to shared); a rule's regret is :math:`R_{\hat g} - \min(R_s, R_d)`.

One cell = (variant, angle, n, rank, seed_index).  Variants: ``paper`` (RQ1's model, the same
loadings and training triples as RQ1 for the same master seed), ``anisotropic_noise`` (a decaying
query-noise spectrum; the moment is unchanged) and ``mean_offset`` (a common mean carrying about
``mean_share`` of the moment).  Every rule of the selector registry that decides from triples
alone runs on the cell's triples (``rules`` in the config to choose), with the seed
``cell_seed(master, 4, seed_index, n)``.

The summary, per variant: each rule's accuracy and mean regret, its regret relative to CARS's
with a 95% bootstrap interval over seeds (cells resampled by seed index, the ratio of mean
regrets recomputed), accuracy per rank, and at each n >= 256 Spearman's correlation of the rule's
score with the population risk difference :math:`R_s - R_d` over the cells of that size.
``asymgeo reproduce population [--quick]``; page: ``python -m asymgeo.experiments.population
results/population docs/population.md``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..estimators.simulation import two_view_model
from ..kernels.geometry import dual_truncate, shared_truncate
from ..selectors.catalogue import REFERENCE_RULE
from ..selectors.registry import RuleNotApplicable, SelectionContext, get_rule, rule_names
from .runner import cell_seed

__all__ = ["VARIANTS", "ORACLE", "cell", "population_risks", "expected_risk_oracle", "summarise", "format_summary",
           "main"]

#: variant -> (query_noise_decay, mean_share) of :func:`~asymgeo.estimators.simulation.two_view_model`;
#: the share is the config's ``mean_share`` for ``mean_offset``.
VARIANTS: dict[str, tuple[float | None, float | None]] = {"paper": (0.0, 0.0), "anisotropic_noise": (None, 0.0),
                                                   "mean_offset": (0.0, None)}
_FIXED = ("shared", "dual")


def population_risks(C_hat: np.ndarray, C: np.ndarray, rank: int) -> tuple[float, float]:
    r"""``(R_s, R_d)``: :math:`\|\mathcal P_{g,r}(\widehat C) - C\|_F^2 / \|C\|_F^2` of both truncations."""
    norm = float(np.sum(C * C))
    if norm == 0.0:
        raise ValueError("C: the population moment is zero; the normalised risk is undefined")
    out = []
    for trunc in (shared_truncate, dual_truncate):
        R = trunc(C_hat, rank) - C
        out.append(float(np.sum(R * R)) / norm)
    return out[0], out[1]


def _model(config: dict[str, Any]):
    variant = str(config["variant"])
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")
    decay, share = VARIANTS[variant]
    return two_view_model(p=int(config["p"]), latent_rank=int(config["latent_rank"]),
                          noise_sd=float(config["noise_sd"]), angle=float(config["angle"]),
                          seed=cell_seed(int(config["master_seed"]), 0),
                          query_noise_decay=float(config.get("noise_decay", 3.0)) if decay is None else decay,
                          mean_share=float(config.get("mean_share", 0.46)) if share is None else share)


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One cell.  Config keys: ``variant, angle, n, rank, seed_index, p, latent_rank, noise_sd,
    master_seed, cars_splits, cv_folds`` and optionally ``noise_decay``, ``mean_share`` and
    ``rules`` (comma-separated registry names; default every rule that decides from triples).
    Returns both population risks, the mean term's share of the training moment and, per rule,
    ``<rule>_choice``, ``<rule>_score`` (and ``<rule>_se`` with a standard error)."""
    master = int(config["master_seed"])
    n, rank, s = int(config["n"]), int(config["rank"]), int(config["seed_index"])
    model = _model(config)
    tr = model.sample_triples(n, cell_seed(master, 2, s, n))
    X = np.asarray(tr.X, dtype=np.float64)
    D = np.asarray(tr.Y_pos, dtype=np.float64) - np.asarray(tr.Y_neg, dtype=np.float64)
    C = model.population_moment()
    C_hat = X.T @ D / n
    risk_s, risk_d = population_risks(C_hat, C, rank)
    mean_part = np.outer(X.mean(axis=0), D.mean(axis=0))
    out: dict[str, Any] = {"risk_shared": risk_s, "risk_dual": risk_d,
                           "mean_share_train": float(np.sum(mean_part ** 2) / np.sum(C_hat ** 2))}
    names = config.get("rules") or ",".join(rule_names(triples_only=True))
    context = SelectionContext(n_splits=int(config.get("cars_splits", 20)), cv_folds=int(config.get("cv_folds", 5)),
                               n_jobs=1)
    seed = cell_seed(master, 4, s, n)
    for name in [v.strip() for v in str(names).split(",") if v.strip()]:
        rule = get_rule(name, argument="rules")
        try:
            out.update(rule.decide(X, D, rank, seed=seed, context=context).cell())
        except RuleNotApplicable:
            out.update({f"{rule.name}_choice": "shared", f"{rule.name}_score": float("nan")})
    return out


def _rules_in(table: Any) -> list[str]:
    """Rules whose choice every cell carries (a rule registered after some cells ran is left out:
    cells resume by config, so rerun into a fresh results folder to add it), CARS first."""
    named = [c[: -len("_choice")] for c in table.columns
             if c.endswith("_choice") and table[c].notna().all()]
    return sorted(named, key=lambda g: g != REFERENCE_RULE)


def _regrets(g: Any, rules: list[str], oracle: np.ndarray) -> dict[str, np.ndarray]:
    rs, rd = g["risk_shared"].to_numpy(float), g["risk_dual"].to_numpy(float)
    best = np.minimum(rs, rd)
    out = {f: (rs if f == "shared" else rd) - best for f in _FIXED}
    for rule in rules:
        out[rule] = np.where(g[f"{rule}_choice"].to_numpy(str) == "dual", rd, rs) - best
    out[ORACLE] = np.where(oracle == "dual", rd, rs) - best
    return out


#: the reference row: a rule that knows the design's expected risk difference but not the cell's draw
ORACLE = "oracle_expected"
#: the columns that name a design (every cell of a design differs only in ``seed_index``)
_DESIGN = ("angle", "n", "rank")


def expected_risk_oracle(g: Any) -> np.ndarray:
    r"""Each cell's choice by the *other* seeds of its design: dual iff the mean of
    :math:`R_s - R_d` over the cells with the same angle, n and rank but another seed is positive
    (a design with one seed: shared).

    No rule that estimates the expected risk difference from the cell's triples can do better
    on average than knowing it; what is left is the draw's own noise, which no expected-risk
    rule can see.  Leaving the cell's own seed out keeps its realised winner out of its choice.
    """
    diff = (g["risk_shared"] - g["risk_dual"]).to_numpy(float)
    keys = [c for c in _DESIGN if c in g.columns]
    design = g.groupby(keys, sort=False).ngroup().to_numpy() if keys else np.zeros(len(g), dtype=int)
    total = np.bincount(design, weights=diff)
    count = np.bincount(design)
    others = count[design] - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        loo = np.where(others > 0, (total[design] - diff) / np.maximum(others, 1), 0.0)
    return np.where(loo > 0, "dual", "shared")


def _winner(g: Any) -> np.ndarray:
    return np.where(g["risk_dual"].to_numpy(float) < g["risk_shared"].to_numpy(float), "dual", "shared")


def _ratio_interval(regret: np.ndarray, reference: np.ndarray, seeds: np.ndarray, *, n_boot: int,
                    rng: np.random.Generator) -> tuple[float, float, float]:
    """Mean regret over the reference's, and a 95% percentile interval resampling seed indices."""
    ref = float(reference.mean())
    ratio = float(regret.mean()) / ref if ref > 0 else float("nan")
    groups = [np.flatnonzero(seeds == u) for u in np.unique(seeds)]
    draws = []
    for _ in range(n_boot):
        idx = np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))])
        r = float(reference[idx].mean())
        if r > 0:
            draws.append(float(regret[idx].mean()) / r)
    if not draws:
        return ratio, float("nan"), float("nan")
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return ratio, float(lo), float(hi)


def summarise(table: Any, *, n_boot: int = 1000, seed: int = 20261203, min_size: int = 256) -> dict[str, Any]:
    """Per variant: every rule's accuracy, regret, regret / CARS's regret with its seed-bootstrap
    95% interval, accuracy per rank, and within-size Spearman of its score with ``R_s - R_d``."""
    from scipy import stats

    rules = _rules_in(table)
    out: dict[str, Any] = {"cells": len(table), "rules": rules, "variants": {}}
    for variant, g in table.groupby("variant", sort=False):
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        oracle = expected_risk_oracle(g)
        regret = _regrets(g, rules, oracle)
        win = _winner(g)
        seeds = g["seed_index"].to_numpy(int)
        ref = regret.get(REFERENCE_RULE)
        rows = {}
        for rule in [*rules, ORACLE, *_FIXED]:
            picks = (np.full(len(g), rule) if rule in _FIXED else oracle if rule == ORACLE
                     else g[f"{rule}_choice"].to_numpy(str))
            ratio = (_ratio_interval(regret[rule], ref, seeds, n_boot=n_boot, rng=rng) if ref is not None
                     else (float("nan"),) * 3)
            by_rank = {int(r): float(np.mean(picks[g["rank"].to_numpy(int) == r] == win[g["rank"].to_numpy(int) == r]))
                       for r in sorted(g["rank"].unique())}
            spearman = {}
            if rule not in _FIXED and rule != ORACLE:
                for m, part in g[g["n"] >= min_size].groupby("n", sort=True):
                    score = part[f"{rule}_score"].to_numpy(float)
                    diff = (part["risk_shared"] - part["risk_dual"]).to_numpy(float)
                    ok = np.isfinite(score)
                    flat = ok.sum() < 3 or np.unique(score[ok]).size < 2 or np.unique(diff[ok]).size < 2
                    spearman[int(m)] = (float("nan") if flat
                                        else float(stats.spearmanr(score[ok], diff[ok]).statistic))
            rows[rule] = {"accuracy": float(np.mean(picks == win)), "regret": float(regret[rule].mean()),
                          "ratio": ratio[0], "ratio_low": ratio[1], "ratio_high": ratio[2],
                          "accuracy_by_rank": by_rank, "spearman": spearman}
        out["variants"][str(variant)] = {"cells": len(g), "seeds": int(np.unique(seeds).size),
                                         "dual_wins": float(np.mean(win == "dual")),
                                         "mean_share_train": float(g["mean_share_train"].mean()), "rules": rows}
    return out


def _fmt(x: float, digits: int = 2) -> str:
    return "–" if not np.isfinite(x) else f"{x:.{digits}f}"


def format_summary(s: dict[str, Any], command: str) -> str:
    """The page: per variant, every rule against the paper's CARS on the population risk."""
    from ._markdown import md_table

    lines = ["# Selectors judged where the truth is known", "",
             f"_Made by `{command}`; {s['cells']} cells (variant x angle x n x rank x seed)._", "",
             "The paper's two-view model (Appendix F) near the zero contour, where the population moment C is "
             "known exactly. Truth: the family whose closed form on the cell's training triples has the lower "
             "population risk R_g = ||P_g(C_hat) - C||_F^2 / ||C||_F^2 (no test sample, so no target noise). "
             "Regret: R of the chosen family minus the lower one. *x CARS*: mean regret over CARS's, with a 95% "
             "percentile interval from resampling seeds (1,000 draws). Spearman: the rule's score against "
             "R_s - R_d over the cells of each training size n >= 256 (positive: it orders the cells the right "
             "way). Variants: `paper` (RQ1's model), `anisotropic_noise` (a decaying query-noise spectrum; the "
             "moment is unchanged), `mean_offset` (a common mean offset carrying about half of the moment, like "
             "the real encoders' third). `oracle_expected` is a reference, not a rule: it knows each design's "
             "expected risk difference (the mean of R_s - R_d over the other seeds of the same angle, n and rank) "
             "but not the cell's own draw, so its regret is the floor for any rule that estimates the expected "
             "risk from the triples. Built by `asymgeo.experiments.population`.", ""]
    for variant, v in s["variants"].items():
        rows = []
        ranks = sorted({r for rec in v["rules"].values() for r in rec["accuracy_by_rank"]})
        sizes = sorted({m for rec in v["rules"].values() for m in rec["spearman"]})
        for rule, r in v["rules"].items():
            interval = (f"{_fmt(r['ratio'])} [{_fmt(r['ratio_low'])}, {_fmt(r['ratio_high'])}]"
                        if rule != REFERENCE_RULE else "1")
            rows.append([f"`{rule}`", f"{100 * r['accuracy']:.1f}%", f"{r['regret']:.4g}", interval,
                         *(f"{100 * r['accuracy_by_rank'][k]:.0f}%" for k in ranks),
                         *(_fmt(r["spearman"].get(m, float("nan"))) for m in sizes)])
        lines += [f"## `{variant}`: {v['cells']} cells, {v['seeds']} seeds; dual wins {100 * v['dual_wins']:.0f}% "
                  f"of cells; mean term {100 * v['mean_share_train']:.0f}% of the training moment", "",
                  md_table(["rule", "accuracy", "mean regret", "x CARS [95%]", *(f"acc. r={k}" for k in ranks),
                            *(f"Spearman n={m}" for m in sizes)], rows), ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - thin wrapper
    """``python -m asymgeo.experiments.population RESULTS_DIR OUT.md``: write the page from a run."""
    from .store import write_page

    return write_page("population", sys.argv[1:] if argv is None else argv,
                      lambda table, _res, _out, cmd: format_summary(summarise(table), cmd))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
