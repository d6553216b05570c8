"""Tests of asymgeo.adapters.training's argument checks and its rarely taken branches (issue #19:
every refusal and fallback that decides a result runs in some test).

Expected values come from numpy (the closed-form start as an SVD of the relevance moment) or
from an equivalent call (hard negatives passed as ``negative_rows``)."""

from __future__ import annotations

import numpy as np
import pytest
from adapter_fixtures import make_problem

from asymgeo.adapters import Adapter
from asymgeo.adapters.training import ValidationScorer, import_torch, resolve_device
from asymgeo.retrieval.metrics import RelevanceTable


@pytest.fixture(scope="module")
def problem():
    return make_problem()


def _fit_kw(problem, **kw):
    out = dict(hard_negative_rows=problem.hard, relevant_rows=problem.relevant,
               validation_queries=problem.V, validation_relevance=problem.table)
    out.update(kw)
    return out


@pytest.mark.parametrize("kw, needle, exc", [
    (dict(relevant_rows=[{999}] * 48), r"relevant_rows\[0\]: rows must lie in \[0, 120\), got \[999, 999\]", ValueError),
    (dict(relevant_rows="abc"), "relevant_rows: expected 48 collections", ValueError),
    (dict(negative_rows=np.zeros(5, int)), r"negative_rows: expected shape \(48,\), got \(5,\)", ValueError),
    (dict(negative_rows=np.full(48, -1)), "negative_rows: rows must lie in", ValueError),
    (dict(validation_queries=None), "validation_queries: required with validation_relevance", ValueError),
    (dict(validation_relevance=None), "validation_relevance: required with validation_queries", ValueError),
    (dict(validation_queries=np.zeros((24, 5), np.float32)), "validation_queries: dimension 5 does not match X dimension 12",
     ValueError),
    (dict(validation_relevance=object()), "validation_relevance: expected an asymgeo.retrieval.metrics.RelevanceTable",
     TypeError),
    (dict(validation_relevance=RelevanceTable({"v0": {"d0": 1}}, ["v0"], [f"d{j}" for j in range(7)])),
     "validation_relevance: built over 7 documents, but the corpus has 120 rows", ValueError),
    (dict(validation_queries=make_problem().V[:3]), "validation_relevance: refers to query row 23, but validation_queries "
     "has 3 rows", ValueError),
])
def test_bad_fit_arguments_are_refused_naming_the_argument(problem, kw, needle, exc):
    with pytest.raises(exc, match=needle):
        Adapter(rank=2, epochs=1).fit(problem.X, problem.pos, problem.corpus, **_fit_kw(problem, **kw))


def test_early_stopping_without_validation_is_refused(problem):
    with pytest.raises(ValueError, match="early_stopping: needs validation_queries and validation_relevance"):
        Adapter(rank=2, epochs=2, early_stopping=1).fit(problem.X, problem.pos, problem.corpus,
                                                        hard_negative_rows=problem.hard)


def test_empty_hard_negative_table_is_no_hard_negatives(problem):
    # (n, 0) hard negatives mean "none": the same fit as without them, bit for bit
    kw = dict(rank=3, epochs=2, batch_size=16, learning_rates=(1e-2,), seed=3, geometry="dual")
    a = Adapter(**kw).fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=np.zeros((48, 0), int),
                          validation_queries=problem.V, validation_relevance=problem.table)
    b = Adapter(**kw).fit(problem.X, problem.pos, problem.corpus,
                          validation_queries=problem.V, validation_relevance=problem.table)
    np.testing.assert_array_equal(a.operator_, b.operator_)
    # and differs from a fit that does use hard negatives (the branch decides something)
    c = Adapter(**kw).fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard,
                          validation_queries=problem.V, validation_relevance=problem.table)
    assert not np.allclose(a.operator_, c.operator_)


def _projection_start(problem, neg, r=3):
    """The closed-form projection start by numpy: P_{d,r}(C) / ||P_{d,r}(C)||_2 of
    C = mean x (y+ - y-)^T with y- the corpus rows ``neg``."""
    X = problem.X.astype(np.float64)
    C = X.T @ (problem.corpus[problem.pos].astype(np.float64) - problem.corpus[neg].astype(np.float64)) / X.shape[0]
    U, s, Vt = np.linalg.svd(C)
    return (U[:, :r] * s[:r]) @ Vt[:r] / s[0]


def test_explicit_negative_rows_set_the_closed_form_moment(problem):
    # the closed-form start is the SVD truncation of C = mean x (y+ - y-)^T; with negative_rows
    # the y- are those rows, not the first hard negatives.  Projection form, no validation, no
    # training steps that matter (lr tiny, one epoch): the operator is P_{d,r}(C) / ||P_{d,r}(C)||_2.
    neg = (problem.hard[:, 0] + 7) % problem.corpus.shape[0]
    want = _projection_start(problem, neg)
    ad = Adapter(rank=3, form="projection", geometry="dual", epochs=1, batch_size=48,
                 learning_rates=(1e-12,), seed=0).fit(problem.X, problem.pos, problem.corpus,
                                                      hard_negative_rows=problem.hard, negative_rows=neg)
    np.testing.assert_allclose(ad.operator_, want, atol=1e-6)
    # the default negatives (first hard negative) give another moment, another start
    d = Adapter(rank=3, form="projection", geometry="dual", epochs=1, batch_size=48,
                learning_rates=(1e-12,), seed=0).fit(problem.X, problem.pos, problem.corpus,
                                                     hard_negative_rows=problem.hard)
    assert not np.allclose(d.operator_, want, atol=1e-3)


def test_every_learning_rate_diverging_without_validation_keeps_the_start(problem):
    # no validation: the kept checkpoint is the last finished epoch; when every run diverges in
    # its first epoch there is none, so the start is kept and the fit says so
    want = _projection_start(problem, problem.hard[:, 0])
    bad = Adapter(rank=3, form="projection", geometry="dual", epochs=3, batch_size=8, learning_rates=(1e6,))
    with pytest.raises(ValueError, match="learning_rates: training diverged for every learning rate"):
        bad.fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard)
    assert bad.best_epoch_ == 0 and bad.learning_rate_ is None
    np.testing.assert_allclose(bad.operator_, want, atol=1e-6)


def test_validation_scorer_without_relevant_documents_scores_zero():
    # every validation query judged only non-relevant (grade 0): NDCG@10 is 0 (pytrec_eval's convention)
    torch = import_torch()
    rng = np.random.default_rng(0)
    corpus = rng.normal(size=(30, 4)).astype(np.float32)
    V = rng.normal(size=(3, 4)).astype(np.float32)
    table = RelevanceTable({f"q{i}": {"d1": 0, "d2": 0} for i in range(3)}, ["q0", "q1", "q2"],
                           [f"d{j}" for j in range(30)])
    scorer = ValidationScorer(V, table, torch.from_numpy(corpus))
    A = torch.zeros((1, 4))
    assert scorer.ndcg_lowrank(A, A, True) == 0.0
    # with one relevant judgement the same scorer is not zero (the branch is what gave 0)
    table2 = RelevanceTable({"q0": {"d1": 1}, "q1": {"d2": 0}, "q2": {"d2": 0}}, ["q0", "q1", "q2"],
                            [f"d{j}" for j in range(30)])
    order = np.argsort(-(V[0] @ corpus.T), kind="stable")
    rank1 = int(np.where(order == 1)[0][0])
    want = 1.0 / np.log2(rank1 + 2) if rank1 < 10 else 0.0
    assert ValidationScorer(V, table2, torch.from_numpy(corpus)).ndcg_lowrank(A, A, True) == pytest.approx(want)


def test_resolve_device_keeps_an_explicit_device():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("cuda:1") == "cuda:1"
    torch = import_torch()
    assert resolve_device(None) == ("cuda" if torch.cuda.is_available() else "cpu")


# ------------------------------------------------------------------ survivors of mutation testing (issue #19)
@pytest.mark.parametrize("form, std", [("augmented", 0.01), ("projection", None)])
def test_the_random_start_is_one_gaussian_draw_of_the_documented_scale(problem, form, std):
    """Appendix F.1's random start, as docs/rq3.md states it: A = B = one Gaussian draw with
    std 0.01 (augmented) or 1/sqrt(r) (projection).  A run whose every learning rate diverges in
    its first epoch (no validation) keeps the start, so the start itself can be inspected."""
    r = 3
    ad = Adapter(rank=r, form=form, init="random", geometry="dual", epochs=2, batch_size=8, learning_rates=(1e9,),
                 seed=4)
    with pytest.raises(ValueError, match="diverged"):
        ad.fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard)
    G = ad.query_map_
    np.testing.assert_array_equal(G, ad.doc_map_)  # A = B at the start
    sd = std if std is not None else 1 / np.sqrt(r)
    # the sample standard deviation of r*p = 36 draws: within 40% of the stated one (chi-square, far tails)
    assert 0.6 * sd < G.std() < 1.4 * sd and abs(G.mean()) < 3 * sd / np.sqrt(G.size)
    assert ad.init_scale_ is None
    again = Adapter(**ad.get_params())
    with pytest.raises(ValueError):
        again.fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard)
    np.testing.assert_array_equal(again.query_map_, G)  # seeded


@pytest.mark.parametrize("form", ["augmented", "projection"])
def test_the_closed_form_start_without_validation_has_scale_one(problem, form):
    ad = Adapter(rank=3, form=form, geometry="dual", epochs=1, batch_size=48, learning_rates=(1e-12,))
    ad.fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard)
    assert ad.init_scale_ == 1.0


def test_a_scalar_learning_rate_is_one_grid_point(problem):
    a = Adapter(rank=2, epochs=2, batch_size=16, learning_rates=2e-3).fit(
        problem.X, problem.pos, problem.corpus, **_fit_kw(problem))
    b = Adapter(rank=2, epochs=2, batch_size=16, learning_rates=(2e-3,)).fit(
        problem.X, problem.pos, problem.corpus, **_fit_kw(problem))
    assert a.learning_rate_ == 2e-3 and {h["learning_rate"] for h in a.history_} == {2e-3}
    np.testing.assert_array_equal(a.operator_, b.operator_)


def test_early_stopping_message_in_full(problem):
    with pytest.raises(ValueError) as e:
        Adapter(rank=2, epochs=2, early_stopping=1).fit(problem.X, problem.pos, problem.corpus)
    assert str(e.value) == "early_stopping: needs validation_queries and validation_relevance"


@pytest.mark.parametrize("tile", [1 << 25, 30])
def test_validation_scorer_equals_the_metrics_module_with_several_relevant_documents(tile):
    """Binary NDCG@10 of the scorer's own top-k against evaluate_indices (itself checked against
    pytrec_eval) on an exact ranking: queries with 1 to 4 relevant documents (the ideal DCG
    depends on how many), document 0 the best match of query 0 (the first corpus block)."""
    from asymgeo.retrieval.metrics import evaluate_indices

    torch = import_torch()
    rng = np.random.default_rng(5)
    N, p, m = 60, 6, 5
    corpus = rng.normal(size=(N, p))
    corpus = (corpus / np.linalg.norm(corpus, axis=1, keepdims=True)).astype(np.float32)  # unit rows
    V = rng.normal(size=(m, p)).astype(np.float32)
    V[0] = 3 * corpus[0]  # of unit vectors, document 0 itself scores highest
    ids = [f"d{j}" for j in range(N)]
    qrels = {f"q{i}": {f"d{j}": 1 for j in rng.choice(N, size=1 + i % 4, replace=False)} for i in range(m)}
    qrels["q0"]["d0"] = 1
    table = RelevanceTable(qrels, [f"q{i}" for i in range(m)], ids)
    scorer = ValidationScorer(V, table, torch.from_numpy(corpus), tile_elements=tile)
    A = torch.zeros((1, p))
    top = scorer.top_indices_lowrank(A, A, True)
    ref = np.argsort(-(V.astype(np.float64) @ corpus.T.astype(np.float64)), axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(top, ref)
    assert top[0, 0] == 0
    want = evaluate_indices(ref, table, ["ndcg@10"]).mean["ndcg@10"]
    assert scorer.ndcg_lowrank(A, A, True) == pytest.approx(want, rel=1e-12)


def test_choose_scale_divides_by_a_norm_below_one():
    import torch

    from asymgeo.adapters.training import choose_scale

    class Scorer:
        device = torch.device("cpu")

        def __init__(self):
            self.seen = []

        def ndcg_scaled(self, A, B, scales, augmented):
            self.seen.append(A.clone().numpy() * scales[0])
            return [0.0] * len(scales)

    s = Scorer()
    choose_scale(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), 0.25, s, scales=(1.0,))
    np.testing.assert_allclose(s.seen[0], [[4.0, 0.0]], rtol=1e-6)  # A * c / ||A^T B||_2 = A / 0.25


@pytest.mark.parametrize("form", ["augmented", "projection"])
def test_the_epoch_zero_checkpoint_is_scored_in_the_adapters_form(problem, form):
    """History row 0 is the start, scored before any update: its validation NDCG@10 equals the
    metrics module's on an exact search through the start operator of the same form."""
    from asymgeo.retrieval.metrics import evaluate_indices

    ad = Adapter(rank=3, form=form, geometry="dual", init="random", epochs=1, batch_size=48,
                 learning_rates=(1e-3,), seed=2).fit(problem.X, problem.pos, problem.corpus, **_fit_kw(problem))
    h0 = ad.history_[0]
    assert (h0["epoch"], h0["loss"]) == (0, None)
    # the random start: A = B = G, so M = [I +] G^T G (float32 maps as trained)
    rng = np.random.default_rng(np.random.SeedSequence(2, spawn_key=(1,)))
    G = rng.normal(0.0, 0.01 if form == "augmented" else 1 / np.sqrt(3), size=(3, problem.X.shape[1]))
    G = G.astype(np.float32).astype(np.float64)
    M = G.T @ G + (np.eye(G.shape[1]) if form == "augmented" else 0.0)
    S = problem.V.astype(np.float64) @ M @ problem.corpus.T.astype(np.float64)
    ref = np.argsort(-S, axis=1, kind="stable")[:, :10]
    want = evaluate_indices(ref, problem.table, ["ndcg@10"]).mean["ndcg@10"]
    assert h0["validation_ndcg"] == pytest.approx(want, abs=1e-12)


# ------------------------------------------------------------------ the training loop's decisions
def _planted_scores(monkeypatch, values):
    """ValidationScorer.ndcg_lowrank returns ``values`` in call order (start, then each epoch)."""
    import asymgeo.adapters.training as training

    it = iter(values)
    monkeypatch.setattr(training.ValidationScorer, "ndcg_lowrank", lambda self, A, B, augmented: next(it))


@pytest.mark.parametrize("second, best", [
    ([0.60, 0.70, 0.65, 0.65], (2e-3, 2, 0.70)),   # the second learning rate reaches a new best
    ([0.60, 0.58, 0.58], (1e-3, 1, 0.60)),         # it only ties the best: the earlier checkpoint stays
])
def test_patience_and_the_checkpoint_follow_the_validation_figures(problem, monkeypatch, second, best):
    """Planted validation NDCG@10 (random start, so no scale search calls the scorer): with
    patience 2 a learning rate stops after two epochs without a strict gain; the checkpoint is
    the highest figure, the earlier learning rate and epoch on ties."""
    first = [0.60, 0.55, 0.60]                      # epoch 3 only ties epoch 1: no gain, stop
    _planted_scores(monkeypatch, [0.50, *first, *second])
    ad = Adapter(rank=2, init="random", epochs=6, batch_size=16, learning_rates=(1e-3, 2e-3), early_stopping=2)
    ad.fit(problem.X, problem.pos, problem.corpus, **_fit_kw(problem))
    epochs = {lr: [h["epoch"] for h in ad.history_ if h["learning_rate"] == lr] for lr in (1e-3, 2e-3)}
    assert epochs[1e-3] == [0, 1, 2, 3] and epochs[2e-3] == list(range(len(second) + 1))
    assert [h["validation_ndcg"] for h in ad.history_] == [0.50, *first, 0.50, *second]
    assert (ad.learning_rate_, ad.best_epoch_, ad.validation_ndcg_) == best


def test_without_validation_one_epoch_is_kept_not_the_start(problem):
    ad = Adapter(rank=2, init="random", epochs=1, batch_size=16, learning_rates=(1e-2,), geometry="dual")
    ad.fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard)
    assert (ad.best_epoch_, ad.learning_rate_) == (1, 1e-2)
    start = Adapter(rank=2, init="random", epochs=1, batch_size=16, learning_rates=(1e9,), geometry="dual")
    with pytest.raises(ValueError):
        start.fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard)
    assert not np.allclose(ad.query_map_, start.query_map_)  # the trained maps, not the random start


def test_epoch_loss_is_the_row_weighted_mean_of_the_batch_losses(problem):
    """With a vanishing learning rate the maps stay at the closed-form start, so every batch's
    loss is the loop InfoNCE of that batch at the start; the epoch loss weighs them by rows."""
    from adapter_reference import info_nce

    from asymgeo.adapters.training import epoch_permutation

    bs = 20  # 48 rows: batches of 20, 20 and 8
    ad = Adapter(rank=3, geometry="dual", epochs=1, batch_size=bs, learning_rates=(1e-12,), seed=6)
    ad.fit(problem.X, problem.pos, problem.corpus, relevant_rows=problem.relevant)
    M = ad.operator_  # unchanged start (projection of a 1e-12 step): the operator of every batch
    order = epoch_permutation(6, 1, 48)
    X, corpus = problem.X.astype(np.float64), problem.corpus.astype(np.float64)
    losses, sizes = [], []
    for b0 in range(0, 48, bs):
        idx = order[b0:b0 + bs]
        rel = [problem.relevant[i] for i in idx]
        losses.append(info_nce(M, X[idx], problem.pos[idx], np.zeros((len(idx), 0), int), corpus, rel,
                               ad.temperature))
        sizes.append(len(idx))
    want = float(np.dot(losses, sizes) / 48)
    (h1,) = [h for h in ad.history_ if h["epoch"] == 1]
    assert h1["loss"] == pytest.approx(want, rel=1e-5)


def test_an_anchor_below_one_still_pulls_toward_the_start(problem):
    kw = dict(rank=2, geometry="dual", epochs=3, batch_size=16, learning_rates=(5e-2,), seed=1)
    free = Adapter(**kw).fit(problem.X, problem.pos, problem.corpus, **_fit_kw(problem))
    held = Adapter(anchor=0.5, **kw).fit(problem.X, problem.pos, problem.corpus, **_fit_kw(problem))
    start = Adapter(**{**kw, "learning_rates": (1e-12,)}).fit(problem.X, problem.pos, problem.corpus,
                                                              **_fit_kw(problem))
    d_free = np.linalg.norm(free.operator_ - start.operator_)
    d_held = np.linalg.norm(held.operator_ - start.operator_)
    assert d_held < d_free


def test_fit_on_a_float16_memmap_never_makes_a_float32_copy_of_the_corpus(tmp_path, monkeypatch):
    # issue #21: the loss reads the training rows only, validation streams blocks; numpy's
    # allocations are traced (tracemalloc), so a whole (N, p) float32 copy would show as its bytes
    import tracemalloc

    from asymgeo.adapters import training
    from asymgeo.adapters.training import prepare_training
    from asymgeo.retrieval.metrics import RelevanceTable

    rng = np.random.default_rng(0)
    N, p, n, m = 300_000, 32, 64, 16
    mm = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float16, shape=(N, p))
    for d0 in range(0, N, 50_000):
        blk = rng.normal(size=(50_000, p))
        mm[d0:d0 + 50_000] = blk / np.linalg.norm(blk, axis=1, keepdims=True)
    mm.flush()
    corpus = np.load(tmp_path / "c.npy", mmap_mode="r")
    pos = rng.choice(N, size=n, replace=False)
    X = np.asarray(corpus[pos], dtype=np.float32) + 0.1 * rng.normal(size=(n, p)).astype(np.float32)
    vpos = rng.choice(N, size=m, replace=False)
    V = np.asarray(corpus[vpos], dtype=np.float32)
    table = RelevanceTable({f"v{i}": {f"d{vpos[i]}": 1} for i in range(m)}, [f"v{i}" for i in range(m)],
                           [f"d{j}" for j in range(N)])
    hard = rng.integers(0, N, size=(n, 2))
    data = prepare_training(X, pos, corpus, hard_negative_rows=hard)
    assert isinstance(data.corpus, np.memmap)                   # kept by reference
    np.testing.assert_array_equal(data.train_rows, np.unique(np.concatenate([pos, hard.ravel()])))
    np.testing.assert_array_equal(data.Y_pos_np, np.asarray(corpus[pos], dtype=np.float32))
    monkeypatch.setattr(training, "_BLOCK_BYTES", 1 << 20)       # validation blocks of 1 MiB of float32
    copy_bytes = N * p * 4                                       # 38.4 MB; fixed-size blocks stay below a third
    import_torch()                                               # its import allocates, not the fit
    Adapter(geometry="dual", rank=2, epochs=1, learning_rates=(1e-3,), batch_size=32).fit(X, pos, corpus)
    tracemalloc.start()
    try:
        Adapter(geometry="dual", rank=2, epochs=2, learning_rates=(1e-3,), batch_size=32).fit(
            X, pos, corpus, hard_negative_rows=hard, validation_queries=V, validation_relevance=table)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < copy_bytes / 3, peak


def test_a_non_finite_float16_row_is_named_without_converting_the_corpus(tmp_path):
    from asymgeo.adapters.training import prepare_training

    rng = np.random.default_rng(1)
    C = rng.normal(size=(70_000, 4)).astype(np.float16)
    for bad, value in ((66_000, np.inf), (3, np.nan)):
        D = C.copy()
        D[bad, 2] = value
        with pytest.raises(ValueError, match=rf"corpus: contains NaN or infinite values \(first at index \[{bad}, 2\]\)"):
            prepare_training(rng.normal(size=(8, 4)), np.arange(8), D)
    D = C.copy()
    D[5, 1] = np.float16(65504)                                 # the largest finite float16 is accepted
    prepare_training(rng.normal(size=(8, 4)), np.arange(8), D)


def test_a_checked_read_only_corpus_file_is_scanned_once_until_it_changes(tmp_path, monkeypatch):
    # fit --geometry auto prepares three candidates on one cache (issue #21): the finiteness scan of
    # an unchanged read-only memmap runs once; a writable array, or a file rewritten since, is scanned
    import os

    from asymgeo.adapters import training
    from asymgeo.adapters.training import prepare_training

    scans = []
    real = training._finite_rows
    monkeypatch.setattr(training, "_finite_rows", lambda blk: scans.append(blk.shape[0]) or real(blk))
    rng = np.random.default_rng(3)
    C = rng.normal(size=(100, 4)).astype(np.float16)
    np.save(tmp_path / "c.npy", C)
    X = rng.normal(size=(8, 4))
    mm = np.load(tmp_path / "c.npy", mmap_mode="r")
    prepare_training(X, np.arange(8), mm)
    assert scans == [100]
    prepare_training(X, np.arange(8), np.load(tmp_path / "c.npy", mmap_mode="r"))  # a new map of the same file
    assert scans == [100]
    writable = np.load(tmp_path / "c.npy", mmap_mode="r+")
    prepare_training(X, np.arange(8), writable)                       # could change in place: scanned
    prepare_training(X, np.arange(8), writable)
    prepare_training(X, np.arange(8), np.array(mm))                   # an in-memory copy: scanned
    assert scans == [100, 100, 100, 100]
    del writable
    bad = C.copy()
    bad[7, 1] = np.nan
    np.save(tmp_path / "c.npy", bad)                                  # the file rewritten after the check
    st = os.stat(tmp_path / "c.npy")
    os.utime(tmp_path / "c.npy", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(ValueError, match=r"first at index \[7, 1\]"):
        prepare_training(X, np.arange(8), np.load(tmp_path / "c.npy", mmap_mode="r"))


def test_a_cache_validated_on_load_is_not_scanned_again_by_training(tmp_path, monkeypatch):
    from asymgeo.adapters import training
    from asymgeo.adapters.training import prepare_training
    from asymgeo.data.cache import validate_embeddings

    rng = np.random.default_rng(4)
    C = rng.normal(size=(50, 4))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    np.save(tmp_path / "corpus.npy", C.astype(np.float16))
    np.save(tmp_path / "queries.npy", C[:5].astype(np.float16))

    class _Cache:
        path = tmp_path
        meta = {"normalised": False}
        corpus = np.load(tmp_path / "corpus.npy", mmap_mode="r")
        queries = np.load(tmp_path / "queries.npy", mmap_mode="r")
        corpus_ids = [f"d{i}" for i in range(50)]
        query_ids = [f"q{i}" for i in range(5)]

    validate_embeddings(_Cache())
    scans = []
    monkeypatch.setattr(training, "_finite_rows", lambda blk: scans.append(1) or np.ones(blk.shape[0], bool))
    prepare_training(rng.normal(size=(8, 4)), np.arange(8), _Cache.corpus)
    assert scans == []


def test_the_independent_random_start_draws_the_duals_b_apart_and_leaves_the_rest(problem):
    """#37 (RQ3 at 0 degrees): ``init="random_independent"`` keeps the tied start's A (and the shared
    map) and gives the dual's B an independent draw of the same scale, so the dual start is not a
    symmetric operator.  Inspected as in the test above: every learning rate diverges and the
    start is kept."""
    kw = dict(rank=3, form="augmented", epochs=2, batch_size=8, learning_rates=(1e9,), seed=4)

    def start(**extra):
        ad = Adapter(**kw, **extra)
        with pytest.raises(ValueError, match="diverged"):
            ad.fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard)
        return ad

    tied = start(init="random", geometry="dual")
    ind = start(init="random_independent", geometry="dual")
    np.testing.assert_array_equal(ind.query_map_, tied.query_map_)  # A: the same draw as the tied start
    B = ind.doc_map_
    assert not np.allclose(B, ind.query_map_)
    # independent of A: their correlation over r*p = 36 entries is small (|rho| < 0.6, far tails)
    assert abs(np.corrcoef(B.ravel(), ind.query_map_.ravel())[0, 1]) < 0.6
    assert 0.6 * 0.01 < B.std() < 1.4 * 0.01
    M = ind.query_map_.T @ B
    assert np.abs(M - M.T).max() > 1e-6  # the start operator is not symmetric (the tied one is)
    np.testing.assert_allclose(tied.query_map_.T @ tied.doc_map_, (tied.query_map_.T @ tied.doc_map_).T)
    for init in ("random", "random_independent"):  # the shared family has one map: unchanged
        np.testing.assert_array_equal(start(init=init, geometry="shared").query_map_, tied.query_map_)
    np.testing.assert_array_equal(start(init="random_independent", geometry="dual").doc_map_, B)  # seeded


def test_the_corpus_is_checked_and_named_before_anything_is_trained():
    # mutation survivors of tools/mutation.py training: _check_corpus's refusals and the tensor path
    import torch

    from asymgeo.adapters.training import _check_corpus

    good = np.arange(12, dtype=np.float32).reshape(4, 3)
    t = torch.from_numpy(good.copy()).requires_grad_(True)  # a tensor needing detach() first
    np.testing.assert_array_equal(_check_corpus(t), good)
    assert _check_corpus(good) is good  # no copy of an ndarray
    np.testing.assert_array_equal(_check_corpus(good.tolist()), good)  # nested lists are read
    assert _check_corpus(np.ones((2, 2), dtype=bool)).dtype == bool  # booleans are numbers here
    cases = [(np.array([["a", "b"]], dtype=object), TypeError, "^corpus: expected a numeric array, got dtype object$"),
             (np.array([["a", "b"]]), TypeError, "^corpus: expected a numeric array, got dtype <U1$"),
             (np.ones((2, 2), dtype=complex), TypeError, "^corpus: complex values are not supported$"),
             (np.ones(4), ValueError, r"^corpus: expected a 2-d array of shape \(n, p\), got shape \(4,\)$"),
             (np.ones((0, 3)), ValueError, r"^corpus: expected a non-empty array, got shape \(0, 3\)$")]
    for bad, kind, message in cases:
        with pytest.raises(kind, match=message):
            _check_corpus(bad)
    one = np.ones((1, 1), dtype=np.float32)  # one value is not empty
    assert _check_corpus(one) is one
