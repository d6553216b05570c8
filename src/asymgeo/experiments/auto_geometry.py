"""Does ``fit --geometry auto`` pick the family that wins on test?  CARS against the validation rule.

One sweep cell = (dataset, encoder, rank, seed_index): :func:`asymgeo.adapters.workflow.fit_adapter`
with ``geometry="auto"`` trains both families on the same paired batches; the cell records
each family's validation NDCG@10 (on the queries that selected the checkpoints) and test
NDCG@10, CARS's decision on the training triples, and the validation rule's decision
(:func:`~asymgeo.adapters.workflow.choose_family`).  The summary counts how often each rule
(CARS, validation, always shared, always dual) picks the test winner and its mean NDCG@10
loss to the better family.  ``asymgeo reproduce auto_geometry [--quick]``; page:
``python -m asymgeo.experiments.auto_geometry results/auto_geometry docs/auto_geometry.md``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["cell", "summarise", "format_summary", "RULES"]

RULES = ("cars", "validation", "shared", "dual")


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One cell.  Config keys: ``dataset, encoder, rank, seed_index, epochs, learning_rates,
    selection, anchor, data_dir, cache_dir``."""
    import time

    import torch

    from ..adapters.workflow import fit_adapter, load_adaptation_data, ndcg_at_10

    torch.set_num_threads(1)
    seed = int(config["seed_index"])
    lrs = tuple(float(v) for v in str(config.get("learning_rates", "3e-4,1e-3,3e-3")).split(","))
    t0 = time.perf_counter()
    rep = fit_adapter(config["dataset"], config["encoder"], geometry="auto", rank=int(config["rank"]), seed=seed,
                      learning_rates=lrs, epochs=int(config["epochs"]), selection=str(config["selection"]),
                      anchor=float(config["anchor"]), report=False, data_dir=config["data_dir"],
                      cache_dir=config["cache_dir"], guard_folds=1)  # the family fits alone are read
    seconds = time.perf_counter() - t0
    d = load_adaptation_data(config["dataset"], config["encoder"], data_dir=config["data_dir"],
                             cache_dir=config["cache_dir"])
    test = {fam: ndcg_at_10(d.T, d.test, d.corpus, ad.operator_) for fam, ad in rep.candidates.items()}
    a = rep.metrics["auto"]
    return {"test_shared": test["shared"], "test_dual": test["dual"],
            "val_shared": a["validation_shared"], "val_dual": a["validation_dual"], "val_diff": a["diff"],
            "val_se": a["standard_error"], "rule": a["rule"], "choice_validation": a["choice"],
            "choice_cars": a["cars_choice"], "cars_score": a["cars_score"],
            "cars_se": a["cars_standard_error"], "seconds_auto": seconds,
            "test_frozen": rep.metrics["frozen"]["test_ndcg@10"]}


def rule_picks(table: Any) -> dict[str, np.ndarray]:
    """Each rule's family per cell, recomputed from the recorded validation difference, its
    standard error and CARS (so both tie-breaks of :func:`~asymgeo.adapters.workflow.choose_family`
    are scored on the same cells)."""
    from ..selectors.registry import Decision
    from ..selectors.validation import validation_choice

    diff, se = table["val_diff"].to_numpy(float), table["val_se"].to_numpy(float)
    cars = table["choice_cars"].to_numpy(str)
    cars_decisions = [Decision(rule="cars", choice=str(c), score=float(sc), standard_error=float(e))
                      for c, sc, e in zip(cars, table["cars_score"].to_numpy(float), table["cars_se"].to_numpy(float))]
    by_validation = [validation_choice(d, e)[0] for d, e in zip(diff, se)]
    cars_ties = [validation_choice(d, e, "cars", c)[0] for d, e, c in zip(diff, se, cars_decisions)]
    return {"cars": cars,
            "validation": np.array(by_validation, dtype=object).astype(str),
            "validation, CARS breaks ties": np.array(cars_ties, dtype=object).astype(str),
            "shared": np.full(len(table), "shared"), "dual": np.full(len(table), "dual")}


def summarise(table: Any) -> dict[str, Any]:
    """Per rule: how often it picks the test winner, and its mean test NDCG@10 loss to the better family."""
    best = np.maximum(table["test_shared"].to_numpy(float), table["test_dual"].to_numpy(float))
    winner = np.where(table["test_dual"].to_numpy(float) > table["test_shared"].to_numpy(float), "dual", "shared")
    picks = rule_picks(table)
    out: dict[str, Any] = {"cells": len(table), "rules": {}}
    for rule, pick in picks.items():
        got = np.where(pick == "dual", table["test_dual"].to_numpy(float), table["test_shared"].to_numpy(float))
        out["rules"][rule] = {"accuracy": float(np.mean(pick == winner)), "mean_loss": float(np.mean(best - got)),
                              "max_loss": float(np.max(best - got))}
    groups = []
    for key, part in table.groupby(["dataset", "encoder", "rank"], sort=True):
        b = np.maximum(part["test_shared"].to_numpy(float), part["test_dual"].to_numpy(float))
        row = {"dataset": key[0], "encoder": key[1], "rank": int(key[2]), "seeds": len(part),
               "test_shared": float(part["test_shared"].mean()), "test_dual": float(part["test_dual"].mean())}
        part_picks = rule_picks(part)
        for rule in ("cars", "validation"):
            col = part_picks[rule]
            got = np.where(col == "dual", part["test_dual"].to_numpy(float), part["test_shared"].to_numpy(float))
            row[f"{rule}_picks"] = ", ".join(col)
            row[f"{rule}_loss"] = float(np.mean(b - got))
        groups.append(row)
    out["groups"] = groups
    out["seconds_auto"] = float(table["seconds_auto"].mean())
    return out


def format_summary(s: dict[str, Any], command: str, history: str | None = None) -> str:
    """The page: rule accuracy and loss, then every group."""
    from ._markdown import md_table

    lines = ["# `fit --geometry auto`: which family wins on test", "",
             f"_Made by `{command}`; {s['cells']} cells (dataset x encoder x rank x seed)._", "",
             "A rule is right when it picks the family with the higher test NDCG@10; its loss is the test NDCG@10 "
             "it gives up to the better family (0 when right).", "",
             md_table(["rule", "picks the test winner", "mean loss", "largest loss"],
                      [[r, f"{100 * v['accuracy']:.0f}%", f"{v['mean_loss']:.4f}", f"{v['max_loss']:.4f}"]
                       for r, v in s["rules"].items()]), "",
             f"Mean wall time of one `auto` fit (both families): {s['seconds_auto']:.1f} s.", "",
             HISTORY if history is None else history, "",
             md_table(["dataset", "encoder", "rank", "test shared", "test dual", "CARS picks", "CARS loss",
                       "validation picks", "validation loss"],
                      [[g["dataset"], g["encoder"], g["rank"], f"{g['test_shared']:.4f}", f"{g['test_dual']:.4f}",
                        g["cars_picks"], f"{g['cars_loss']:.4f}", g["validation_picks"], f"{g['validation_loss']:.4f}"]
                       for g in s["groups"]])]
    return "\n".join(lines) + "\n"


#: The confirmation run's paragraph (fresh training seeds, the rule fixed beforehand).
CONFIRM = (
    "A confirmation run on fresh training seeds 3 to 5 (`auto_geometry_confirm`), made after the one-standard-"
    "error tie-break was fixed on seeds 0 to 2: the same datasets, encoders, ranks and test queries, new "
    "training and CARS randomness. It is independent of the rule's choice in its training seeds only (the test "
    "queries are the same 300 SciFact and 323 NFCorpus queries)."
)

#: How the rule came to be (printed on the page; see docs/adapters.md).
HISTORY = (
    "The first version of `auto` broke a tie (|dual - shared| within one standard error on validation) with "
    "CARS's decision; on these 36 cells that rule picked the test winner in 67% of cells with a mean loss of "
    "0.0038 (row *validation, CARS breaks ties*). `auto` now breaks a tie with shared (the one-standard-error "
    "rule, the family with fewer free directions), as the issue's wording \"preferring shared\" and the usual "
    "model-selection practice suggest. That change was made **after** seeing these test figures, so the new "
    "rule's row is not an unbiased estimate: judge it on new data."
)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - thin wrapper
    from .store import write_page

    return write_page("auto_geometry", sys.argv[1:] if argv is None else argv,
                      lambda table, res, _out, cmd: format_summary(
                          summarise(table), cmd, CONFIRM if res.name.endswith("confirm") else None))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
