"""Partial sharing on the Table 1 fold design and through the augmented closed form (issue 20):
expected values from hand-written truncations, losses, inner folds, fold-win counts and rankings,
never from the code under test."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from asymgeo.experiments import partial_sharing as ps
from asymgeo.experiments.real_pool import fold_design
from asymgeo.retrieval.metrics import RelevanceTable

ROOT = Path(__file__).resolve().parents[2]
RANK = 3


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """One BLAS thread, as the sweep runner gives every cell (many small products: threads only
    contend on a loaded machine)."""
    from asymgeo._runtime import limit_blas_threads

    with limit_blas_threads(1, user_api=None):
        yield


# --------------------------------------------------------------------------- hand-written references
def _shared(C, r):
    w, U = np.linalg.eigh(0.5 * (C + C.T))
    w, U = w[::-1][:r], U[:, ::-1][:, :r]
    return (U * np.maximum(w, 0.0)) @ U.T


def _dual(C, r):
    U, s, Vt = np.linalg.svd(C)
    return (U[:, :r] * s[:r]) @ Vt[:r]


def _loss(M, T):
    return float(np.sum((M - T) ** 2) / np.sum(T * T))


def _moment(X, D, rows):
    return sum(np.outer(X[i], D[i]) for i in rows) / len(rows)


def _ndcg10(scores, relevant):
    """Binary NDCG@10 of one query from its full score row (no ties in these tests)."""
    top = np.argsort(-scores)[:10]
    dcg = sum(1.0 / math.log2(j + 2) for j, d in enumerate(top) if d in relevant)
    ideal = sum(1.0 / math.log2(j + 2) for j in range(min(10, len(relevant))))
    return dcg / ideal


def _design_data(seed=3, n=60, p=6):
    rng = np.random.default_rng(seed)
    ids = [f"q{i:03d}" for i in range(n)]
    X = rng.standard_normal((n, p))
    G = rng.standard_normal((p, p)) / p
    D = X @ (G @ G.T + 0.6 * (G - G.T)) + 0.5 * rng.standard_normal((n, p))
    design = fold_design(ids, 0, 5, sizes=(16, 32, 64))   # pool 48 ids: sizes 16, 32 and the full 48
    return X, D, design


# --------------------------------------------------------------------------- held-out operator loss
def test_pure_ends_equal_hand_written_truncations_and_losses():
    X, D, design = _design_data()
    assert design.sizes == (16, 32, 48)
    out = ps.fold_losses(X, D, design, RANK, sizes=[16, 48], points=4, cv_folds=4, seed=5, max_iter=50)
    T = _moment(X, D, design.test_rows)
    assert sorted(set(out["size"])) == [16, 48] and sorted(set(out["asymmetric"])) == [0, 1, 2, 3]
    for m in (16, 48):
        C = _moment(X, D, design.train_order[:m])
        at = {s: j for j, (mm, s) in enumerate(zip(out["size"], out["asymmetric"])) if mm == m}
        assert out["loss"][at[0]] == pytest.approx(_loss(_shared(C, RANK), T), rel=1e-9)
        assert out["loss"][at[RANK]] == pytest.approx(_loss(_dual(C, RANK), T), rel=1e-9)
        assert out["train_loss"][at[0]] == pytest.approx(_loss(_shared(C, RANK), C), rel=1e-9)
        assert out["train_loss"][at[RANK]] == pytest.approx(_loss(_dual(C, RANK), C), rel=1e-9)


def _inner_cv(X, D, rows, fold, m, seed, folds, fit):
    """Inner held-out losses by hand: the seed of (fold, m), a seeded permutation of the prefix."""
    ss = np.random.SeedSequence(seed, spawn_key=(fold, m))
    inner = int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
    order = np.random.default_rng(np.random.SeedSequence(inner)).permutation(m)
    losses = []
    for part in np.array_split(order, folds):
        keep = np.setdiff1d(np.arange(m), part)
        losses.append(_loss(fit(_moment(X, D, rows[keep]), RANK), _moment(X, D, rows[part])))
    return float(np.mean(losses)), float(np.std(losses, ddof=1) / np.sqrt(folds))


def test_cross_fitted_choice_reads_only_the_training_prefix():
    X, D, design = _design_data()
    m = 32
    out = ps.fold_losses(X, D, design, RANK, sizes=[m], points=4, cv_folds=4, seed=5, max_iter=50)
    rows = design.train_order[:m]
    for s, fit in ((0, _shared), (RANK, _dual)):   # the inner losses of both ends, by hand
        mean, se = _inner_cv(X, D, rows, design.fold, m, 5, 4, fit)
        j = out["asymmetric"].index(s)
        assert out["cv_mean"][j] == pytest.approx(mean, rel=1e-9)
        assert out["cv_se"][j] == pytest.approx(se, rel=1e-9)
    # poison every row the choice must not read: the held-out fold and the pool beyond the prefix
    rng = np.random.default_rng(99)
    Xp, Dp = X.copy(), D.copy()
    outside = np.concatenate([design.test_rows, design.train_order[m:]])
    Xp[outside] = 50 * rng.standard_normal((outside.size, X.shape[1]))
    Dp[outside] = -(Xp[outside] @ rng.standard_normal((X.shape[1], X.shape[1])))
    poisoned = ps.fold_losses(Xp, Dp, design, RANK, sizes=[m], points=4, cv_folds=4, seed=5, max_iter=50)
    for key in ("cv_choice", "cv_best", "cv_seed"):
        assert poisoned[key] == out[key]
    assert poisoned["cv_mean"] == pytest.approx(out["cv_mean"], rel=1e-12)
    assert poisoned["train_loss"] == pytest.approx(out["train_loss"], rel=1e-12)
    assert not np.allclose(poisoned["loss"], out["loss"])   # the held-out losses did read them


def test_centred_run_equals_centring_by_hand_with_the_pool_means():
    X, D, design = _design_data(seed=4)
    X = X + 2.0   # a common mean for centring to remove
    D = D + 0.5
    pool = design.pool_rows
    Xc, Dc = X - X[pool].mean(axis=0), D - D[pool].mean(axis=0)
    kw = dict(sizes=[32, 48], points=4, cv_folds=4, seed=5, max_iter=50)
    centred = ps.fold_losses(X, D, design, RANK, centring="centred", **kw)
    by_hand = ps.fold_losses(Xc, Dc, design, RANK, centring="raw", **kw)
    raw = ps.fold_losses(X, D, design, RANK, centring="raw", **kw)
    for key in ("cv_choice", "cv_best", "size", "asymmetric"):
        assert centred[key] == by_hand[key]
    for key in ("loss", "train_loss", "cv_mean"):
        assert centred[key] == pytest.approx(by_hand[key], rel=1e-6)
    assert not np.allclose(centred["loss"], raw["loss"])
    # the pure ends against hand truncations of the hand-centred moments
    T = _moment(Xc, Dc, design.test_rows)
    C = _moment(Xc, Dc, design.train_order[:48])
    j = [i for i, (m, s) in enumerate(zip(centred["size"], centred["asymmetric"])) if m == 48 and s == RANK][0]
    assert centred["loss"][j] == pytest.approx(_loss(_dual(C, RANK), T), rel=1e-9)


def test_bad_sizes_and_centring_are_named():
    X, D, design = _design_data()
    with pytest.raises(ValueError, match="centring"):
        ps.fold_losses(X, D, design, RANK, centring="median")
    with pytest.raises(ValueError, match=r"sizes: \[20\]"):
        ps.fold_losses(X, D, design, RANK, sizes=[20])
    assert ps.parse_sizes("256,full", (32, 64, 128, 256, 512, 647)) == [256, 647]
    assert ps.parse_sizes("1024,full", (32, 64, 647)) == [647]   # a size the pool does not reach is dropped
    with pytest.raises(ValueError, match="not a nested size"):
        ps.parse_sizes("100", (32, 64, 128))
    with pytest.raises(ValueError, match="integers or 'full'"):
        ps.parse_sizes("all", (32, 64))


def _cells(rows):
    """Hand-made per-(fold, size, s) cells: ``rows`` = (fold, size, cv_choice, {s: loss})."""
    out = []
    for fold, size, choice, losses in rows:
        for s, loss in losses.items():
            out.append(dict(centring="raw", dataset="d", encoder="e", fold=fold, rank=4, size=size,
                            full=size == 64, asymmetric=s,
                            loss=loss, train_loss=0.5, cv_mean=1.0, cv_se=0.1, cv_choice=choice, cv_best=choice,
                            cv_seed=7, cv_folds=5, restarts=0, max_iter=200))
    return pd.DataFrame(out)


_HAND = [  # fold, size, cross-fitted s, held-out loss by s
    (0, 32, 2, {0: 1.0, 2: 0.7, 4: 0.9}),
    (0, 64, 0, {0: 0.8, 2: 0.6, 4: 0.5}),
    (1, 32, 4, {0: 1.0, 2: 0.9, 4: 0.8}),
    (1, 64, 2, {0: 0.9, 2: 0.85, 4: 0.4}),
    (2, 32, 2, {0: 0.6, 2: 0.5, 4: 0.7}),
    (2, 64, 2, {0: 0.6, 2: 0.55, 4: 0.7}),
]


def test_summary_means_and_fold_wins_against_a_hand_count():
    s = ps.summarise(_cells(_HAND))
    assert list(s["size"]) == ["32", "full"]   # never pooled over sizes
    small, full = s.iloc[0], s.iloc[1]
    assert small["folds"] == 3 and full["sizes"] == "64"
    assert small["loss_shared"] == pytest.approx((1.0 + 1.0 + 0.6) / 3)
    assert small["loss_dual"] == pytest.approx((0.9 + 0.8 + 0.7) / 3)
    assert small["best_fixed"] == 2 and small["loss_best_fixed"] == pytest.approx((0.7 + 0.9 + 0.5) / 3)
    # cross-fitted at n = 32: s = 2, 4, 2 -> 0.7, 0.8, 0.5 against the better family 0.9, 0.8, 0.6
    assert small["loss_cv"] == pytest.approx((0.7 + 0.8 + 0.5) / 3)
    assert small["gain_cv"] == pytest.approx((0.2 + 0.0 + 0.1) / 3)
    assert small["fold_wins_cv"] == 2            # fold 1 ties dual: no strict win
    assert small["fold_wins_best_fixed"] == 2 and small["cv_interior"] == 2 and small["cv_choices"] == "2:2;4:1"
    assert small["cv_beats_both"]
    # the full pool: s = 0, 2, 2 -> 0.8, 0.85, 0.55 against 0.5, 0.4, 0.6
    assert full["loss_cv"] == pytest.approx((0.8 + 0.85 + 0.55) / 3)
    assert full["gain_cv"] == pytest.approx((-0.3 - 0.45 + 0.05) / 3)
    assert full["fold_wins_cv"] == 1 and full["fold_wins_best_fixed"] == 1 and not full["cv_beats_both"]
    assert full["loss_dual"] == pytest.approx((0.5 + 0.4 + 0.7) / 3)


# --------------------------------------------------------------------------- retrieval
def _retrieval_data(seed=11, p=6, N=40):
    rng = np.random.default_rng(seed)
    corpus = rng.standard_normal((N, p))
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    corpus_ids = [f"d{j:02d}" for j in range(N)]
    G = rng.standard_normal((p, p))

    def queries(n, prefix):
        Q = rng.standard_normal((n, p))
        rel = [set(rng.choice(N, size=int(rng.integers(1, 4)), replace=False).tolist()) for _ in range(n)]
        ids = [f"{prefix}{i:02d}" for i in range(n)]
        table = RelevanceTable({q: {corpus_ids[d]: 1 for d in r} for q, r in zip(ids, rel)}, ids, corpus_ids)
        return Q, rel, table

    X = rng.standard_normal((80, p))
    pos = np.argmax(X @ G @ corpus.T, axis=1)
    neg = rng.integers(0, N, size=80)
    D = corpus[pos] - corpus[neg]
    V, vrel, vt = queries(12, "v")
    T, trel, tt = queries(15, "t")
    return X, D, V, vrel, vt, T, trel, tt, corpus, corpus_ids


def test_retrieval_against_a_brute_force_ranking_and_pytrec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    X, D, V, vrel, vt, T, trel, tt, corpus, corpus_ids = _retrieval_data()
    r = 2
    scales = (0.0, 0.5, 2.0, 8.0)
    out = ps.augmented_retrieval(X, D, V, vt, T, tt, corpus, r, scales=scales, points=3, cv_folds=4, seed=1,
                                 n_boot=500, final_restarts=0, final_max_iter=100)
    C = X.T @ D / X.shape[0]
    p = C.shape[0]
    ops = {"shared": _shared(C, r), "dual": _dual(C, r)}
    for g, M in ops.items():
        norm = np.linalg.norm(M, 2)
        val = {c: np.mean([_ndcg10(V[i] @ (np.eye(p) + c / norm * M) @ corpus.T, vrel[i]) for i in range(len(V))])
               for c in scales}
        best = max(val, key=lambda c: (round(val[c], 12), -c))
        assert out[f"c_{g}"] == best and out[f"validation_{g}"] == pytest.approx(val[best], rel=1e-9)
        op = np.eye(p) + best / norm * M
        S = T @ op @ corpus.T
        run = {f"t{i:02d}": {corpus_ids[j]: float(S[i, j]) for j in range(corpus.shape[0])} for i in range(len(T))}
        qrels = {f"t{i:02d}": {corpus_ids[d]: 1 for d in trel[i]} for i in range(len(T))}
        ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
        per = [ev[f"t{i:02d}"]["ndcg_cut_10"] for i in range(len(T))]
        assert out[f"per_query_{g}"] == pytest.approx(per, abs=1e-9)
        assert out[f"test_{g}"] == pytest.approx(float(np.mean(per)), abs=1e-9)
    better = "shared" if out["test_shared"] >= out["test_dual"] else "dual"
    assert out["better"] == better
    diff = np.asarray(out["per_query_partial"]) - np.asarray(out[f"per_query_{better}"])
    assert out["diff_better"] == pytest.approx(diff.mean(), abs=1e-12)
    assert out["ci_low_better"] <= out["diff_better"] <= out["ci_high_better"]
    assert out["asymmetric"] in (0, 1, 2) and out["n_test"] == len(T) and out["n_validation"] == len(V)


def test_retrieval_chooses_s_and_c_without_the_test_queries():
    X, D, V, vrel, vt, T, trel, tt, corpus, corpus_ids = _retrieval_data(seed=12)
    kw = dict(scales=(0.0, 0.5, 2.0), points=3, cv_folds=4, seed=1, n_boot=200, final_restarts=0, final_max_iter=100)
    out = ps.augmented_retrieval(X, D, V, vt, T, tt, corpus, 2, **kw)
    poisoned = ps.augmented_retrieval(X, D, V, vt, -T[::-1] * 3.0, tt, corpus, 2, **kw)
    for key in ("asymmetric", "cv_mean", "c_shared", "c_dual", "c_partial", "validation_shared",
                "validation_dual", "validation_partial"):
        assert poisoned[key] == out[key], key
    assert poisoned["per_query_shared"] != out["per_query_shared"]


# --------------------------------------------------------------------------- the evidence page
def _retrieval_frame():
    row = dict(dataset="d", encoder="e", rank=4, asymmetric=2, selection="document_disjoint", n_boot=1000, seed=3,
               n_train=100, n_validation=20, n_test=30, c_shared=0.5, c_dual=1.0, c_partial=1.0,
               validation_shared=0.5, validation_dual=0.52, validation_partial=0.55, test_shared=0.5, test_dual=0.51,
               test_partial=0.53, better="dual", diff_better=0.02, ci_low_better=0.005, ci_high_better=0.04,
               diff_shared=0.03, ci_low_shared=0.01, ci_high_shared=0.05, diff_dual=0.02, ci_low_dual=0.005,
               ci_high_dual=0.04)
    return pd.DataFrame([row])


def test_report_section_and_its_rebuild_from_the_committed_tables(tmp_path):
    cells, ret = _cells(_HAND), _retrieval_frame()
    text, claims = ps.report_section(cells, ret, tmp_path / "results")
    assert text.startswith(ps.TITLE)
    assert ("| d | e | raw | 4 | 32 | 3 | 0.8667 | 0.8000 | 2: 0.7000 | 0.7000 (s = 2) | 0.6667 (s = 2 x2, 4 x1) "
            "| +0.1000 | 2/3 | 2/3 |") in text
    assert ("| d | e | raw | 4 | full (64) | 3 | 0.7667 | 0.5333 | 2: 0.6667 | 0.6667 (s = 2) | "
            "0.7333 (s = 0 x1, 2 x2) | -0.2333 | 1/3 | 1/3 |") in text
    assert "+0.0200 [+0.0050, +0.0400]" in text
    # n = 32: below both with 2 of 3 fold wins, and the retrieval interval is above zero
    assert "held-out loss beats both at n = 32; retrieval beats the better family" in text
    assert "Verdict: earned on d / e" in text
    assert [c[-1] for c in claims] == ["**yes**", "**no**", "**yes**"]
    worse = _retrieval_frame().assign(ci_low_better=-0.001)
    text2, claims2 = ps.report_section(_cells(_HAND), worse)
    assert "Verdict: not earned; `fit --geometry partial` is not offered" in text2
    assert claims2[-1][-1] == "**inconclusive**"
    rebuilt, again = ps.section_from_committed(tmp_path)
    assert "Rebuilt from the committed tables" in rebuilt
    assert again == claims
    assert rebuilt.split("\n", 3)[3].lstrip("\n") == text.split("\n", 1)[1].lstrip("\n")


def test_evidence_page_refuses_damaged_committed_partial_sharing_tables(tmp_path):
    from asymgeo.experiments.evidence_report import build_evidence_report

    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs" / "results", docs / "results")
    ps.report_section(_cells(_HAND), _retrieval_frame(), docs / "results")   # good tables to damage
    (docs / "evidence.md").write_text("the page before\n")
    page = build_evidence_report(tmp_path / "no-results", docs).read_text()
    assert f"{ps.TITLE}\n\nRebuilt from the committed tables" in page
    good = (docs / "results" / "partial_sharing_cells.csv").read_text()
    (docs / "evidence.md").write_text("the page before\n")
    (docs / "results" / "partial_sharing_cells.csv").write_text("centring,dataset\nraw,d\n")
    with pytest.raises(ValueError, match=r"partial_sharing_cells.csv: not a partial-sharing cells table "
                                         r"\(missing column\(s\) \['encoder'") as err:
        build_evidence_report(tmp_path / "no-results", docs)
    assert "\n" not in str(err.value) and "asymgeo reproduce partial_sharing`" in str(err.value)
    assert (docs / "evidence.md").read_text() == "the page before\n"
    # the other damages, straight from the section builder the page calls
    (docs / "results" / "partial_sharing_cells.csv").write_text(good.replace(",0.7,", ",oops,", 1))
    with pytest.raises(ValueError, match="partial_sharing_cells.csv: not a partial-sharing cells table"):
        ps.section_from_committed(docs)
    (docs / "results" / "partial_sharing_cells.csv").write_text(good)
    (docs / "results" / "partial_sharing_retrieval.csv").write_text('garbage,,"\n')
    with pytest.raises(ValueError, match="partial_sharing_retrieval.csv: not a partial-sharing retrieval table"):
        ps.section_from_committed(docs)
    (docs / "results" / "partial_sharing_retrieval.csv").unlink()   # cells alone: retrieval marked not run
    assert "Retrieval through the augmented closed form: not run" in ps.section_from_committed(docs)[0]
    assert (docs / "evidence.md").read_text() == "the page before\n"


# --------------------------------------------------------------------------- one real cell
def test_real_cell_ends_equal_table1s_committed_losses(shared_dir):
    cfg = dict(centring="raw", dataset="scifact", encoder="all-MiniLM-L6-v2", fold=1, rank=4, sizes="64", folds=5,
               cv_folds=5, points=3, restarts=0, max_iter=30, data_dir=str(shared_dir / "data"),
               cache_dir=str(shared_dir / "embeddings"), pool="train", master_seed=20260809)
    out = ps.cell(cfg)
    t1 = pd.read_csv(ROOT / "docs" / "results" / "table1_cells.csv")
    ref = t1[(t1["projection"] == 0) & (t1["centring"] == "raw") & (t1["dataset"] == "scifact")
             & (t1["encoder"] == "all-MiniLM-L6-v2") & (t1["fold"] == 1) & (t1["rank"] == 4) & (t1["size"] == 64)]
    assert len(ref) == 1 and out["size"] == [64, 64, 64] and out["asymmetric"] == [0, 2, 4]
    assert out["loss"][0] == pytest.approx(float(ref["loss_shared"].iloc[0]), rel=1e-5)
    assert out["loss"][2] == pytest.approx(float(ref["loss_dual"].iloc[0]), rel=1e-5)


@pytest.mark.slow
def test_quick_runs_to_the_evidence_page_and_back_from_the_committed_tables(tmp_path, shared_dir):
    from asymgeo.experiments.evidence_report import build_evidence_report
    from asymgeo.experiments.report import reproduce

    configs = ROOT / "src" / "asymgeo" / "experiments" / "configs"
    results, docs = tmp_path / "results", tmp_path / "docs"
    for name in ("partial_sharing", "partial_sharing_retrieval"):
        reproduce(name, quick=True, results_dir=results, config_dir=configs, workers=1, progress=False,
                  command=f"asymgeo reproduce {name} --quick")
    page = build_evidence_report(results, docs, quick=True).read_text()
    section = page[page.index(ps.TITLE):]
    assert "| scifact | all-MiniLM-L6-v2 | raw | 4 | 128 | 2 |" in section and "Verdict:" in section
    assert "| partial_sharing-quick | 4 cells |" in page and "| partial_sharing_retrieval-quick | 1 cells |" in page
    cells = pd.read_csv(docs / "results" / "partial_sharing_cells-quick.csv")
    assert len(cells) == 2 * 2 * 5 and set(cells["asymmetric"]) == {0, 1, 2, 3, 4}   # centrings x folds x s
    runs = pd.read_csv(docs / "results" / "partial_sharing_runs-quick.csv")
    assert runs["versions"].str.contains("numpy").all()
    shutil.rmtree(results)
    again = build_evidence_report(results, docs, quick=True).read_text()
    assert "Rebuilt from the committed tables" in again
    assert "| partial_sharing-quick (from the committed tables) | 4 cells |" in again
    claims = [ln.split(" | ")[-1] for ln in page.splitlines() if ln.startswith("| Beyond: ") and "partial" in ln]
    assert claims and claims == [ln.split(" | ")[-1] for ln in again.splitlines()
                                 if ln.startswith("| Beyond: ") and "partial" in ln]
