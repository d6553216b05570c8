"""Tests of asymgeo.adapters.adapter / training: the Adapter estimator and its training loop."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from adapter_fixtures import make_problem
from adapter_reference import binary_ndcg10, info_nce, truncations
from hypothesis import given, settings
from hypothesis import strategies as st

from asymgeo.adapters import Adapter
from asymgeo.estimators.projections import NotFittedError
from asymgeo.kernels.selection import cars_score
from asymgeo.retrieval.metrics import evaluate_indices
from asymgeo.retrieval.search import exact_search


def _fit(problem, **kw):
    fit_kw = dict(hard_negative_rows=problem.hard, relevant_rows=problem.relevant,
                  validation_queries=problem.V, validation_relevance=problem.table)
    params = dict(rank=4, epochs=6, batch_size=16, learning_rates=(1e-2,), seed=0)
    params.update(kw)
    return Adapter(**params).fit(problem.X, problem.pos, problem.corpus, **fit_kw)


# ------------------------------------------------------------------ scoring surface
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), form=st.sampled_from(["augmented", "projection"]),
       shared=st.booleans(), r=st.integers(1, 5))
def test_scores_agree_with_the_operator_formula(seed, form, shared, r):
    rng = np.random.default_rng(seed)
    p = 7
    A, B = rng.normal(size=(r, p)), rng.normal(size=(r, p))
    if shared:
        B = A
    ad = Adapter.from_maps(A, None if shared else B, form=form)
    X, Y = rng.normal(size=(5, p)), rng.normal(size=(6, p))
    # score by the definition, pair by pair
    expected = np.array([[(x @ y if form == "augmented" else 0.0) + (A @ x) @ (B @ y) for y in Y] for x in X])
    np.testing.assert_allclose(ad.similarity(X, Y), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ad.transform_queries(X) @ ad.transform_documents(Y).T, expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ad.query_transform(X) @ Y.T, expected, rtol=1e-10, atol=1e-10)
    assert ad.geometry_ == ("shared" if shared else "dual")


def test_compact_index_ranks_like_the_operator(rng):
    A, B = rng.normal(size=(3, 9)), rng.normal(size=(3, 9))
    ad = Adapter.from_maps(A, B, form="projection")
    Y, X = rng.normal(size=(40, 9)), rng.normal(size=(4, 9))
    res = ad.index(Y).search(X, 5)
    expected = np.argsort(-(X @ A.T @ B @ Y.T), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(res.indices, expected)
    aug = Adapter.from_maps(A, B, form="augmented")  # x^T (I + A^T B) y: a (p + r)-column index
    res = aug.index(Y).search(X, 5)
    np.testing.assert_array_equal(res.indices, np.argsort(-(X @ (np.eye(9) + A.T @ B) @ Y.T), axis=1,
                                                          kind="stable")[:, :5])


def test_not_fitted_and_wrong_dimension(rng):
    with pytest.raises(NotFittedError):
        Adapter().similarity(np.ones((1, 3)), np.ones((1, 3)))
    ad = Adapter.from_maps(rng.normal(size=(2, 5)))
    with pytest.raises(ValueError, match="Y: has 4 features"):
        ad.similarity(np.ones((1, 5)), np.ones((2, 4)))


def test_get_params_round_trip():
    ad = Adapter(geometry="dual", rank=8, form="projection", early_stopping=3)
    params = ad.get_params()
    assert params["geometry"] == "dual" and params["early_stopping"] == 3
    assert Adapter(**params).get_params() == params


# ------------------------------------------------------------------ the training loop
def test_first_epoch_loss_is_infonce_at_the_closed_form_init(problem):
    # one batch (n <= batch_size): the epoch-1 loss is the loss before any update, at the
    # initial operator M / ||M||_2 (projection form, closed-form init)
    P = make_problem(n=10, N=40, p=8, k=2, seed=3)
    P.pos[1] = P.pos[0]  # duplicated positive: masked out of row 0's and row 1's denominators
    P.relevant[2] = {int(P.pos[2]), int(P.pos[3])}  # another row's positive labelled relevant
    ad = Adapter(geometry="shared", rank=3, form="projection", epochs=1, learning_rates=(1e-3,),
                 batch_size=256).fit(P.X, P.pos, P.corpus, hard_negative_rows=P.hard, relevant_rows=P.relevant,
                                     validation_queries=P.V, validation_relevance=P.table)
    X = P.X.astype(np.float64)
    C = X.T @ (P.corpus[P.pos] - P.corpus[P.hard[:, 0]]).astype(np.float64) / len(X)
    shared, _ = truncations(C, 3)
    M0 = shared / np.linalg.norm(shared, 2)
    expected = info_nce(M0, X, P.pos, P.hard, P.corpus.astype(np.float64), P.relevant, 0.05)
    loss = [h["loss"] for h in ad.history_ if h["epoch"] == 1][0]
    assert loss == pytest.approx(expected, rel=1e-4)


def test_training_beats_frozen_and_selects_the_best_checkpoint(problem):
    frozen = binary_ndcg10(problem.V @ problem.corpus.T, [{int(r)} for r in np.asarray(problem.table.grades(
        np.tile(np.arange(problem.corpus.shape[0]), (len(problem.table), 1))).argmax(1))])
    ad = _fit(problem, geometry="dual", learning_rates=(3e-3, 1e-2))
    assert ad.validation_ndcg_ > frozen + 0.05
    # the chosen checkpoint is the history's maximum (first one on ties)
    best = max(ad.history_, key=lambda h: h["validation_ndcg"])
    assert ad.validation_ndcg_ == best["validation_ndcg"]
    assert (ad.learning_rate_, ad.best_epoch_) == (best["learning_rate"], best["epoch"])
    # and its reported validation NDCG is what exact search + the metrics module give
    res = exact_search(problem.V, problem.corpus, 10, operator=ad.operator_)
    assert evaluate_indices(res.indices, problem.table, ["ndcg@10"]).mean["ndcg@10"] == pytest.approx(
        ad.validation_ndcg_, abs=1e-6)
    # and the brute-force NDCG of the operator's full score matrix
    rel = [{int(np.flatnonzero(problem.table.grades(np.arange(problem.corpus.shape[0])[None].repeat(
        len(problem.table), 0))[i])[0])} for i in range(len(problem.table))]
    assert binary_ndcg10(ad.similarity(problem.V, problem.corpus), rel) == pytest.approx(ad.validation_ndcg_, abs=1e-6)


def test_fitted_attributes(problem):
    ad = _fit(problem, geometry="shared")
    r, p = 4, problem.X.shape[1]
    assert ad.query_map_.shape == (r, p) and ad.doc_map_.shape == (r, p)
    np.testing.assert_array_equal(ad.query_map_, ad.doc_map_)
    np.testing.assert_allclose(ad.operator_, np.eye(p) + ad.query_map_.T @ ad.doc_map_)
    assert ad.operator_.dtype == np.float64 and ad.geometry_ == "shared" and ad.selection_ is None
    assert {"learning_rate", "epoch", "loss", "validation_ndcg"} <= set(ad.history_[1])
    assert ad.n_features_in_ == p


def test_deterministic_given_a_seed(problem):
    a = _fit(problem, geometry="dual", init="random")
    b = _fit(problem, geometry="dual", init="random")
    c = _fit(problem, geometry="dual", init="random", seed=1)
    np.testing.assert_array_equal(a.operator_, b.operator_)
    assert a.history_ == b.history_
    assert not np.array_equal(a.operator_, c.operator_)


def test_paired_seeds_shared_and_dual_start_equal_and_see_the_same_batches(problem):
    # random init draws one map for both families: with a learning rate too small to move,
    # the two families give the same operator at the same epoch
    s = _fit(problem, geometry="shared", init="random", learning_rates=(1e-12,), epochs=2)
    d = _fit(problem, geometry="dual", init="random", learning_rates=(1e-12,), epochs=2)
    losses_s = [h["loss"] for h in s.history_ if h["epoch"] > 0]
    losses_d = [h["loss"] for h in d.history_ if h["epoch"] > 0]
    assert len(losses_s) == 2 and losses_s == pytest.approx(losses_d, rel=1e-6)
    # a different seed permutes differently and initialises differently: other losses
    o = _fit(problem, geometry="dual", init="random", learning_rates=(1e-12,), epochs=2, seed=5)
    assert [h["loss"] for h in o.history_ if h["epoch"] > 0] != pytest.approx(losses_d, rel=1e-6)


def test_early_stopping_stops_after_patience(problem):
    ad = _fit(problem, geometry="dual", epochs=30, early_stopping=2, learning_rates=(0.3,))
    vals = [h["validation_ndcg"] for h in ad.history_]
    last = len(vals) - 1
    best_at = int(np.argmax(vals))
    assert last < 30 and last - best_at <= 2


def test_auto_runs_cars_on_the_training_triples(problem):
    ad = _fit(problem, geometry="auto")
    Yneg = problem.corpus[problem.hard[:, 0]]
    ref = cars_score(problem.X, problem.corpus[problem.pos], Yneg, 4, n_splits=20, seed=0)
    assert ad.selection_.score == pytest.approx(ref.score)
    assert ad.geometry_ == ref.choice


def test_without_validation_keeps_the_last_epoch(problem):
    ad = Adapter(rank=3, epochs=3, learning_rates=(1e-3, 1e-2)).fit(problem.X, problem.pos, problem.corpus,
                                                                     hard_negative_rows=problem.hard)
    assert ad.validation_ndcg_ is None and ad.best_epoch_ == 3
    finals = {h["learning_rate"]: h["loss"] for h in ad.history_ if h["epoch"] == 3}
    assert ad.learning_rate_ == min(finals, key=finals.get)


def test_import_asymgeo_does_not_import_torch():
    code = "import sys, asymgeo, asymgeo.adapters; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ bad input and faults
def test_too_few_training_queries(problem):
    with pytest.raises(ValueError, match="X: need at least 2 training queries"):
        Adapter(rank=2).fit(problem.X[:1], problem.pos[:1], problem.corpus)


def test_empty_validation_split(problem):
    with pytest.raises(ValueError, match="validation_queries: the validation split is empty"):
        Adapter(rank=2).fit(problem.X, problem.pos, problem.corpus, validation_queries=problem.V[:0],
                            validation_relevance=problem.table)
    with pytest.raises(ValueError, match="validation_relevance: required"):
        Adapter(rank=2).fit(problem.X, problem.pos, problem.corpus, validation_queries=problem.V)


@pytest.mark.parametrize("kw, needle", [
    (dict(positive_rows=np.full(48, 999)), "positive_rows: rows must lie in"),
    (dict(positive_rows=np.zeros(3, int)), "positive_rows: expected shape"),
    (dict(positive_rows=np.zeros(48)), "positive_rows: expected integer"),
    (dict(hard_negative_rows=np.zeros((5, 2), int)), "hard_negative_rows: expected shape"),
    (dict(corpus=np.zeros((10, 5), np.float32)), "corpus: dimension 5"),
    (dict(relevant_rows=[{0}]), "relevant_rows: expected 48"),
])
def test_bad_arrays_name_the_argument(problem, kw, needle):
    args = dict(positive_rows=problem.pos, corpus=problem.corpus)
    fit_kw = {}
    for key, v in kw.items():
        (args if key in args else fit_kw)[key] = v
    with pytest.raises((ValueError, TypeError), match=needle):
        Adapter(rank=2).fit(problem.X, args["positive_rows"], args["corpus"], **fit_kw)


@pytest.mark.parametrize("kw, needle", [
    (dict(geometry="both"), "geometry"), (dict(form="full"), "form"), (dict(init="zeros"), "init"),
    (dict(rank=0), "rank"), (dict(learning_rates=()), "learning_rates"), (dict(epochs=0), "epochs"),
    (dict(temperature=-1), "temperature"), (dict(early_stopping=0), "early_stopping"),
])
def test_bad_parameters(problem, kw, needle):
    with pytest.raises((ValueError, TypeError), match=needle):
        Adapter(**{"rank": 2, **kw}).fit(problem.X, problem.pos, problem.corpus)


def test_exploding_loss_stops_and_keeps_the_best_checkpoint(problem, caplog):
    # one sane and one absurd learning rate: the absurd run is stopped, the fit succeeds
    ad = _fit(problem, geometry="dual", learning_rates=(1e-2, 1e4))
    assert len(ad.stopped_) == 1 and "lr=10000" in ad.stopped_[0]
    assert np.isfinite(ad.operator_).all() and ad.learning_rate_ == 1e-2
    # every learning rate diverges: a ValueError naming learning_rates, best checkpoint kept
    bad = Adapter(geometry="dual", rank=4, epochs=5, batch_size=16, learning_rates=(1e4,))
    with pytest.raises(ValueError, match="learning_rates: training diverged"):
        bad.fit(problem.X, problem.pos, problem.corpus, hard_negative_rows=problem.hard,
                validation_queries=problem.V, validation_relevance=problem.table)
    assert np.isfinite(bad.operator_).all()
    assert bad.validation_ndcg_ == max(h["validation_ndcg"] for h in bad.history_)


def test_sparse_mask_path_equals_dense_mask_path(problem, monkeypatch):
    import asymgeo.adapters.training as training

    dense = _fit(problem, geometry="dual", epochs=2)
    monkeypatch.setattr(training, "_DENSE_MASK_MAX", 0)  # force the sorted-key lookup used for large n
    sparse = _fit(problem, geometry="dual", epochs=2)
    losses = [h["loss"] for h in dense.history_ if h["epoch"] > 0]
    assert [h["loss"] for h in sparse.history_ if h["epoch"] > 0] == pytest.approx(losses, rel=1e-6)
    np.testing.assert_allclose(sparse.operator_, dense.operator_, atol=1e-6)


def test_readme_faiss_example_searches_the_unchanged_index(problem):
    import faiss  # the faiss extra (part of dev)

    ad = _fit(problem, geometry="dual", epochs=2)
    index = faiss.IndexFlatIP(problem.corpus.shape[1])
    index.add(problem.corpus.astype("float32"))  # built from the frozen embeddings, before any adapter
    scores, ids = index.search(ad.query_transform(problem.V).astype("float32"), 10)
    S = ad.similarity(problem.V, problem.corpus)
    expected = np.argsort(-S, axis=1, kind="stable")[:, :10]
    np.testing.assert_allclose(scores, np.take_along_axis(S, expected, 1), atol=1e-5)
    assert (ids == expected).mean() > 0.99  # identical up to float32 near-ties


def test_progress_bar_shows_loss_and_validation_ndcg(problem, capsys):
    _fit(problem, geometry="shared", epochs=2, progress=True)
    err = capsys.readouterr().err
    assert "train shared" in err and "loss=" in err and "ndcg=" in err
    _fit(problem, geometry="shared", epochs=2, progress=False)
    assert "train shared" not in capsys.readouterr().err


def test_fit_restores_torch_settings(problem):
    import torch

    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    _fit(problem, geometry="shared", epochs=1)
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == det


def test_choose_scale_picks_the_best_c_smallest_on_ties_and_scales_by_the_norm():
    # a stand-in scorer records the maps and grid it is given and returns planted validation NDCG@10
    import torch

    from asymgeo.adapters.training import choose_scale

    class Scorer:
        device = torch.device("cpu")

        def __init__(self, planted):
            self.planted, self.seen = planted, []

        def ndcg_scaled(self, A, B, scales, augmented):
            self.seen.append((A.clone().numpy(), B.clone().numpy(), list(scales), augmented))
            return self.planted

    A = np.array([[1.0, 2.0, 0.0]])
    B = np.array([[0.0, 1.0, 1.0]])
    s = Scorer([0.30, 0.50, 0.50, 0.40])                      # c = 0, 0.5, 1, 2: tie at 0.5 and 1
    got = choose_scale(A, B, 4.0, s, scales=(2.0, 0.0, 1.0, 0.5))
    assert got.scale == 0.5 and got.validation_ndcg == 0.5     # the smaller c of the tie
    assert got.scores == {0.0: 0.30, 0.5: 0.50, 1.0: 0.50, 2.0: 0.40}
    (a, b, grid, aug), = s.seen                               # one corpus pass for the whole grid
    assert grid == [0.0, 0.5, 1.0, 2.0] and aug is True
    np.testing.assert_allclose(a, A / 4.0, rtol=1e-6)         # I + c A^T B / ||A^T B||_2 with the norm 4
    np.testing.assert_allclose(b, B)
    s = Scorer([0.1, 0.2])
    choose_scale(A, B, 0.0, s, scales=(0.0, 1.0))              # a zero norm scales by 1, not by 1 / 0
    np.testing.assert_allclose(s.seen[0][0], A, rtol=1e-6)


def test_scaled_scoring_equals_one_search_per_scale_and_streams_a_float16_memmap(tmp_path):
    # the one-pass grid against brute force: top-10 of V (I + c A^T B) C^T for each c, by numpy
    import torch

    from asymgeo.adapters.training import CorpusBlocks, ValidationScorer

    P = make_problem(n=40, N=300, p=8, k=2, seed=11)
    mm = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float16, shape=P.corpus.shape)
    mm[:] = P.corpus
    mm.flush()
    mm = np.load(tmp_path / "c.npy", mmap_mode="r")
    C32 = np.asarray(mm, dtype=np.float64)
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(3, 8)), rng.normal(size=(3, 8))
    blocks = CorpusBlocks(mm, "cpu")
    assert blocks._tensor is None                              # a memmap is streamed, never copied whole
    scorer = ValidationScorer(P.V, P.table, blocks, tile_elements=P.V.shape[0] * 64)  # several blocks, no base
    assert scorer.base is None and scorer.block < P.corpus.shape[0]
    grid = [0.0, 0.5, 2.0]
    got = scorer.top_indices_scaled(torch.tensor(A, dtype=torch.float32), torch.tensor(B, dtype=torch.float32),
                                    grid, True)
    for c, idx in zip(grid, got, strict=True):
        S = P.V.astype(np.float64) @ (np.eye(8) + c * A.T @ B) @ C32.T
        want = np.argsort(-S, axis=1, kind="stable")[:, :10]
        np.testing.assert_array_equal(np.sort(idx, axis=1), np.sort(want, axis=1))


def test_closed_form_init_refuses_a_moment_without_positive_part():
    # D = -X: sym(C) = -X^T X / n is negative definite, the shared closed form is zero
    P = make_problem(n=30, N=40, p=6, k=2, seed=4)
    pos_rows = np.arange(30) % 40
    corpus = P.corpus.copy()
    corpus[pos_rows] = -P.X                                   # every positive points away from its query
    with pytest.raises(ValueError, match="no positive part to start from; use init='random'"):
        Adapter(geometry="shared", rank=2, epochs=1, learning_rates=(1e-3,)).fit(
            P.X, pos_rows, corpus, validation_queries=P.V, validation_relevance=P.table)
