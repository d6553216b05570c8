"""The tools a user would pick instead, on the same split: asymgeo's default against its peers (issue #36).

One sweep cell = (dataset, encoder, method, seed_index) on the adaptation split of
:func:`asymgeo.adapters.workflow.load_adaptation_data`; every method is scored by exact
full-corpus search on the same test queries, and the cell keeps each query's NDCG@10 so the
summary pairs any two methods query by query.  Methods:

* ``default``: ``asymgeo fit`` as shipped (``--geometry auto --memory auto --candidates joint``):
  the family chosen on document-disjoint validation and the query-only map (checkpoint chosen
  on the document-disjoint and on all validation queries) each carry the gated document memory
  (:mod:`asymgeo.adapters.memory`), and the whole with the best validation NDCG@10 is kept
  among those whose gain over frozen on document-disjoint queries is at least half a paired
  standard error (``--guard-margin 0.5``), read on five cross-fitted blocks (``--guard-folds 5``:
  the validation queries and four blocks of training queries, each scored by the candidates
  refitted without it);
* ``family_memory``: the family alone carries the memory (``--candidates family``, the 0.3 default);
* ``map_only``: the family without the memory (``--memory none``, the 0.2 default);
* ``paper``: the paper's protocol, dual, every validation query selects (``--selection all``);
* ``query_only``: the LlamaIndex / ERA linear adapter (``--geometry query``: a p x p map on
  queries from the identity, documents untouched), every validation query selects;
* ``prior``: frozen + ``beta`` for the training positives, ``beta`` on validation;
* ``prior_all``: the same ``beta``, then the validation positives boosted too (what the
  memory's keys hold, so the two remember the same labels).

The full fine-tune of the encoder (:mod:`asymgeo.adapters.finetune`) is costly (minutes of
training and a re-encoding of the corpus), so its result is read from
``docs/results/peers/finetune_<dataset>_<encoder>.json`` when that file exists.

"Seen" documents are the positives of the training *and* validation queries (what the
deployed memory holds); the page also gives the unseen-document subset by training queries
alone.  ``asymgeo reproduce peers [--quick]``; page:
``python -m asymgeo.experiments.peers results/peers docs/peers.md``.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["METHODS", "LABELS", "cell", "summarise", "format_summary", "plot_frontier"]

METHODS = ("default", "family_memory", "map_only", "paper", "query_only", "prior", "prior_all")
LABELS = {"default": "asymgeo default (joint map + memory)",
          "family_memory": "asymgeo family + memory (0.3 default)", "map_only": "asymgeo map only (0.2 default)",
          "paper": "paper protocol (dual, all validation)", "query_only": "query-only linear adapter",
          "prior": "document prior (train positives)", "prior_all": "document prior (train + validation positives)",
          "finetune": "full fine-tune (MNRL)", "frozen": "frozen"}
#: one colour per method in the frontier figure (the default's is the only red)
COLOURS = {"default": "C3", "family_memory": "C7", "map_only": "C0", "paper": "C1", "query_only": "C2", "prior": "C4",
           "prior_all": "C5",
           "finetune": "C6"}
#: methods that train and so take a seed
TRAINED = ("default", "family_memory", "map_only", "paper", "query_only")


@functools.lru_cache(maxsize=2)
def _load(dataset: str, encoder: str, data_dir: str, cache_dir: str) -> Any:
    from ..adapters.workflow import load_adaptation_data

    return load_adaptation_data(dataset, encoder, data_dir=data_dir, cache_dir=cache_dir)


def _fmt_values(v: np.ndarray) -> str:
    return ",".join(f"{x:.6f}" for x in np.asarray(v, dtype=np.float64))


def _parse_values(s: str) -> np.ndarray:
    return np.array([float(x) for x in str(s).split(",")], dtype=np.float64) if s else np.zeros(0)


def _prior_ndcg(d: Any, seen_query_ids: list[str], beta_from: list[str]) -> tuple[np.ndarray, float]:
    """Per-test-query NDCG@10 of frozen + beta * 1[seen]: beta chosen on validation with the
    positives of ``beta_from``, then the positives of ``seen_query_ids`` boosted."""
    from ..retrieval.generalisation import PRIOR_WEIGHTS, choose_prior_weight, seen_documents
    from ..retrieval.metrics import evaluate_indices

    C = np.asarray(d.corpus, dtype=np.float32)
    row_of = {c: i for i, c in enumerate(d.corpus_ids)}

    def ranked(Q: np.ndarray, seen: set[str], beta: float) -> np.ndarray:
        bonus = np.zeros(C.shape[0], dtype=np.float32)
        bonus[[row_of[x] for x in seen if x in row_of]] = beta
        S = Q @ C.T + bonus
        return np.argsort(-S, axis=1, kind="stable")[:, :10]

    fit_seen = seen_documents(d.qrels, beta_from)
    val = {b: float(evaluate_indices(ranked(d.V, fit_seen, b), d.validation, ["ndcg@10"]).per_query["ndcg@10"].mean())
           for b in PRIOR_WEIGHTS}
    beta = choose_prior_weight(val)
    seen = seen_documents(d.qrels, seen_query_ids)
    return evaluate_indices(ranked(d.T, seen, beta), d.test, ["ndcg@10"]).per_query["ndcg@10"], beta


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One cell.  Config keys: ``dataset, encoder, method, seed_index, rank, epochs, learning_rates,
    data_dir, cache_dir``."""
    import torch

    from ..adapters.workflow import _adapter_ndcg, _per_query_ndcg, fit_adapter
    from ..retrieval.generalisation import seen_document_split, seen_documents

    torch.set_num_threads(1)
    method, seed = str(config["method"]), int(config["seed_index"])
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    d = _load(config["dataset"], config["encoder"], str(config["data_dir"]), str(config["cache_dir"]))
    cids = d.corpus_ids or None
    train_ids, val_ids = list(d.triples.query_ids), list(d.validation.query_ids)
    frozen = _per_query_ndcg(d.T, d.test, d.corpus, None, cids)
    lrs = tuple(float(v) for v in str(config.get("learning_rates", "3e-4,1e-3,3e-3")).split(","))
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if method in TRAINED:
        geometry, selection, memory, candidates = {"default": ("auto", "document_disjoint", "auto", "joint"),
                                                   "family_memory": ("auto", "document_disjoint", "auto", "family"),
                                                   "map_only": ("auto", "document_disjoint", "none", "family"),
                                                   "paper": ("dual", "all", "none", "family"),
                                                   "query_only": ("query", "all", "none", "family")}[method]
        rep = fit_adapter(config["dataset"], config["encoder"], geometry=geometry, rank=int(config["rank"]),
                          seed=seed, learning_rates=lrs, epochs=int(config["epochs"]), selection=selection,
                          memory=memory, candidates=candidates, report=False, data_dir=config["data_dir"],
                          cache_dir=config["cache_dir"])
        values = _adapter_ndcg(d.T, d.test, d.corpus, rep.adapter, cids)
        extra = {"geometry": rep.adapter.geometry_, "memory_kept": bool(rep.adapter.memory_ is not None),
                 "deployed_choice": (rep.metrics.get("joint") or {}).get("choice", ""),
                 "guard_blocks": len((rep.metrics.get("joint") or {}).get("n_protected_by_block") or [])}
        if rep.adapter.memory_ is not None:
            extra.update(memory_threshold=rep.adapter.memory_.threshold_, memory_weight=rep.adapter.memory_.weight_,
                         map_values=_fmt_values(_per_query_ndcg(d.T, d.test, d.corpus, rep.adapter.operator_, cids)))
    elif method == "prior":
        values, beta = _prior_ndcg(d, train_ids, train_ids)
        extra = {"beta": beta}
    else:
        values, beta = _prior_ndcg(d, train_ids + val_ids, train_ids)
        extra = {"beta": beta}
    seconds = time.perf_counter() - t0
    test_qrels = {q: d.qrels[q] for q in d.test.query_ids}
    by_all = seen_document_split(test_qrels, seen_documents(d.qrels, train_ids + val_ids))
    by_train = seen_document_split(test_qrels, seen_documents(d.qrels, train_ids))
    pos = {q: i for i, q in enumerate(d.test.query_ids)}
    return {"values": _fmt_values(values), "frozen_values": _fmt_values(frozen),
            "seen": ",".join(str(pos[q]) for q in by_all.seen), "unseen": ",".join(str(pos[q]) for q in by_all.unseen),
            "unseen_train_only": ",".join(str(pos[q]) for q in by_train.unseen),
            "test_ndcg": float(np.mean(values)), "test_frozen": float(np.mean(frozen)), "seconds": seconds,
            "test_query_ids": "\n".join(map(str, d.test.query_ids)),
            "n_test": len(values), **extra}


def _rows(s: str) -> np.ndarray:
    return np.array([int(x) for x in str(s).split(",") if x != ""], dtype=np.int64)


def _paired(a: np.ndarray, b: np.ndarray, seed: int = 0) -> dict[str, float]:
    from ..retrieval.compare import paired_comparison

    if a.size == 0:
        return {"n": 0}
    c = paired_comparison(a, b, n_boot=2000, seed=seed)
    return {"n": int(a.size), "mean": float(a.mean()), "diff": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high}


def _finetune(dataset: str, encoder: str, folder: Path, n_test: int,
              query_ids: list[str] | None = None) -> dict[str, Any] | None:
    """A recorded :func:`asymgeo.adapters.finetune.finetune_baseline` result on the same test queries, or None."""
    path = folder / f"finetune_{dataset}_{encoder}.json"
    if not path.is_file():
        return None
    rec = json.loads(path.read_text(encoding="utf-8"))
    test = rec.get("test") or {}
    vals = test.get("ndcg@10")
    if vals is None or len(vals) != n_test or (query_ids is not None and list(test.get("query_ids", [])) != query_ids):
        return None
    return {"values": np.asarray(vals, dtype=np.float64), "record": rec, "path": str(path)}


def summarise(table: Any, finetune_dir: str | Path = "docs/results/peers") -> dict[str, Any]:
    """Per dataset x encoder: each method's NDCG@10 on all / seen-doc / unseen-doc test queries against
    frozen (per-query means over seeds, paired 95% bootstrap intervals), the default against the best
    peer on all queries, and the seeds' spread."""
    groups = []
    for (ds, enc), part in table.groupby(["dataset", "encoder"], sort=True):
        first = part.iloc[0]
        frozen = _parse_values(first["frozen_values"])
        subsets = {"all": np.arange(frozen.size), "seen": _rows(first["seen"]), "unseen": _rows(first["unseen"]),
                   "unseen_train_only": _rows(first["unseen_train_only"])}
        per: dict[str, np.ndarray] = {}
        spread: dict[str, list[float]] = {}
        seconds: dict[str, float] = {}
        for method, rows in part.groupby("method", sort=False):
            vals = np.vstack([_parse_values(v) for v in rows["values"]])
            per[str(method)] = vals.mean(axis=0)
            spread[str(method)] = [float(v.mean() - frozen.mean()) for v in vals]
            seconds[str(method)] = float(rows["seconds"].mean())
        qids = str(first["test_query_ids"]).split("\n") if "test_query_ids" in part.columns else None
        ft = _finetune(str(ds), str(enc), Path(finetune_dir), frozen.size, qids)
        if ft is not None:
            per["finetune"] = ft["values"]
            spread["finetune"] = [float(ft["values"].mean() - frozen.mean())]
        methods: dict[str, Any] = {}
        for m, v in per.items():
            methods[m] = {s: _paired(v[idx], frozen[idx]) for s, idx in subsets.items()}
            methods[m]["seeds"] = spread[m]
            methods[m]["seconds"] = seconds.get(m)
        peers = [m for m in per if m not in ("default", "map_only")]
        out: dict[str, Any] = {"dataset": ds, "encoder": enc, "frozen": float(frozen.mean()),
                               "n": {s: int(idx.size) for s, idx in subsets.items()}, "methods": methods}
        if "default" in per:
            out["default_parts"] = _default_parts(part[part["method"] == "default"], per["default"], frozen)
        if "default" in per and peers:
            best = max(peers, key=lambda m: per[m].mean())
            out["best_peer"] = best
            out["default_vs_best"] = _paired(per["default"], per[best])
        if ft is not None:
            costs = ft["record"].get("costs") or {}
            out["finetune_cost"] = {k: costs[k] for k in ("train_seconds", "train_cpu_seconds", "corpus_encode_seconds",
                                                          "documents_per_second", "msmarco_projection") if k in costs}
            out["finetune_epochs"] = ft["record"].get("chosen_epochs")
        groups.append(out)
    return {"groups": groups, "cells": len(table)}


def _default_parts(rows: Any, deployed: np.ndarray, frozen: np.ndarray) -> dict[str, Any]:
    """The default's gain split into its map's and its memory's (all test queries, per-query means over
    seeds): the map alone against frozen, the deployed whole against the map alone, and the map's share
    of the whole gain.  A seed whose memory was not kept contributes its deployed values as the map's."""
    maps = []
    for _, r in rows.iterrows():
        mv = r.get("map_values") if "map_values" in rows.columns else None
        maps.append(_parse_values(mv) if isinstance(mv, str) and mv else _parse_values(r["values"]))
    map_mean = np.vstack(maps).mean(axis=0)
    total = float(deployed.mean() - frozen.mean())
    return {"map": _paired(map_mean, frozen), "memory": _paired(deployed, map_mean),
            "map_share": float(map_mean.mean() - frozen.mean()) / total if total else float("nan")}


def _cell_text(c: dict[str, float]) -> str:
    if not c.get("n"):
        return "-"
    return f"{c['mean']:.4f} {c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"


def format_summary(s: dict[str, Any], command: str, figure: str = "figures/peers_frontier.png") -> str:
    """The page: one table per dataset x encoder, the default against the best peer, the cost columns
    (``figure``: the frontier plot's path relative to the page)."""
    from ._markdown import md_table

    lines = ["# asymgeo against the tools users pick instead", "",
             f"_Made by `{command}`; {s['cells']} cells. Every method on the same adaptation split and the same "
             "frozen embeddings; test NDCG@10 by exact full-corpus search; each cell `NDCG gain-over-frozen [paired "
             "95% bootstrap interval]`, per-query means over the training seeds._", "",
             "*seen-doc*: a relevant document is a positive of a training or validation query (what the default's "
             "document memory holds); *unseen-doc*: none is; *unseen (train only)*: the same split by training "
             "queries alone, the 0.2 definition. The frontier figure plots all-query gain against unseen-doc gain, "
             "one point per method.", ""]
    crowded = sorted({g["encoder"] for g in s["groups"] if str(g["encoder"]).startswith("crowded-")})
    if crowded:
        lines += ["*Stress encoders* (" + ", ".join(f"`{e}`" for e in crowded) + "): `crowded-<t>-<base>` is the "
                  "shipped encoder `<base>` with every query and document embedding moved along their common mean "
                  "direction and renormalised until two queries have mean cosine `t` (`tools/crowded_encoder.py`), "
                  "as encoders that put all texts in a narrow cone do; a stand-in for encoders that are not in "
                  "`../shared`. Its frozen ranking differs from the base encoder's.", ""]
    for g in s["groups"]:
        n = g["n"]
        lines += [f"## {g['dataset']} / {g['encoder']} (frozen {g['frozen']:.4f})", ""]
        rows = []
        for m, c in g["methods"].items():
            seeds = c["seeds"]
            spread = f"{min(seeds):+.3f} to {max(seeds):+.3f}" if len(seeds) > 1 else f"{seeds[0]:+.3f}"
            secs = "-" if c.get("seconds") is None else f"{c['seconds']:.0f}"
            rows.append([LABELS.get(m, m), _cell_text(c["all"]), _cell_text(c["seen"]), _cell_text(c["unseen"]),
                         _cell_text(c["unseen_train_only"]), f"{len(seeds)}: {spread}", secs])
        lines.append(md_table(["method", f"all ({n['all']})", f"seen-doc ({n['seen']})",
                               f"unseen-doc ({n['unseen']})", f"unseen, train only ({n['unseen_train_only']})",
                               "seeds: all-query gain", "seconds"], rows))
        if "default_parts" in g:
            p = g["default_parts"]
            share = f"{100 * p['map_share']:.0f}%" if np.isfinite(p["map_share"]) else "-"
            lines += ["", f"The default's parts, all queries: its map alone {p['map']['diff']:+.4f} "
                          f"[{p['map']['ci_low']:+.4f}, {p['map']['ci_high']:+.4f}] over frozen, its memory "
                          f"{p['memory']['diff']:+.4f} [{p['memory']['ci_low']:+.4f}, {p['memory']['ci_high']:+.4f}] "
                          f"on top (the map's share of the gain: {share})."]
        if "default_vs_best" in g:
            b = g["default_vs_best"]
            lines += ["", f"Default minus the best peer on all queries ({LABELS.get(g['best_peer'], g['best_peer'])}): "
                          f"{b['diff']:+.4f} [{b['ci_low']:+.4f}, {b['ci_high']:+.4f}] NDCG@10 over {b['n']} queries."]
        if "finetune_cost" in g:
            c = g["finetune_cost"]
            parts = [f"{k.replace('_', ' ')} {v:,.0f}" if isinstance(v, (int, float)) else f"{k.replace('_', ' ')}: {v}"
                     for k, v in c.items()]
            lines += ["", f"Full fine-tune ({g.get('finetune_epochs')} epoch(s), recorded by "
                          "`asymgeo.adapters.finetune.finetune_baseline`): " + "; ".join(parts) + "."]
        lines.append("")
    lines += [f"![frontier]({figure})", ""]
    return "\n".join(lines)


def plot_frontier(s: dict[str, Any], out: str | Path) -> Path:
    """All-query gain (x) against unseen-doc gain (y), one point per method, one panel per dataset x encoder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .._atomic import atomic_write_bytes

    groups = s["groups"]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.8), squeeze=False)
    for ax, g in zip(axes[0], groups, strict=True):
        for m, c in g["methods"].items():
            u = c["unseen"] if c["unseen"].get("n") else c["all"]
            ax.errorbar(c["all"]["diff"], u["diff"], xerr=[[c["all"]["diff"] - c["all"]["ci_low"]],
                                                          [c["all"]["ci_high"] - c["all"]["diff"]]],
                        yerr=[[u["diff"] - u["ci_low"]], [u["ci_high"] - u["diff"]]], fmt="o", capsize=2,
                        label=LABELS.get(m, m), color=COLOURS.get(m, "C7"))
        ax.axhline(0, color="grey", lw=0.8, ls="--")
        ax.axvline(0, color="grey", lw=0.8, ls="--")
        ax.set_title(f"{g['dataset']} / {g['encoder']}", fontsize=9)
        ax.set_xlabel("gain over frozen, all queries")
        ax.set_ylabel("gain over frozen, unseen-doc" if g["n"]["unseen"]
                      else "no unseen-doc queries: all-query gain again")
    widest = max(range(len(groups)), key=lambda i: len(groups[i]["methods"]))  # the panel with every method
    axes[0][widest].legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())
    return Path(out)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - thin wrapper
    from .store import write_page

    def render(table, _res: Path, out: Path, cmd: str) -> str:
        s = summarise(table, out.parent / "results" / "peers")
        figure = f"figures/{out.stem}_frontier.png"  # docs/peers.md -> figures/peers_frontier.png
        plot_frontier(s, out.parent / figure)
        return format_summary(s, cmd, figure)

    return write_page("peers", sys.argv[1:] if argv is None else argv, render)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
