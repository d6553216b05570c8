r"""RQ4: held-out operator-risk trajectories on frozen real embeddings (Figures 7-9, Appendix F.1).

One cell = (dataset, encoder, centring, seed_index, rank).  Seed ``s`` is held-out fold ``s``
of the Table 1 protocol: the fold's queries define :math:`M_{\rm test}`, the other folds,
permuted with seed ``20260924 + s``, give nested training sizes 32, 64, ..., 4096 (plus the
whole training pool when it has at most 4096 queries).  At every size the rank-r SVD
truncation (dual) and positive eigen-truncation (shared) of the training moment are scored by

.. math:: L_g = \|\widehat M_g - M_{\rm test}\|_F^2 / \|M_{\rm test}\|_F^2,

and the trajectory's least-squares slope of :math:`L_s - L_d` against :math:`\log_2 n` is
recorded (the paper: all 168 comparable slopes positive).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..kernels.operator_risk import log2_slope, mean_term, prefix_moments, truncation_losses
from .real_pool import fold_arrays, fold_design, pool_triples

__all__ = ["cell", "summarise", "slopes", "claims", "mean_terms", "plot", "plot_means", "PAPER_SLOPES", "ALL_RANKS"]

#: The paper's count: positive slopes / comparable trajectories (Section 5.4).
PAPER_SLOPES = (168, 168)


def _pool(config: dict[str, Any]):
    return pool_triples(str(config["dataset"]), str(config["encoder"]), config.get("data_dir") or None,
                        config.get("cache_dir") or None, str(config.get("pool", "train")))


#: Ranks computed together (one eigendecomposition and one SVD per size serve all of them).
ALL_RANKS = (4, 8, 16, 32, 64, 128, 256)


@functools.lru_cache(maxsize=2)
def _trajectories(dataset: str, encoder: str, data_dir: str | None, cache_dir: str | None, pool_name: str,
                  centring: str, seed_index: int, folds: int) -> dict[str, Any]:
    """Held-out losses of every rank in :data:`ALL_RANKS` (<= p) at every nested size of
    one (dataset, encoder, centring, fold); cached so the cells of one trajectory family
    (the rank axis) share the decompositions."""
    pool = pool_triples(dataset, encoder, data_dir, cache_dir, pool_name)
    design = fold_design(pool.ids, seed_index, folds)
    X, D = fold_arrays(pool, design, centring)
    tr, te = design.train_order, design.test_rows
    M_test = X[te].T @ D[te] / te.size
    moments = prefix_moments(X[tr], D[tr], design.sizes)
    ranks = [r for r in ALL_RANKS if r <= pool.p]
    losses = {m: truncation_losses(moments[m], M_test, ranks) for m in design.sizes}
    mt = mean_term(pool.X[tr], pool.D[tr])
    return {"pool": pool, "design": design, "ranks": ranks, "losses": losses, "mean_term": mt}


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One RQ4 trajectory.  Config keys: ``dataset, encoder, centring, seed_index, rank,
    data_dir, cache_dir, pool, folds, master_seed`` (no randomness beyond the fold seeds)."""
    rank = int(config["rank"])
    t = _trajectories(str(config["dataset"]), str(config["encoder"]), config.get("data_dir") or None,
                      config.get("cache_dir") or None, str(config.get("pool", "train")), str(config["centring"]),
                      int(config["seed_index"]), int(config.get("folds", 5)))
    pool, design = t["pool"], t["design"]
    if rank in t["ranks"]:
        j = t["ranks"].index(rank)
    else:  # a rank outside ALL_RANKS: compute it on its own
        j = None
    sizes, ls, ld = [], [], []
    if rank <= pool.p:
        X, D = fold_arrays(pool, design, str(config["centring"]))
        te = design.test_rows
        for m in design.sizes:
            if j is None:
                M_test = X[te].T @ D[te] / te.size
                C = prefix_moments(X[design.train_order], D[design.train_order], [m])[m]
                loss = truncation_losses(C, M_test, [rank])
                a, b = loss.shared[0], loss.dual[0]
            else:
                a, b = t["losses"][m].shared[j], t["losses"][m].dual[j]
            sizes.append(int(m))
            ls.append(float(a))
            ld.append(float(b))
    adv = [a - b for a, b in zip(ls, ld, strict=True)]
    mt = t["mean_term"]
    return {
        "sizes": sizes,
        "loss_shared": ls,
        "loss_dual": ld,
        "advantage": adv,
        "slope": log2_slope(sizes, adv) if len(set(sizes)) >= 2 else float("nan"),
        "n_pool": pool.n,
        "n_train": int(design.train_order.size),
        "n_test": int(design.test_rows.size),
        "p": pool.p,
        "fold_seed": 20260924 + int(config["seed_index"]),
        "mean_share": float(mt.share),
        "mean_centred_share": float(mt.centred_share),
        "mean_cosine": float(mt.cosine),
    }


def _ordered(df):
    return df.sort_values(["centring", "dataset", "encoder", "rank", "seed_index"]).reset_index(drop=True)


def slopes(df):
    """One row per trajectory: ``centring, dataset, encoder, rank, seed_index, slope``, the first
    and last advantage, whether it crosses from shared- to dual-favoured (first < 0 < last)."""
    import pandas as pd

    rows = []
    for r in _ordered(df).itertuples():
        adv = np.asarray(r.advantage, dtype=float)
        rows.append({"centring": r.centring, "dataset": r.dataset, "encoder": r.encoder, "rank": int(r.rank),
                     "seed_index": int(r.seed_index), "points": int(adv.size), "slope": float(r.slope),
                     "first": float(adv[0]) if adv.size else float("nan"),
                     "last": float(adv[-1]) if adv.size else float("nan"),
                     "crosses": bool(adv.size >= 2 and adv[0] < 0 < adv[-1])})
    return pd.DataFrame(rows)


def summarise(df):
    """Per (centring, dataset, encoder): trajectories, positive slopes, crossings, median slope."""
    import pandas as pd

    s = slopes(df)
    comparable = s[s["points"] >= 2]
    rows = []
    for (c, d, e), g in comparable.groupby(["centring", "dataset", "encoder"], sort=True):
        rows.append({"centring": c, "dataset": d, "encoder": e, "trajectories": len(g),
                     "positive_slopes": int((g["slope"] > 0).sum()), "crossings": int(g["crosses"].sum()),
                     "median_slope": float(g["slope"].median()),
                     "dual_favoured_at_largest_n": int((g["last"] > 0).sum())})
    return pd.DataFrame(rows)


def mean_terms(df):
    """Per (dataset, encoder): mean over the raw cells of the rank-1 mean term's share of the
    training moment (:func:`asymgeo.kernels.operator_risk.mean_term`), its centred share and cosine."""
    raw = df[df["centring"] == "raw"] if "centring" in df else df
    return (raw.groupby(["dataset", "encoder"], sort=True)[["mean_share", "mean_centred_share", "mean_cosine", "p"]]
            .mean().reset_index())


#: The paper's ranks (Appendix F.1: 4/8/16/32 everywhere; ArguAna and SciFact add 64-256).
PAPER_RANKS = (4, 8, 16, 32)


def centring_effect(df, ranks: Any = None):
    """Per (dataset, encoder, centring): mean ``L_s - L_d`` over ranks and seeds at each nested
    step (sizes matched by position, since the full pool differs by one query across folds), the
    first mean size with a positive mean, and the mean at the largest size.  ``ranks``: only
    these ranks enter the mean (default: every rank in ``df``)."""
    import pandas as pd

    if ranks is not None:
        df = df[df["rank"].isin(list(ranks))]
    rows = []
    for (d, e, c), g in df.groupby(["dataset", "encoder", "centring"], sort=True):
        steps = min(len(s) for s in g["sizes"])
        if steps == 0:
            continue
        adv = np.array([list(a)[:steps] for a in g["advantage"]], dtype=float).mean(axis=0)
        sizes = [int(np.median([s[j] for s in g["sizes"]])) for j in range(steps)]
        first = next((n for n, a in zip(sizes, adv, strict=True) if a > 0), None)
        rows.append({"dataset": d, "encoder": e, "centring": c, "first_positive_n": first,
                     "largest_n": sizes[-1], "mean_at_largest_n": float(adv[-1])})
    return pd.DataFrame(rows)


def claims(df, centring: str = "raw") -> dict[str, Any]:
    """The RQ4 claim on one centring: every comparable slope positive (paper: 168 of 168).

    Returns counts: ``trajectories`` (with >= 2 sizes), ``positive``, ``all_positive``,
    ``crossings`` (shared- to dual-favoured), ``dual_at_largest_n``.
    """
    s = slopes(df)
    s = s[(s["centring"] == centring) & (s["points"] >= 2)]
    n_pos = int((s["slope"] > 0).sum())
    return {"centring": centring, "trajectories": int(len(s)), "positive": n_pos,
            "all_positive": bool(len(s) > 0 and n_pos == len(s)), "crossings": int(s["crosses"].sum()),
            "dual_at_largest_n": int((s["last"] > 0).sum())}


def plot(df, path, *, centring: str = "raw") -> None:
    """Figures 8-9 analogue: every trajectory ``L_s - L_d`` against n (log2), one panel per
    dataset x encoder; colour = rank, line style = seed (fold)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = _ordered(df[df["centring"] == centring])
    keys = sorted({(r.dataset, r.encoder) for r in sub.itertuples()})
    ranks = sorted(sub["rank"].unique())
    cmap = plt.get_cmap("viridis", max(len(ranks), 2))
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, max(len(keys), 1), figsize=(4.0 * max(len(keys), 1), 3.6), squeeze=False)
    for ax, (d, e) in zip(axes[0], keys, strict=True):
        g = sub[(sub["dataset"] == d) & (sub["encoder"] == e)]
        for r in g.itertuples():
            ax.plot(r.sizes, r.advantage, styles[int(r.seed_index) % 4], color=cmap(ranks.index(r.rank)), lw=1,
                    label=f"r={r.rank}" if int(r.seed_index) == 0 else None)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_title(f"{d} / {e}", fontsize=8)
        ax.set_xlabel("training queries n")
    axes[0][0].set_ylabel("held-out $L_s - L_d$ (>0 favours dual)")
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"RQ4 ({centring} embeddings): held-out operator-risk trajectories; colour rank, style seed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_means(df, path) -> None:
    """Figure 7 analogue: per dataset, encoder means of ``L_s - L_d`` over the paper's ranks
    (4 to 32, :data:`PAPER_RANKS`, when present) and seeds, raw (solid) and centred (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if df["rank"].isin(PAPER_RANKS).any():
        df = df[df["rank"].isin(PAPER_RANKS)]
    rank_txt = ", ".join(str(int(r)) for r in sorted(df["rank"].unique()))
    datasets = sorted(df["dataset"].unique())
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.5 * len(datasets), 3.6), squeeze=False)
    for ax, d in zip(axes[0], datasets, strict=True):
        for j, (e, g) in enumerate(df[df["dataset"] == d].groupby("encoder", sort=True)):
            for c, style in (("raw", "-"), ("centred", "--")):
                h = g[g["centring"] == c]
                if h.empty:
                    continue
                pts: dict[int, list[float]] = {}
                for r in h.itertuples():
                    for n, a in zip(r.sizes, r.advantage, strict=True):
                        pts.setdefault(int(n), []).append(float(a))
                ns = sorted(n for n in pts if len(pts[n]) == max(len(v) for v in pts.values()))
                ax.plot(ns, [np.mean(pts[n]) for n in ns], style, marker="o", ms=3, color=f"C{j}",
                        label=f"{e} ({c})")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_title(d)
        ax.set_xlabel("training queries n")
    axes[0][0].set_ylabel("mean held-out $L_s - L_d$")
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"RQ4 (Figure 7 analogue): encoder means over ranks {rank_txt} and seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def frozen_ndcg(df) -> list[dict[str, Any]]:
    """Frozen-encoder test NDCG@10, binary (the paper's) and graded (MTEB's), per dataset x
    encoder of the results table (exact full-corpus search on the cache)."""
    from ..data import evaluate_frozen

    out = []
    keys = df[["dataset", "encoder", "data_dir", "cache_dir"]].drop_duplicates().itertuples(index=False)
    for d, e, data_dir, cache_dir in sorted(keys):
        try:
            r = evaluate_frozen(d, e, metrics=["ndcg@10", "ndcg_graded@10"], data_dir=data_dir or None,
                                cache_dir=cache_dir or None)
        except (FileNotFoundError, ValueError) as exc:
            out.append({"dataset": d, "encoder": e, "error": str(exc).splitlines()[0]})
            continue
        out.append({"dataset": d, "encoder": e, "queries": len(r.query_ids) - int(r.n_no_relevant),
                    "ndcg@10": float(r.mean["ndcg@10"]), "ndcg_graded@10": float(r.mean["ndcg_graded@10"])})
    return out


def export(df, out_dir, suffix: str = "") -> list:
    """Write the small results tables ``rq4_trajectories{suffix}.csv`` (long: one row per
    trajectory and size) and ``rq4_slopes{suffix}.csv`` under ``out_dir``; returns the paths."""
    from pathlib import Path

    import pandas as pd

    from .._atomic import atomic_write_text

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for r in _ordered(df).itertuples():
        for n, a, b in zip(r.sizes, r.loss_shared, r.loss_dual, strict=True):
            rows.append({"centring": r.centring, "dataset": r.dataset, "encoder": r.encoder, "rank": int(r.rank),
                         "seed_index": int(r.seed_index), "n": int(n), "loss_shared": a, "loss_dual": b,
                         "advantage": a - b})
    paths = [out / f"rq4_trajectories{suffix}.csv", out / f"rq4_slopes{suffix}.csv"]
    atomic_write_text(paths[0], pd.DataFrame(rows).to_csv(index=False, float_format="%.6g"))
    atomic_write_text(paths[1], slopes(df).to_csv(index=False, float_format="%.6g"))
    return paths


def report_section(df, fig_path, fig_rel: str) -> tuple[str, list[list[str]]]:
    """Markdown for RQ4 (and the dataset/encoder preamble: frozen NDCG@10, mean-term shares),
    writing ``fig_path`` (raw trajectories) and its ``_centred`` and ``_means`` siblings, and the
    results tables under ``<docs>/results``.  Returns ``(markdown, claim rows)``."""
    from pathlib import Path

    from ._markdown import md_table, plural, verdict

    fig_path = Path(fig_path)
    cen_path = fig_path.with_name(fig_path.stem + "_centred.png")
    mean_path = fig_path.with_name(fig_path.stem + "_means.png")
    plot(df, fig_path, centring="raw")
    if (df["centring"] == "centred").any():
        plot(df, cen_path, centring="centred")
    plot_means(df, mean_path)
    suffix = "-quick" if fig_path.stem.endswith("-quick") else ""
    export(df, fig_path.parent.parent / "results", suffix)
    rel = fig_rel.rsplit("/", 1)[0]
    base = fig_rel.rsplit("/", 1)[1].removesuffix(".png")
    summary = summarise(df)
    rows = [[r.centring, r.dataset, r.encoder, r.trajectories, r.positive_slopes, f"{r.median_slope:.3g}",
             r.crossings, r.dual_favoured_at_largest_n] for r in summary.itertuples()]
    tab = md_table(["embeddings", "dataset", "encoder", "trajectories", "positive slopes", "median slope / log2 n",
                    "shared→dual crossings", "dual-favoured at largest n"], rows)
    mt = mean_terms(df)
    nd = {(r["dataset"], r["encoder"]): r for r in frozen_ndcg(df)}
    pre_rows = []
    for r in mt.itertuples():
        e = nd.get((r.dataset, r.encoder), {})
        pre_rows.append([r.dataset, r.encoder, int(r.p), f"{e.get('ndcg@10', float('nan')):.4f}",
                         f"{e.get('ndcg_graded@10', float('nan')):.4f}", f"{100 * r.mean_share:.1f}%",
                         f"{100 * r.mean_centred_share:.1f}%", f"{r.mean_cosine:.3f}"])
    pre = md_table(["dataset", "encoder", "p", "frozen NDCG@10 (binary, paper)", "frozen NDCG@10 (graded, MTEB)",
                    "mean-term share", "centred share", "cos(C, mean term)"], pre_rows)
    claim_rows: list[list[str]] = []
    for c in ("raw", "centred"):
        if not (df["centring"] == c).any():
            continue
        cl = claims(df, c)
        claim_rows.append([f"RQ4 ({c} embeddings): every held-out L_s − L_d slope against log2 n is positive",
                           f"{PAPER_SLOPES[0]}/{PAPER_SLOPES[1]} (FEVER, NQ, ArguAna, SciFact; 4 encoders)",
                           f"{cl['positive']}/{cl['trajectories']} ({', '.join(sorted(df['dataset'].unique()))}; "
                           f"{plural(int(df['encoder'].nunique()), 'encoder')})", verdict(cl["all_positive"])])
    raw_c = claims(df, "raw") if (df["centring"] == "raw").any() else None
    if raw_c is not None:
        claim_rows.append(["RQ4: curves cross from Shared- to Dual-favoured held-out fit",
                           "3 of 4 NQ encoder means cross", f"{raw_c['crossings']}/{raw_c['trajectories']} "
                           "trajectories cross (raw)", verdict(raw_c["crossings"] > 0)])
    seeds = [int(s) for s in sorted(df["seed_index"].unique())]
    all_ranks = sorted(int(r) for r in df["rank"].unique())
    paper_ranks = [r for r in all_ranks if r in PAPER_RANKS]
    wider = len(paper_ranks) < len(all_ranks)

    def _effect_cells(r: Any) -> list[str]:
        if r is None:
            return ["–", "–"]
        fp = r.first_positive_n
        first = None if fp is None or np.isnan(fp) else fp
        return ["never" if first is None else str(int(first)), f"{r.mean_at_largest_n:+.4f} (n≈{r.largest_n})"]

    ce_main = centring_effect(df, paper_ranks or None)
    ce_wide = centring_effect(df) if wider else None
    ce_rows = []
    for (d, e), g in ce_main.groupby(["dataset", "encoder"], sort=True):
        by = {r.centring: r for r in g.itertuples()}
        row = [d, e]
        for c in ("raw", "centred"):
            row += _effect_cells(by.get(c))
        if ce_wide is not None:
            w = ce_wide[(ce_wide["dataset"] == d) & (ce_wide["encoder"] == e)]
            wby = {r.centring: r for r in w.itertuples()}
            row += _effect_cells(wby.get("raw"))
        ce_rows.append(row)
    rank_txt = f"ranks {paper_ranks[0]}–{paper_ranks[-1]}" if paper_ranks else "all ranks"
    ce_tab = md_table(["dataset", "encoder", f"raw ({rank_txt}): first n with mean L_s − L_d > 0",
                       f"raw ({rank_txt}): mean at largest n", f"centred ({rank_txt}): first n",
                       f"centred ({rank_txt}): mean at largest n"]
                      + ([f"raw (ranks {all_ranks[0]}–{all_ranks[-1]}): first n",
                          f"raw (ranks {all_ranks[0]}–{all_ranks[-1]}): mean at largest n"] if wider else []),
                      ce_rows)
    text = f"""## RQ4: held-out operator-risk trajectories (Figures 7-9)

Pool: each dataset's labelled official training queries (SciFact {int(df[df.dataset == 'scifact'].n_pool.max())
if (df.dataset == 'scifact').any() else '–'}, NFCorpus {int(df[df.dataset == 'nfcorpus'].n_pool.max())
if (df.dataset == 'nfcorpus').any() else '–'}), triples as `asymgeo.data.load_triples` builds them. Seed s in
{seeds} = held-out fold s of the Table 1 folds (ids sorted, permuted with seed 20260923, five folds); the
other four folds, permuted with seed 20260924 + s, give nested training sizes 32, 64, ..., 4096 plus the whole
training pool when it has at most 4,096 queries. `L_g = ||M̂_g − M_test||²_F / ||M_test||²_F`; positive
`L_s − L_d` favours Dual. Slope = least-squares slope of `L_s − L_d` against log2 n. *Centred*: queries and
`Y+ − Y−` centred with the fold's training-pool means (held-out rows shifted by the same training means), so
both geometries fit only the directional part; the rank-1 mean term `x̄ d̄ᵀ` is left out of both (a deployed
adapter would add it back as a fixed bias, identical for either geometry).

### Datasets and encoders

Frozen test NDCG@10 (exact search over the full corpus; NFCorpus has graded qrels: the paper's metric is
binary, MTEB's is graded, about 0.316 for MiniLM) and the rank-1 mean term's share of the training relevance
moment `C = (1/n) Σ X_i (Y+_i − Y−_i)ᵀ = C_c + x̄ d̄ᵀ` (`||x̄ d̄ᵀ||² / ||C||²`; the parts are not orthogonal,
so the shares need not sum to 1), averaged over the folds' training pools:

{pre}

### Directional structure or a common-mean offset?

Encoder means over the paper's ranks (4 to 32) and seeds, raw against centred, with the mean over every rank
run here beside it (the larger ranks, run on SciFact as in the paper, pull the mean toward Shared: their
dual fits have many more parameters); the centred fits see only the directional part
`C_c`). A raw mean that turns positive at a smaller n than the centred one is consistent with part of the
raw dual advantage at those sizes coming from the rank-1 mean term `x̄ d̄ᵀ`, which is not symmetric and so
not in the shared family; a dual advantage that remains after centring is directional structure:

{ce_tab}

### Slopes

![RQ4 trajectories, raw]({fig_rel})

![RQ4 trajectories, centred]({rel}/{base}_centred.png)

![RQ4 encoder means]({rel}/{base}_means.png)

{tab}

Tables: `docs/results/rq4_trajectories{suffix}.csv` (every trajectory point), `docs/results/rq4_slopes{suffix}.csv`.
"""
    return text, claim_rows
