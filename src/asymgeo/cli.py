"""Command-line interface: a thin layer over the library.

Each subcommand is a pair ``_add_<name>(subparsers)`` / ``_run_<name>(args)``; the
``_run_`` function does argument plumbing and printing only, calling one or two
library functions.  Errors the library raises (``ValueError``, ``TypeError``, ``OSError``
such as ``FileNotFoundError``, ``ImportError`` for a missing extra, ``MemoryError``) become
one line on stderr and exit code 2; any other exception too (its type named; set
``ASYMGEO_DEBUG=1`` for the traceback).  Library warnings (``logging``, e.g. dataset
faults) are shown as one ``asymgeo CMD: warning: ...`` line each, and notices (where a new file
such as a triple cache was written) as one ``asymgeo CMD: note: ...`` line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence

from ._runtime import json_default
from ._version import __version__

_EPILOG_TEMPLATE = "example:\n  {example}"

_COMMANDS: list[tuple[str, Callable[[argparse._SubParsersAction], argparse.ArgumentParser]]] = []


def _command(name: str):
    """Register an ``_add_<name>`` function that builds the subparser."""

    def deco(fn):
        _COMMANDS.append((name, fn))
        return fn

    return deco


#: What argparse should read as a (negative) number, not an option: ``-1``, ``-0.5``, ``-1e-3``.
#: argparse's own pattern has no exponent, so ``--learning-rates -1e-3`` would be taken for an
#: unknown option instead of reaching the range check.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _subparser(sub: argparse._SubParsersAction, name: str, help_text: str, example: str) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=_EPILOG_TEMPLATE.format(example=example),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p._negative_number_matcher = _NEGATIVE_NUMBER
    return p


def _print_json(obj) -> None:
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, default=json_default, allow_nan=False)
    except ValueError as exc:  # NaN / inf: not JSON, and never a figure we should print
        raise ValueError(f"the result holds a non-finite number ({exc}); refusing to print invalid JSON") from None
    sys.stdout.write(text)
    sys.stdout.write("\n")


# --------------------------------------------------------------------------- demo
@_command("demo")
def _add_demo(sub):
    p = _subparser(
        sub,
        "demo",
        "Run the paper's two-view simulation (Appendix F, RQ1) and show the shared-to-dual crossover.",
        "asymgeo demo --angle 1.2 --rank 8 --n 32 128 512 --seed 1 --json",
    )
    p.add_argument("--angle", type=float, default=1.2, help="document-loading rotation in radians (default 1.2)")
    p.add_argument("--rank", type=int, default=8, help="fitted rank r (default 8)")
    p.add_argument("--n", type=int, nargs="+", default=[32, 128, 512, 2048], help="training sizes (default 32 128 512 2048)")
    p.add_argument("--seed", type=int, default=20260809, help="master seed (default 20260809, the paper's)")
    p.add_argument("--n-test", type=int, default=1000, help="held-out test queries (default 1000)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=_run_demo)
    return p


def _run_demo(args) -> int:
    from .experiments.demo import format_demo, run_demo

    result = run_demo(angle=args.angle, rank=args.rank, sizes=args.n, seed=args.seed, n_test=args.n_test)
    if args.json:
        _print_json(result)
    else:
        print(format_demo(result))
    return 0


# --------------------------------------------------------------------------- embed
def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", metavar="DATASET", help="BEIR folder, or a name under --data-dir")
    p.add_argument("--encoder", default="all-MiniLM-L6-v2", help="encoder name, HF id or folder (default all-MiniLM-L6-v2)")
    p.add_argument("--data-dir", default=None, help="datasets by name (default $ASYMGEO_DATA_DIR, ~/.cache/asymgeo/datasets)")
    p.add_argument("--cache-dir", default=None, help="embedding caches (default $ASYMGEO_CACHE_DIR, ~/.cache/asymgeo/embeddings)")


def _add_triples_dir(p: argparse.ArgumentParser) -> None:
    """``--triples-dir DIR`` on a command that mines hard negatives (call after ``set_defaults(func=...)``):
    the folder wins over ``$ASYMGEO_TRIPLES_DIR`` and the cache folder; the variable is set to it for
    the command's duration (worker processes inherit it) and restored afterwards."""
    p.add_argument("--triples-dir", default=None, metavar="DIR",
                   help="where mined hard negatives are cached (default $ASYMGEO_TRIPLES_DIR, else beside the "
                        "embedding cache when writable, else ~/.cache/asymgeo/triples)")
    run = p.get_default("func")

    def run_with_triples_dir(args) -> int:
        if args.triples_dir is None:
            return run(args)
        if not str(args.triples_dir).strip():
            raise ValueError("--triples-dir: empty path (an unset shell variable?); name a folder")
        from pathlib import Path

        from ._atomic import check_writable_parent

        folder = Path(os.path.expanduser(args.triples_dir))
        if folder.exists() and not folder.is_dir():  # the user named it: refused before any work
            raise NotADirectoryError(f"--triples-dir: {folder} is a file, not a folder; nothing was computed")
        check_writable_parent(folder / "triples", "--triples-dir")
        old = os.environ.get("ASYMGEO_TRIPLES_DIR")
        os.environ["ASYMGEO_TRIPLES_DIR"] = os.path.abspath(os.path.expanduser(args.triples_dir))
        try:
            return run(args)
        finally:
            if old is None:
                os.environ.pop("ASYMGEO_TRIPLES_DIR", None)
            else:
                os.environ["ASYMGEO_TRIPLES_DIR"] = old

    p.set_defaults(func=run_with_triples_dir)


@_command("embed")
def _add_embed(sub):
    p = _subparser(
        sub,
        "embed",
        "Encode a BEIR dataset's queries and corpus into the float16 embedding cache (resumable).",
        "asymgeo embed scifact --encoder all-MiniLM-L6-v2 --data-dir ../shared/data --cache-dir /tmp/emb",
    )
    _add_data_args(p)
    p.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    p.add_argument("--chunk-size", type=int, default=2048, help="rows per saved part, the resume unit (default 2048)")
    p.add_argument("--device", default=None, help="torch device (default cuda when available, else cpu)")
    p.add_argument("--download", action="store_true", help="download the BEIR archive if DATASET is not found")
    p.add_argument("--overwrite", action="store_true", help="re-encode even if a complete cache exists")
    p.add_argument("--workers", type=int, default=1, help="encoding processes (local) or Ray tasks at a time (default 1: this process); the cache is identical")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="local process pool (default) or Ray tasks (extra asymgeo[ray])")
    p.add_argument("--address", default=None, help="Ray cluster address, e.g. auto or ray://head:10001 (with --executor ray; default a local cluster)")
    p.add_argument("--threads-per-worker", type=int, default=None, help="torch threads per worker (default: cores // workers)")
    p.set_defaults(func=_run_embed)
    return p


def _run_embed(args) -> int:
    from .data import encode_dataset, load_beir, warn_faults

    ds = load_beir(args.dataset, data_dir=args.data_dir, download=args.download)
    warn_faults(ds)
    cache = encode_dataset(
        ds, args.encoder, cache_dir=args.cache_dir, device=args.device, batch_size=args.batch_size,
        chunk_size=args.chunk_size, overwrite=args.overwrite, workers=args.workers, executor=args.executor,
        address=args.address, threads_per_worker=args.threads_per_worker,
    )
    print(f"{cache.path}: corpus {cache.corpus.shape}, queries {cache.queries.shape}, {cache.corpus.dtype}")
    return 0


# --------------------------------------------------------------------------- import
@_command("import")
def _add_import(sub):
    p = _subparser(
        sub,
        "import",
        "Write embeddings computed elsewhere (.npy arrays and id lists) as a dataset's verified embedding cache.",
        "asymgeo import scifact --encoder all-MiniLM-L6-v2 --corpus-embeddings corpus.npy --corpus-ids corpus_ids.txt "
        "--query-embeddings queries.npy --query-ids query_ids.txt --data-dir ../shared/data --cache-dir emb",
    )
    _add_data_args(p)
    p.add_argument("--corpus-embeddings", required=True, metavar="FILE.npy", help="(N, p) document embeddings")
    p.add_argument("--corpus-ids", required=True, metavar="FILE.txt", help="their document ids, one per line")
    p.add_argument("--query-embeddings", required=True, metavar="FILE.npy", help="(Q, p) query embeddings")
    p.add_argument("--query-ids", required=True, metavar="FILE.txt", help="their query ids, one per line")
    p.add_argument("--normalize", action="store_true",
                   help="scale every row to unit L2 norm (without it, rows must already have norm 1)")
    p.add_argument("--overwrite", action="store_true", help="replace a cache already there")
    p.set_defaults(func=_run_import)
    return p


def _run_import(args) -> int:
    from .data import import_embeddings

    cache = import_embeddings(args.dataset, args.encoder, corpus=args.corpus_embeddings, corpus_ids=args.corpus_ids,
                              queries=args.query_embeddings, query_ids=args.query_ids, normalize=args.normalize,
                              data_dir=args.data_dir, cache_dir=args.cache_dir, overwrite=args.overwrite)
    print(f"{cache.path}: corpus {cache.corpus.shape}, queries {cache.queries.shape}, {cache.corpus.dtype}; "
          f"verified against {args.dataset}")
    return 0


# --------------------------------------------------------------------------- select
def _selector_names(command: str) -> str:
    """The built-in selector names for ``--help`` (read from the registry's catalogue: no numpy)."""
    from .selectors.catalogue import BUILTIN_RULES

    return ", ".join(BUILTIN_RULES) + ("" if command == "fit" else " (validation: fit --geometry auto only)")


_MAX_SPLITS = 10_000  # the standard error is settled long before; more only burns minutes

#: The rank of ``select`` and ``fit`` when ``--rank`` is not given: one default for both.
DEFAULT_RANK = 16


@_command("select")
def _add_select(sub):
    p = _subparser(
        sub,
        "select",
        "Choose shared or dual geometry with CARS (eq. 7) on a dataset's frozen training triples.",
        "asymgeo select scifact --encoder all-MiniLM-L6-v2 --rank 16 --validate "
        "--data-dir ../shared/data --cache-dir ../shared/embeddings",
    )
    _add_data_args(p)
    p.add_argument("--rank", type=int, default=DEFAULT_RANK, help=f"fitted rank r (default {DEFAULT_RANK}, as fit)")
    p.add_argument("--split", default="train", help="train, validation, test or a qrels split (default train)")
    p.add_argument("--n-splits", type=int, default=20, help="CARS half-splits L, 2 to 10,000 (default 20)")
    p.add_argument("--selector-dim", type=int, default=None, help="fixed random projection dimension (paper: 256)")
    p.add_argument("--seed", type=int, default=0, help="seed of the half-splits (default 0)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--validate", action="store_true",
                   help="also run the five-fold held-out check of the decision (paper Table 1 protocol)")
    p.add_argument("--selector", default="cars", metavar="NAME",
                   help="a rule of the selector registry (docs/selectors.md): " + _selector_names("select")
                        + "; cars (eq. 7) by default; ranking holds out 20%% of the queries and searches the corpus")
    p.add_argument("--centred", action="store_true",
                   help="centre queries and Y+ - Y- first: decide on the directional part only (the rank-1 "
                        "mean term, identical for both geometries as a fixed bias, left out)")
    p.add_argument("--folds", type=int, default=None,
                   help="held-out folds of --validate (default 5; each must hold at least 32 queries)")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="with --validate: draw held-out L_s - L_d against n and each selector's choices (PNG)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --plot file that asymgeo did not draw (its own figures are replaced)")
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress of --validate (shown on stderr, also when it is not a terminal)")
    p.add_argument("--retrieval", action="store_true",
                   help="with --validate: also score both closed forms I + cM_g on the held-out folds by exact "
                        "search (NDCG@10; the verdict speaks of operator loss, this of retrieval)")
    p.add_argument("--n-train", type=int, default=None, metavar="N",
                   help="with --split train: decide on a seeded subset of N training queries (fit's --n-train "
                        "subset for the same --seed); only those are mined (default all)")
    p.add_argument("--mining", choices=["exact", "ivf", "hnsw"], default="exact",
                   help="how hard negatives are mined: exact search (default) or an approximate FAISS index for "
                        "large corpora (its recall@8 against exact mining is measured on 200 queries and printed)")
    p.set_defaults(func=_run_select)
    _add_triples_dir(p)
    return p


#: Smallest held-out fold ``select --validate`` accepts: below it a fold's loss is noise, and
#: many tiny folds multiply the cells (``--folds 100`` on SciFact: 600 cells of 6 queries).
_MIN_FOLD_QUERIES = 32


def _check_select_args(args) -> None:
    if not 2 <= args.n_splits <= _MAX_SPLITS:
        raise ValueError(f"--n-splits: expected 2 to {_MAX_SPLITS:,} half-splits (a standard error needs at least 2), "
                         f"got {args.n_splits}")
    if args.folds is not None and not args.validate:
        raise ValueError("--folds: only used with --validate (the held-out check); add --validate or drop --folds")
    if args.folds is None:
        args.folds = 5
    if args.validate and args.folds < 2:
        raise ValueError(f"--folds: expected an integer >= 2, got {args.folds}")
    if getattr(args, "plot", None) is not None:
        if not args.validate:
            raise ValueError("--plot: draws the held-out check; add --validate")
        from ._atomic import check_plot_destination

        check_plot_destination(args.plot, "--plot", overwrite=bool(getattr(args, "overwrite", False)))
        _check_plot_folder(args.plot, "nothing was computed")
    elif getattr(args, "overwrite", False):
        raise ValueError("--overwrite: only replaces an existing --plot file; add --plot FILE or drop --overwrite")
    if getattr(args, "retrieval", False) and not args.validate:
        raise ValueError("--retrieval: scores the closed forms on the held-out folds of --validate; add --validate")
    n_train = getattr(args, "n_train", None)
    if n_train is not None:
        if args.split != "train":
            raise ValueError(f"--n-train: subsets the training queries; it needs --split train, got --split {args.split}")
        if n_train < 1:
            raise ValueError(f"--n-train: expected a positive integer, got {n_train}")


def _check_fold_size(folds: int, n_queries: int) -> None:
    if n_queries // folds < _MIN_FOLD_QUERIES:
        most = n_queries // _MIN_FOLD_QUERIES
        raise ValueError(f"--folds {folds}: held-out folds of {n_queries:,} queries would hold "
                         f"{n_queries // folds} each; need at least {_MIN_FOLD_QUERIES} per fold "
                         + (f"(at most --folds {most})" if most >= 2 else "(too few queries to validate)"))


def _selector_decision(args, tr, X, D, Xc, Dc, cars, centred: bool | None = None):
    """The registry rule ``--selector``'s :class:`~asymgeo.selectors.Decision` on the raw or centred
    triples (``centred``: default ``--centred``; ``cars``: the CARS result already computed on them)."""
    from .selectors.cars import cars_decision
    from .selectors.registry import SelectionContext, get_rule

    rule = get_rule(args.selector, argument="--selector")
    centred = bool(args.centred) if centred is None else bool(centred)
    Xs, Ds = (Xc, Dc) if centred else (X, D)
    context = SelectionContext(n_splits=args.n_splits, selector_dim=args.selector_dim, cv_folds=5,
                               cars=cars_decision(cars))
    if "retrieval" in rule.needs:  # a fifth of these queries held out, searched over the corpus

        from .data import load_beir, load_embeddings
        from .retrieval.ranking_selector import pool_validation, ranking_scorer

        ds = load_beir(args.dataset, data_dir=args.data_dir)
        emb = load_embeddings(ds, args.encoder, cache_dir=args.cache_dir)
        corpus = emb.corpus  # the float16 memory map: exact search upcasts it block by block (no N x p copy)
        Xs, Ds, V, table = pool_validation(Xs, Ds, tr.query_ids, ds.all_qrels(), corpus, emb.corpus_ids, seed=args.seed)
        context = context.with_(score_operator=ranking_scorer(V, table, corpus), cars=None)
    return rule.decide(Xs, Ds, args.rank, seed=args.seed, context=context)


def _other_reading(args, tr, X, D, Xc, Dc, decision, other_cars) -> tuple[str, str]:
    """``(rule, choice)`` on the other reading (centred when raw, raw when centred) by the same rule;
    a rule that needs the corpus is not rerun: CARS's reading (``other_cars``) stands in, named."""
    from .selectors.catalogue import REFERENCE_RULE
    from .selectors.registry import get_rule

    if decision.rule == REFERENCE_RULE or not get_rule(decision.rule).triples_only:
        return REFERENCE_RULE, other_cars.choice
    return decision.rule, _selector_decision(args, tr, X, D, Xc, Dc, other_cars, centred=not args.centred).choice


def _check_selector(args) -> None:
    """``--selector`` names a registered rule that ``select`` can run (before any data is loaded)."""
    from .selectors.registry import get_rule

    rule = get_rule(args.selector, argument="--selector")
    if "trained" in rule.needs:
        raise ValueError(f"--selector {rule.name}: needs both families trained; use `asymgeo fit --geometry auto "
                         f"--selector {rule.name}`")
    args.selector = rule.name  # an alias resolved once


def _decision_detail(decision, cars) -> str:
    from .selectors.catalogue import REFERENCE_RULE
    from .selectors.registry import get_rule

    if decision.rule == REFERENCE_RULE:  # CARS's own score is the next line
        return ""
    rule = get_rule(decision.rule)
    return f" ({rule.label}: {rule.explain(decision)}; CARS: {cars.choice})"


def _select_triples(args):
    """``select``'s triples: the split, or (``--n-train``) fit's seeded subset of the training queries,
    drawn before mining so only it is searched; ``--mining`` approximate prints its recall."""
    from .data import load_triples

    split = args.split
    if getattr(args, "n_train", None) is not None:  # drawn before mining: only the subset is searched
        from .adapters.workflow import training_pool
        from .data import load_beir, nested_subsets

        ds = load_beir(args.dataset, data_dir=args.data_dir)
        pool = training_pool(ds)
        if args.n_train > len(pool):
            raise ValueError(f"--n-train: {args.n_train} exceeds the {len(pool)} training queries of {ds.name}")
        split = nested_subsets(pool, sizes=[int(args.n_train)], seed=int(args.seed))[int(args.n_train)]
    mining = getattr(args, "mining", "exact")
    tr = load_triples(args.dataset, args.encoder, split, data_dir=args.data_dir, cache_dir=args.cache_dir,
                      require=True, mining=mining)
    if mining != "exact":  # what the approximation costs, on a seeded sample of the decided-on queries
        from .data import load_beir as _load_beir
        from .data import load_embeddings
        from .data.triples import mining_recall

        ds = _load_beir(args.dataset, data_dir=args.data_dir)
        emb = load_embeddings(ds, args.encoder, cache_dir=args.cache_dir)
        labels = ds.all_qrels()
        excl = [set(emb.corpus_rows([d for d, g in labels.get(q, {}).items() if emb.has_corpus_id(d)]).tolist())
                for q in tr.query_ids]
        rec = mining_recall(tr.X, emb.corpus, excl, 8, index=mining, sample=min(200, len(tr)), seed=args.seed)
        print(f"mining: {mining} (approximate), recall@{rec['k']} {rec['recall']:.3f} against exact mining on "
              f"{rec['n_queries']} queries", file=sys.stderr)
    return tr


def _validation_pool_arg(text: str) -> int | str:
    """``--validation-pool``: ``auto``, ``none`` or a number of candidates (>= 10)."""
    if text in ("auto", "none"):
        return text
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto, none or an integer >= 10, got {text!r}") from None
    if k < 10:
        raise argparse.ArgumentTypeError(f"expected at least 10 candidates per query (NDCG@10 needs 10), got {k}")
    return k


def _run_select(args) -> int:
    import numpy as np

    from .kernels.geometry import approximation_gap, relevance_moment
    from .kernels.selection import cars_score

    _check_select_args(args)
    _check_selector(args)
    tr = _select_triples(args)
    if args.validate:
        _check_fold_size(args.folds, len(set(tr.query_ids)))
    if args.selector_dim is not None and args.selector_dim >= tr.dim:
        print(f"asymgeo select: warning: --selector-dim {args.selector_dim} >= p = {tr.dim}: "
              "no random projection applied", file=sys.stderr)
    from .kernels.operator_risk import mean_term

    X, D = np.asarray(tr.X, dtype=np.float64), np.asarray(tr.Y_pos, dtype=np.float64) - np.asarray(tr.Y_neg)
    mt = mean_term(X, D)
    Xc, Dc = X - mt.x_mean, D - mt.d_mean
    zeros = np.zeros_like(Dc)

    def cars_on(centred: bool):
        if centred:
            return cars_score(Xc, Dc, zeros, args.rank, n_splits=args.n_splits, seed=args.seed,
                              selector_dim=args.selector_dim)
        return cars_score(tr.X, tr.Y_pos, tr.Y_neg, args.rank, n_splits=args.n_splits, seed=args.seed,
                          selector_dim=args.selector_dim)

    from .selectors.catalogue import REFERENCE_RULE

    res = cars_on(args.centred)
    other = cars_on(not args.centred)  # what centring changes (or what the raw triples say)
    decision = _selector_decision(args, tr, X, D, Xc, Dc, res)
    choice = decision.choice
    from .selectors.registry import get_rule

    other_rule, other_choice = _other_reading(args, tr, X, D, Xc, Dc, decision, other)
    moment = Xc.T @ Dc / len(tr) if args.centred else relevance_moment(tr.X, tr.Y_pos, tr.Y_neg)
    gap = approximation_gap(moment, res.rank)
    validation = _select_validation(args, tr) if args.validate else None
    _plot_select_validation(args, tr, validation)
    retrieval = _select_retrieval(args, tr) if getattr(args, "retrieval", False) else None
    verdict = (select_verdict(choice, validation, selector=args.selector)
               + mean_term_note(choice, float(mt.share), bool(args.centred), other_choice,
                                rule=get_rule(other_rule).label)
               + operator_loss_note(retrieval, validated=validation is not None))
    source = triples_source(args, tr)
    mean_info = {"share": float(mt.share), "centred_share": float(mt.centred_share),
                 "centred": bool(args.centred), "other_choice": other.choice,
                 "other_score": float(other.score), "other_standard_error": float(other.standard_error),
                 "other_rule": other_rule, "other_rule_choice": other_choice}
    if args.json:
        out = {"dataset": tr.dataset, "encoder": tr.encoder, "split": tr.split, "n": len(tr), "n_source": source,
               "centred": bool(args.centred), "selector": args.selector, "choice": choice, "verdict": verdict,
               "cars": res.as_dict(), "decision": decision.as_dict(),
               **({args.selector: _native_dict(decision.result)} if decision.rule != REFERENCE_RULE and
                  decision.result is not None else {}),
               "approximation_gap": gap.as_dict(), "mean_term": mean_info}
        if validation is not None:
            out["validation"] = validation
            if getattr(args, "plot", None):
                out["plot"] = str(args.plot)
        if retrieval is not None:
            out["retrieval"] = retrieval
        _print_json(out)
        return 0
    print(f"verdict: {verdict}")
    print(f"{tr.dataset} / {tr.encoder}, {tr.split} triples{' (centred)' if args.centred else ''}: n = {len(tr)} "
          f"({source}), p = {tr.dim}, rank {res.rank}, L = {res.n_splits}")
    print(f"decision: {choice}" + _decision_detail(decision, res))
    print(f"CARS score: {res.score:.6g} +/- {res.standard_error:.2g} (spread over the {res.n_splits} half-splits of "
          "these triples; not a sampling error: --validate measures how often the decision holds)")
    print(f"mean term: {100 * mt.share:.0f}% of the training moment is the rank-1 mean x̄ d̄ᵀ; "
          + (f"raw, CARS picks {other.choice} ({other.score:.3g})" if args.centred else
             f"centred (--centred, directional part only), CARS picks {other.choice} ({other.score:.3g})"))
    print(f"approximation gap of the training moment M (Theorem 1): {gap.gap:.6g} = shared error "
          f"{gap.shared_error:.6g} - dual error {gap.dual_error:.6g} (each family's smallest ||M - fit||_F^2 at rank "
          f"{gap.rank})")
    if validation is not None:
        _print_validation(validation)
        if getattr(args, "plot", None):
            print(f"plot: {args.plot}")
    if retrieval is not None:
        _print_retrieval(retrieval)
    return 0


def triples_source(args, tr) -> str:
    """Which queries ``select``'s n triples are, in words: a part of the adaptation split (the one
    ``fit`` trains on, its sizes beside it), a qrels file, or the ids given."""
    from .data import adaptation_split_source, load_beir
    from .data.triples import ADAPTATION_SPLITS

    skipped = sum(tr.skipped.values())
    left = f"; {skipped:,} of its queries have no positive and give no triple" if skipped else ""
    if tr.split in ADAPTATION_SPLITS:
        src = adaptation_split_source(load_beir(args.dataset, data_dir=args.data_dir))
        part = {"train": "training", "validation": "validation", "test": "test"}[tr.split]
        return (f"the adaptation split's {part} part, the queries `fit` "
                f"{'trains on' if tr.split == 'train' else 'holds out'}: {src['description']}{left}")
    if tr.split == "custom" and getattr(args, "n_train", None) is not None:
        return (f"a seeded subset of {args.n_train:,} of the adaptation split's training queries (--n-train, seed "
                f"{args.seed}: the queries `fit --n-train {args.n_train} --seed {args.seed}` trains on){left}")
    if tr.split == "custom":
        return f"the query ids given{left}"
    return f"every labelled query of qrels/{tr.split}.tsv{left}"


def mean_term_note(choice: str, share: float, centred: bool, other_choice: str, rule: str = "CARS") -> str:
    r"""The verdict's warning when the rank-1 mean term carries more than half of the raw moment and
    the centred (directional) reading decides otherwise (issue #37); ``""`` otherwise.

    ``share`` is :math:`\|\bar x \bar d^\top\|_F^2 / \|\widehat C\|_F^2` of the raw training moment
    :math:`\widehat C = X^\top D / n`; ``other_choice`` is ``rule``'s choice on the centred triples."""
    if centred or share <= 0.5 or other_choice == choice:
        return ""
    return (f"; the {choice} advantage is the mean term ({100 * share:.0f}% of the moment); centred, {other_choice} "
            f"({rule} on the directional part: --centred)")


def operator_loss_note(retrieval: dict | None, *, validated: bool = True) -> str:
    r"""The verdict's last clause: what it speaks of.  CARS, SURE and ``--validate`` judge the
    operator loss :math:`\|\widehat M_g - M\|_F^2` (held-out: :math:`L_g`), not retrieval; with
    ``--retrieval`` the held-out NDCG@10 of both closed forms (:func:`asymgeo.retrieval.heldout_retrieval`)
    is quoted beside it, the difference dual - shared with its paired standard error."""
    if retrieval is None:
        how = "--retrieval" if validated else "--validate --retrieval"
        return (f"; this speaks of operator loss, not retrieval ({how} adds NDCG@10 of both closed forms by "
                "exact search)")
    d, se = retrieval["diff"], retrieval["standard_error"]
    lead = "dual" if d > 2 * se else "shared" if d < -2 * se else "neither family beyond 2 SE"
    return (f"; this speaks of operator loss; retrieval on {retrieval['n_queries']} held-out queries (closed forms, "
            f"exact search): NDCG@10 shared {retrieval['ndcg']['shared']:.4f}, dual {retrieval['ndcg']['dual']:.4f}, "
            f"dual - shared {d:+.4f} +/- {se:.4f} ({lead})")


def _select_retrieval(args, tr) -> dict:
    """``select --validate --retrieval``: both closed forms fitted on each held-out fold's training
    pool and scored by exact-search NDCG@10 on that fold's queries (the folds of ``--validate``)."""
    import numpy as np

    from .data import load_beir, load_embeddings
    from .retrieval.ranking_selector import heldout_retrieval

    ds = load_beir(args.dataset, data_dir=args.data_dir)
    emb = load_embeddings(ds, args.encoder, cache_dir=args.cache_dir)
    X = np.asarray(tr.X, dtype=np.float64)
    D = np.asarray(tr.Y_pos, dtype=np.float64) - np.asarray(tr.Y_neg, dtype=np.float64)
    res = heldout_retrieval(X, D, tr.query_ids, ds.all_qrels(), emb.corpus,  # float16 memory map, read in blocks
                            emb.corpus_ids, args.rank, folds=args.folds, seed=args.seed,
                            centred=bool(args.centred))
    return res.as_dict()


def _print_retrieval(r: dict) -> None:
    print(f"retrieval: closed forms I + cM_g/||M_g||_2 fitted on each of the {r['n_folds']} folds' training pools "
          f"(c chosen on a fifth of the pool), exact search, NDCG@10 of {r['n_queries']} held-out queries")
    print(f"  frozen {r['ndcg']['frozen']:.4f}, shared {r['ndcg']['shared']:.4f}, dual {r['ndcg']['dual']:.4f}; "
          f"dual - shared {r['diff']:+.4f} +/- {r['standard_error']:.4f} (paired over queries)")


def _native_dict(result) -> dict:
    """A rule's native result as JSON (its ``as_dict`` or its dataclass fields)."""
    import dataclasses

    return result.as_dict() if hasattr(result, "as_dict") else dataclasses.asdict(result)


def select_verdict(choice: str, validation: dict | None, selector: str = "cars") -> str:
    """The sentence ``select`` leads with: the family, the selector, and the validated evidence at
    the largest validated training size (the one closest to the user's pool), or that the data
    cannot tell."""
    import numpy as np

    from .selectors.registry import get_rule

    name = get_rule(selector).label
    if validation is None:
        return (f"{choice} ({name}); not validated: --validate shows how often this choice wins on held-out "
                "folds of these queries")
    if selector not in validation["accuracy"]:
        return (f"{choice} ({name}); --validate scores the triple-based selectors only (this one needs the corpus: "
                "`asymgeo reproduce selectors` validates it on the Table 1 design)")
    acc, reg = validation["accuracy"], validation["regret"]
    acc_rule, reg_rule = acc[selector], reg[selector]
    acc_fixed = "shared" if acc["shared"] >= acc["dual"] else "dual"    # the more accurate fixed rule
    reg_fixed = "shared" if reg["shared"] <= reg["dual"] else "dual"    # the fixed rule with the lower regret
    better = reg[reg_fixed]
    # a fixed rule with no regret at all: the selector ties it or is worse by any regret it has
    red = 1.0 - reg_rule / better if better > 0 else (0.0 if reg_rule <= 0 else float("-inf"))
    last = _merge_full_pool_sizes(validation["per_size"])[-1]  # 517 and 518: one row, the full pool
    wins = last["heldout_dual"] if choice == "dual" else last["cells"] - last["heldout_dual"]
    at = f"at {last['label']} queries {choice} had the lower held-out loss in {wins} of {last['cells']} folds"
    if "decided" in last:
        at += (f" (held-out difference beyond two bootstrap standard errors in {last['decided']} of "
               f"{last['cells']})")
    red_txt = f"{100 * red:.0f}%" if np.isfinite(red) else "–"
    regret_txt = f"regret {red_txt} below always-{reg_fixed}'s"
    accuracy_txt = f"accuracy {100 * acc_rule:.1f}% vs always-{acc_fixed} {100 * acc[acc_fixed]:.1f}%"
    worse = []  # each measure names the fixed rule it compares with
    if red < -1e-9:
        worse.append(f"always-{reg_fixed} had the lower regret ({reg[reg_fixed]:.4g} vs {reg_rule:.4g}: the "
                     + (f"selector's {100 * -red:.0f}% above)" if np.isfinite(red) else "fixed rule's is zero)"))
    if acc_rule < acc[acc_fixed] - 1e-9:
        worse.append(f"always-{acc_fixed} was more accurate ({100 * acc[acc_fixed]:.1f}% vs {100 * acc_rule:.1f}%)")
    if worse:
        return f"validation does not support {choice} ({name}) on held-out folds: {' and '.join(worse)}; {at}"
    if acc_rule <= acc[acc_fixed] + 1e-9 and not red > 1e-9:
        same = (f"always-{acc_fixed} is as accurate ({100 * acc[acc_fixed]:.1f}%) with regret as low"
                if acc_fixed == reg_fixed else
                f"always-{acc_fixed} is as accurate ({100 * acc[acc_fixed]:.1f}%) and always-{reg_fixed}'s regret "
                f"as low ({reg[reg_fixed]:.4g} vs {reg_rule:.4g})")
        return f"{choice} ({name}), but the selector adds nothing here: {same}; {at}"
    if red >= 0.5 and acc_rule > acc[acc_fixed]:
        return f"validation supports {choice} ({name}): {regret_txt}, {accuracy_txt}; {at}"
    return f"the data cannot tell: {name} picks {choice}, {regret_txt}, {accuracy_txt}; {at}"


def _plot_select_validation(args, tr, validation: dict | None) -> None:
    if validation is None or not getattr(args, "plot", None):
        return
    from .estimators.plots import plot_validation

    plot_validation(validation["cells"], args.plot, title=f"{tr.dataset} / {tr.encoder}, rank {args.rank}"
                    f"{' (centred)' if args.centred else ''}: held-out check")


def _select_validation(args, tr) -> dict:
    import time

    from .estimators.validation import validate_selection

    t0 = time.perf_counter()
    from .estimators.validation import validation_rules
    from .selectors.registry import get_rule

    selector = getattr(args, "selector", "cars")
    rule = get_rule(selector)
    names = [r.name for r in validation_rules()] + ([rule.name] if rule.triples_only else [])
    v = validate_selection(tr.X, tr.Y_pos, tr.Y_neg, args.rank, folds=args.folds, n_splits=args.n_splits,
                           selector_dim=args.selector_dim, seed=args.seed, query_ids=tr.query_ids,
                           centred=bool(getattr(args, "centred", False)),
                           progress=not getattr(args, "no_progress", False), cv_folds=5, rules=names)
    accuracy, regret = dict(v.accuracy), dict(v.regret)  # every rule's, within folds then over folds
    if rule.name in v.accuracy:  # ranking needs a corpus: validated by `asymgeo reproduce selectors`, not here
        accuracy["selector"], regret["selector"] = v.accuracy[rule.name], v.regret[rule.name]
    return {**v.as_dict(), "accuracy": accuracy, "regret": regret, "selector": selector,
            "cells": [{k: c[k] for k in c if k in ("fold", "size", "cars_score", "loss_shared", "loss_dual",
                                                   "heldout_se") or k.endswith("_choice")} for c in v.cells],
            "seconds": round(time.perf_counter() - t0, 2)}


def _print_validation(v: dict) -> None:
    reg = v["regret"]
    cells = sum(s["cells"] for s in v["per_size"])
    print(f"validation: {v['n_folds']} held-out folds of these {v['n']} queries, nested training sizes, "
          f"{cells} (fold, size) cells, {v['seconds']:.1f} s")
    acc = v["accuracy"]
    print(f"  CARS chose the lower held-out loss in {100 * acc['cars']:.1f}% of cells (always-shared "
          f"{100 * acc['shared']:.1f}%, always-dual {100 * acc['dual']:.1f}%)")
    from .selectors.catalogue import REFERENCE_RULE
    from .selectors.registry import get_rule

    others = [g for g in reg if g not in (REFERENCE_RULE, "shared", "dual", "selector")]
    chosen = v.get("selector", REFERENCE_RULE)
    if chosen in others:
        print(f"  {get_rule(chosen).label} chose the lower held-out loss in {100 * acc[chosen]:.1f}% of cells")
    reg_fixed = "shared" if reg["shared"] <= reg["dual"] else "dual"  # the reduction's reference: lower regret
    for g in dict.fromkeys([REFERENCE_RULE, chosen]):
        if g not in reg:
            continue
        label = "CARS" if g == REFERENCE_RULE else get_rule(g).label
        if reg[reg_fixed] > 0:
            red = 1.0 - reg[g] / reg[reg_fixed]
            print(f"  {label}'s regret is {100 * abs(red):.0f}% {'below' if red >= 0 else 'above'} "
                  f"always-{reg_fixed}'s (the fixed rule with the lower regret)")
        else:
            print(f"  {label}'s regret is {reg[g]:.4g}, always-{reg_fixed}'s is zero (the fixed rule with the "
                  "lower regret)")
    print(f"  mean held-out regret: CARS {reg['cars']:.4g}, always-shared {reg['shared']:.4g}, "
          f"always-dual {reg['dual']:.4g}" + "".join(f", {get_rule(g).label} {reg[g]:.4g}" for g in others))
    print(f"  strict fold wins (CARS below both fixed rules): {v['fold_wins']} of {v['n_folds']}")
    sizes = _merge_full_pool_sizes(v["per_size"])
    decided = all("decided" in s for s in sizes)
    print(f"  {'size':>9}  {'CARS->dual':>10}  {'held-out dual':>13}  {'accuracy':>8}  {'regret CARS':>11}  "
          f"{'shared':>9}  {'dual':>9}" + (f"  {'beyond 2 SE':>11}" if decided else ""))
    for s in sizes:
        r = s["regret"]
        print(f"  {s['label']:>9}  {s['cars_dual']:>6}/{s['cells']:<3}  {s['heldout_dual']:>9}/{s['cells']:<3}  "
              f"{100 * s['accuracy']:>7.0f}%  {r['cars']:>11.4g}  {r['shared']:>9.4g}  {r['dual']:>9.4g}"
              + (f"  {s['decided']:>7}/{s['cells']:<3}" if decided else ""))
    if decided:
        print("  beyond 2 SE: folds whose held-out L_s - L_d is more than two bootstrap standard errors "
              "(resamples of that fold's queries) from zero; the others the fold itself cannot decide")


def _merge_full_pool_sizes(per_size: list[dict]) -> list[dict]:
    """One row for sizes one apart (the full training pool of folds of unequal size: 517 and 518),
    counts summed and means weighted by cells; other rows as they are, labelled by their size."""
    rows: list[dict] = []
    for s in sorted(per_size, key=lambda s: s["size"]):
        last = rows[-1] if rows else None
        if last is not None and s["size"] - last["hi"] <= 1:
            n0, n1 = last["cells"], s["cells"]
            last["regret"] = {k: (last["regret"][k] * n0 + s["regret"][k] * n1) / (n0 + n1)
                              for k in last["regret"] if k in s["regret"]}
            last["accuracy"] = (last["accuracy"] * n0 + s["accuracy"] * n1) / (n0 + n1)
            last.update(cells=n0 + n1, cars_dual=last["cars_dual"] + s["cars_dual"],
                        heldout_dual=last["heldout_dual"] + s["heldout_dual"], hi=s["size"],
                        label=f"{last['lo']}-{s['size']}")
            if "decided" in last and "decided" in s:
                last["decided"] += s["decided"]
            else:
                last.pop("decided", None)
        else:
            rows.append({**s, "regret": dict(s["regret"]), "lo": s["size"], "hi": s["size"], "label": str(s["size"])})
    return rows


# --------------------------------------------------------------------------- reproduce
_DESCRIPTION = re.compile(r'^description\s*=\s*"(.*)"\s*$', re.M)


def experiment_listing() -> str:
    """``reproduce --help``'s list of experiments: every config shipped with the package and, run
    from a checkout, those in ./experiments, each with its description (read from the TOML line,
    so that ``--help`` loads no experiment code)."""
    from pathlib import Path

    def rows(folder: Path) -> list[str]:
        out = []
        for f in sorted(folder.glob("*.toml")):
            found = _DESCRIPTION.search(f.read_text(encoding="utf-8"))
            out.append(f"  {f.stem:<27} {found.group(1) if found else ''}".rstrip())
        return out

    text = "experiments (NAME):\n" + "\n".join(rows(Path(__file__).resolve().parent / "experiments" / "configs"))
    here = Path("experiments")
    if here.is_dir() and any(here.glob("*.toml")):
        text += "\nin ./experiments (this checkout's variants):\n" + "\n".join(rows(here))
    return text


@_command("reproduce")
def _add_reproduce(sub):
    p = _subparser(
        sub,
        "reproduce",
        "Run a paper experiment grid from experiments/NAME.toml (resumable; local pool or Ray), "
        "or rebuild docs/reproduction.md from the results with NAME = report.",
        "asymgeo reproduce rq1 --quick && asymgeo reproduce report --quick",
    )
    p.epilog = experiment_listing() + "\n\n" + (p.epilog or "")
    p.add_argument("name", help="an experiment listed below, all (rq1, table2, rq2, rq4 and table1), or report "
                                "(or any NAME.toml in --config-dir)")
    p.add_argument("--quick", action="store_true", help="the small CI variant ([quick] overrides; results in NAME-quick)")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="local process pool (default) or Ray")
    p.add_argument("--address", default=None, help="Ray cluster address, e.g. auto or ray://head:10001 (with --executor ray)")
    p.add_argument("--workers", type=int, default=None, help="local processes / local Ray CPUs (default: all cores)")
    p.add_argument("--results-dir", default="results", help="results root (default results/)")
    p.add_argument("--config-dir", default=None, help="folder of NAME.toml files (default experiments/)")
    p.add_argument("--docs-dir", default="docs", help="where report writes reproduction.md and figures/ (default docs/)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_run_reproduce)
    _add_triples_dir(p)
    return p


def _run_reproduce(args) -> int:
    from .experiments.report import reproduce
    from .experiments.runner import SweepError

    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers: expected a positive number of processes, got {args.workers}")
    command = " ".join(["asymgeo", *sys.argv[1:]]) if sys.argv and sys.argv[0] else None
    try:
        out = reproduce(args.name, quick=args.quick, executor=args.executor, address=args.address,
                        workers=args.workers, results_dir=args.results_dir, config_dir=args.config_dir,
                        docs_dir=args.docs_dir, progress=not args.no_progress, command=command)
    except SweepError as exc:
        print(f"asymgeo reproduce: error: {exc}", file=sys.stderr)
        return 1
    if args.name == "report":
        print(f"wrote {out}")
        return 0
    for r in out:  # type: ignore[union-attr]  # a list of SweepResult unless name == "report"
        print(f"{r.name}: {r.n_run} cells run, {r.n_skipped} already done, {r.n_total} total, "
              f"{r.wall_seconds:.1f} s -> {r.table}")
    return 0


# --------------------------------------------------------------------------- evaluate
@_command("evaluate")
def _add_evaluate(sub):
    p = _subparser(
        sub,
        "evaluate",
        "Evaluate a frozen encoder on a split: exact full-corpus search, NDCG@k (Appendix F) and friends.",
        "asymgeo evaluate scifact --encoder all-MiniLM-L6-v2 --data-dir ../shared/data --cache-dir ../shared/embeddings",
    )
    _add_data_args(p)
    p.add_argument("--split", default="test", help="qrels split to evaluate (default test)")
    p.add_argument("--k", type=int, default=10, help="metric cut-off (default 10; recall@100 is always added)")
    p.add_argument("--backend", choices=["auto", "numpy", "torch", "faiss"], default="auto",
                   help="search backend (default auto: torch on CUDA, else numpy)")
    p.add_argument("--ties", choices=["trec_eval", "index"], default="trec_eval",
                   help="order of exactly equal scores: by document id descending as trec_eval (default) "
                        "or by lower corpus row")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--adapter", default=None, metavar="DIR",
                   help="evaluate through a saved adapter (asymgeo fit --out DIR); the frozen corpus is not re-indexed")
    p.set_defaults(func=_run_evaluate)
    return p


def _run_evaluate(args) -> int:
    if getattr(args, "adapter", None) is not None:  # '' (an unset variable) is an error, not frozen
        return _run_evaluate_adapter(args)
    from .data import evaluate_frozen
    from .retrieval.metrics import format_metrics

    res = evaluate_frozen(args.dataset, args.encoder, split=args.split, k=args.k, data_dir=args.data_dir,
                          cache_dir=args.cache_dir, backend=args.backend, ties=args.ties)
    if args.json:
        _print_json({**res.extra, **res.as_dict()})
        return 0
    x = res.extra
    print(format_metrics(res, title=f"{x['dataset']} / {x['encoder']}, {x['split']} split: "
                                    f"exact search over {x['n_docs']:,} documents ({x['backend']})"))
    return 0


def _run_evaluate_adapter(args) -> int:
    from .adapters.workflow import evaluate_adapter

    res = evaluate_adapter(args.dataset, args.encoder, args.adapter, split=args.split, k=args.k,
                           data_dir=args.data_dir, cache_dir=args.cache_dir, backend=args.backend,
                           ties=args.ties)
    if args.json:
        _print_json({**res.extra, **res.as_dict()})
        return 0
    x = res.extra
    for note in x.get("notes", []):
        print(f"note: {note}")
    print(f"{x['dataset']} / {x['encoder']}, {x['split']} split, through the {x['geometry']} {x['form']} adapter "
          f"{x['adapter']}: exact search over {x['n_docs']:,} documents ({x['backend']}), {len(res.query_ids)} queries")
    vs = x["vs_frozen"]
    width = max(len(m) for m in vs)
    print(f"{'metric':<{width}}  {'adapter':>8}  {'frozen':>8}  adapter - frozen [paired 95% interval]")
    for m, c in vs.items():
        print(f"{m:<{width}}  {c['adapter']:>8.4f}  {c['frozen']:>8.4f}  {c['diff']:+.4f} [{c['ci_low']:+.4f}, "
              f"{c['ci_high']:+.4f}]")
    g = x.get("generalisation")
    if g:
        for name, label in (("seen", "queries with a relevant training-positive document"),
                            ("unseen", "the other queries")):
            c = g[name]
            if c["n"]:
                print(f"{g['metric']} on {label} ({c['n']}): {c['adapter']:.4f} vs frozen {c['frozen']:.4f}, "
                      f"{c['diff']:+.4f} [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]")
    return 0


# --------------------------------------------------------------------------- fit
#: ``asymgeo fit``'s training defaults beyond the paper's protocol, chosen on validation by the
#: generalisation study (docs/generalisation.md); ``--selection all --anchor 0`` is the paper's.
_FIT_DEFAULTS: dict = {"selection": "document_disjoint", "anchor": 0.0, "selector": "validation", "memory": "auto",
                      "candidates": "joint", "guard_margin": 0.5, "guard_folds": 5}

def _guard_phrase(joint: dict) -> str:
    """The deployment guard in words (``fit``'s "deployed:" line)."""
    k, n = float(joint.get("guard_margin", 0.0)), joint["n_protected"]
    blocks = joint.get("n_protected_by_block") or [n]
    where = f"{n} document-disjoint validation queries"
    if len(blocks) > 1:  # the cross-fitted guard
        where = (f"{sum(blocks)} document-disjoint queries of {len(blocks)} cross-fitted blocks "
                 f"({n} of them validation queries)")
    if k > 0:
        return f"a gain of at least {k:g} standard errors over frozen on {where}"
    return f"no loss on average on {where}"


@_command("fit")
def _add_fit(sub):
    p = _subparser(
        sub,
        "fit",
        "Train a rank-r shared or dual adapter on frozen embeddings (paper protocol, Appendix F.1) and save it.",
        "asymgeo fit scifact --encoder all-MiniLM-L6-v2 --geometry auto --rank 16 --out adapters/scifact "
        "--data-dir ../shared/data --cache-dir ../shared/embeddings",
    )
    _add_data_args(p)
    p.set_defaults(dataset=None)
    next(a for a in p._actions if a.dest == "dataset").nargs = "?"  # DATASET, or --pairs / --corpus instead
    p.add_argument("--pairs", default=None, metavar="FILE.jsonl",
                   help="instead of DATASET: training pairs, one JSON object per line ({\"query\": ..., "
                        "\"positive\": ..., \"negative\": ...} or anchor / positive / negative columns, or a "
                        "[query, positive, negative] array); written with --corpus as a dataset under --data-dir and "
                        "encoded into --cache-dir (reused on a rerun)")
    p.add_argument("--corpus", default=None, metavar="FILE.jsonl",
                   help="with --pairs: the documents to search ({\"_id\", \"title\", \"text\"} per line, or "
                        "texts); default the pairs' own texts; positives missing from it are added")
    p.add_argument("--eval-pairs", default=None, metavar="FILE.jsonl",
                   help="with --pairs: held-out pairs scored as the test split (default: the pairs' queries carved "
                        "60/20/20 into training, validation and test)")
    p.add_argument("--geometry", choices=["shared", "dual", "auto", "query"], default="auto",
                   help="adapter family; auto (default): train both, keep the better on validation NDCG@10 "
                        "(shared within one standard error; CARS, eq. 7, reported beside it); query: the "
                        "query-only peer, a p x p map on queries from the identity, documents untouched")
    p.add_argument("--mining", choices=["exact", "ivf", "hnsw"], default="exact",
                   help="how hard negatives are mined: exact (default) or an approximate FAISS index for large "
                        "corpora (its recall@8 against exact mining is measured on 200 training queries and printed)")
    p.add_argument("--memory", choices=["auto", "none"], default=_FIT_DEFAULTS["memory"],
                   help="auto (default): add the gated document memory on top of the map (training positives "
                        "raised for new queries close to the queries that found them; gate chosen on validation "
                        "so that document-disjoint validation queries lose nothing); none: the map alone")
    p.add_argument("--candidates", choices=["joint", "family"], default=_FIT_DEFAULTS["candidates"],
                   help="with --geometry auto, --memory auto and the default --selector: joint (default): the query-only map (checkpoint "
                        "chosen on the selection queries, on all validation queries, and three blends of the two) joins the selector's "
                        "family, each with its memory, and the whole with the best validation NDCG@10 is kept "
                        "among those that gain at least --guard-margin standard errors on document-disjoint "
                        "validation queries; family: "
                        "the selector's family alone")
    p.add_argument("--guard-margin", type=float, default=_FIT_DEFAULTS["guard_margin"], metavar="K",
                   help="with --candidates joint: a candidate is deployed only if its mean gain over frozen on the "
                        "document-disjoint validation queries is at least K paired standard errors (default 0.5; 0: "
                        "loses nothing on average, the earlier rule)")
    p.add_argument("--guard-folds", type=int, default=_FIT_DEFAULTS["guard_folds"], metavar="K",
                   help="with --candidates joint: the guard's document-disjoint queries come from K cross-fitted "
                        "blocks, the validation queries and K - 1 blocks of training queries, each scored by the "
                        "candidates refitted without it (default 5: about K times the training time; 1: the "
                        "validation queries alone, the earlier rule, for large training sets)")
    p.add_argument("--selector", default=_FIT_DEFAULTS["selector"], metavar="NAME",
                   help="with --geometry auto, the registry rule that decides the family: " + _selector_names("fit")
                        + "; validation (default: train both, keep the better); ranking (the closed-form I + cM's "
                          "validation NDCG@10, then train one); the others decide from the training triples, then "
                          "train one")
    p.add_argument("--rank", type=int, default=DEFAULT_RANK, help=f"rank r (default {DEFAULT_RANK}, as select)")
    p.add_argument("--form", choices=["augmented", "projection"], default="augmented",
                   help="augmented: x.y + (Ax).(By) (default); projection: (Ax).(By)")
    p.add_argument("--init", choices=["closed_form", "random", "random_independent"], default="closed_form",
                   help="initialisation (default closed_form)")
    p.add_argument("--n-train", type=int, default=None, help="use a seeded subset of N training queries (default all)")
    p.add_argument("--max-validation", type=int, default=None, metavar="N",
                   help="select on a seeded subsample of at most N validation queries (default all; each epoch "
                        "searches the corpus for every validation query, so large dev sets cost hours)")
    p.add_argument("--validation-pool", type=_validation_pool_arg, default="auto", metavar="K|auto|none",
                   help="select on a pool: each validation query's frozen top K, their judged documents and every "
                        "training row, instead of the whole corpus (default auto: K = 100 from 200,000 documents on, "
                        "else none, i.e. the whole corpus); the share of the adapter's top 10 inside the pool is "
                        "printed. Test figures always search the whole corpus")
    p.add_argument("--seed", type=int, default=0, help="seed of the subset, epoch order, init and CARS (default 0)")
    p.add_argument("--epochs", type=int, default=30, help="epochs per learning rate (default 30)")
    p.add_argument("--learning-rates", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3],
                   help="grid chosen on validation NDCG@10 (default 3e-4 1e-3 3e-3)")
    p.add_argument("--early-stopping", type=int, default=None, metavar="EPOCHS",
                   help="stop a learning rate after this many epochs without validation gain")
    p.add_argument("--selection", choices=["all", "document_disjoint"], default=_FIT_DEFAULTS["selection"],
                   help="validation queries that choose learning rate, epoch and scale: all (the paper's), or "
                        "document_disjoint (none of their relevant documents is a training positive; default "
                        f"{_FIT_DEFAULTS['selection']}, see docs/generalisation.md)")
    p.add_argument("--anchor", type=float, default=_FIT_DEFAULTS["anchor"],
                   help=f"pull toward the closed-form start (L2-SP weight in [0, 1e6]; default "
                        f"{_FIT_DEFAULTS['anchor']:g}; 0 = the paper's protocol)")
    p.add_argument("--allow-test-overlap", action="store_true",
                   help="train even when training and validation / test queries overlap (same id, or the same "
                        "text beyond 5%%); refused by default; the scores are then marked as not held out")
    p.add_argument("--device", default=None, help="torch device (default cuda when available, else cpu)")
    p.add_argument("--out", required=True, help="adapter folder to write (replaced only when the new one is complete)")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="also draw validation NDCG@10 per epoch and the seen / unseen bars against frozen (PNG)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --plot file that asymgeo did not draw (its own figures are replaced)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_run_fit)
    _add_triples_dir(p)
    return p


def _run_fit(args) -> int:
    from .adapters import save_adapter
    from .adapters.io import check_output_folder
    from .adapters.workflow import fit_adapter

    check_output_folder(args.out)  # before training, not after
    if args.plot is not None:
        from ._atomic import check_plot_destination

        check_plot_destination(args.plot, "--plot", overwrite=args.overwrite, nothing="nothing was trained")
        _check_plot_folder(args.plot)
    elif args.overwrite:
        raise ValueError("--overwrite: only replaces an existing --plot file; add --plot FILE or drop --overwrite")
    from .selectors.registry import get_rule

    args.selector = get_rule(args.selector, argument="--selector").name
    if args.selector != _FIT_DEFAULTS["selector"] and args.geometry != "auto":
        raise ValueError(f"--selector {args.selector}: decides the family of --geometry auto only")
    if args.device is not None:  # a bad device is named before any data is loaded
        from .data.encoders import check_device

        check_device(args.device)
    if (args.dataset is None) == (args.pairs is None):
        raise ValueError("name a DATASET (a BEIR folder or a name under --data-dir) or give --pairs FILE.jsonl, "
                         "not both" if args.dataset is not None else
                         "name a DATASET (a BEIR folder or a name under --data-dir), or give --pairs FILE.jsonl "
                         "(with --corpus FILE.jsonl)")
    if args.pairs is None and (args.corpus is not None or args.eval_pairs is not None):
        raise ValueError(f"{'--corpus' if args.corpus is not None else '--eval-pairs'}: goes with --pairs, not with "
                         "a DATASET")
    if args.pairs is not None:
        from .data.pairs import prepare_pairs

        ds, _spec = prepare_pairs(args.encoder, args.pairs, corpus=args.corpus, eval_pairs=args.eval_pairs,
                                  data_dir=args.data_dir, cache_dir=args.cache_dir, device=args.device,
                                  progress=not args.no_progress)
        args.dataset = str(ds.path)
        print(f"pairs: {ds.path} ({len(ds.query_ids):,} queries, {len(ds.corpus_ids):,} documents)", file=sys.stderr)
    rep = fit_adapter(args.dataset, args.encoder, geometry=args.geometry, rank=args.rank, form=args.form,
                      init=args.init, n_train=args.n_train, seed=args.seed, learning_rates=args.learning_rates,
                      epochs=args.epochs, early_stopping=args.early_stopping, selection=args.selection,
                      anchor=args.anchor, selector=args.selector, memory=args.memory, candidates=args.candidates,
                      guard_margin=args.guard_margin, guard_folds=args.guard_folds, mining=args.mining,
                      max_validation=args.max_validation, validation_pool=args.validation_pool,
                      allow_test_overlap=args.allow_test_overlap,
                      data_dir=args.data_dir, cache_dir=args.cache_dir, device=args.device,
                      progress=not args.no_progress)
    out = save_adapter(rep.adapter, args.out, encoder=rep.encoder, dataset=rep.dataset, metrics=rep.metrics,
                       extra={"arguments": {k: v for k, v in vars(args).items() if k != "func"},
                              "versions": rep.versions, "split": rep.split})
    if args.plot:
        from .adapters.plots import plot_fit

        plot_fit(rep, args.plot)
    if args.json:
        _print_json({"adapter": str(out), **rep.metrics, "split": rep.split})
        return 0
    _print_fit(rep, out, args)
    return 0


def _check_plot_folder(path: str, what: str = "nothing was trained") -> None:
    """The folder of ``--plot`` exists (or can be made) and takes a file: found before the work."""
    import tempfile
    from pathlib import Path

    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".asymgeo-plot-", suffix=".tmp"):
            pass
    except OSError as exc:
        raise ValueError(f"--plot: {path}: cannot write in {folder} ({exc.strerror or exc}); {what}") from None


def evaluate_command(args, out) -> str:
    """The ``asymgeo evaluate`` command line that scores the adapter ``fit`` wrote to ``out``, with
    the dataset, encoder, ``--data-dir`` and ``--cache-dir`` the fit was given: pasted, it runs."""
    import shlex

    argv = ["asymgeo", "evaluate", str(args.dataset), "--encoder", str(args.encoder), "--adapter", str(out)]
    for flag, value in (("--data-dir", args.data_dir), ("--cache-dir", args.cache_dir)):
        if value is not None:
            argv += [flag, str(value)]
    return shlex.join(argv)


def _print_fit(rep, out, args) -> None:  # noqa: C901 - one report, printed section by section
    m, ad = rep.metrics, rep.adapter
    gen = m.get("generalisation")
    if gen and gen.get("headline"):
        print(gen["headline"])
    print(f"split: {rep.split.get('description', 'adaptation split')}")
    if (m.get("split_overlap") or {}).get("allowed"):
        print("warning: NOT HELD OUT: " + "; ".join(m["split_overlap"]["messages"]) + " (--allow-test-overlap)")
    if rep.split.get("kind") == "carved_from_test":
        print(f"note: `{evaluate_command(args, out)}` scores only the held-out part of qrels/test.tsv")
    from .adapters.workflow import auto_phrase

    if m.get("auto") and "validation_shared" not in m["auto"]:  # decided from the training triples
        a = m["auto"]
        print(f"auto: {auto_phrase(a)} on the training triples (only that family trained; CARS "
              f"{a['cars_score']:+.4g} +/- {a['cars_standard_error']:.2g} -> {a['cars_choice']})")
    elif m.get("auto"):
        a = m["auto"]
        print(f"auto: {auto_phrase(a)} (validation NDCG@10 shared {a['validation_shared']:.4f}, dual "
              f"{a['validation_dual']:.4f}, dual - shared {a['diff']:+.4f} +/- {a['standard_error']:.4f} over "
              f"{a['n_validation']} queries; CARS {a['cars_score']:+.4g} +/- {a['cars_standard_error']:.2g} -> "
              f"{a['cars_choice']})")
    if m.get("joint"):
        j = m["joint"]
        parts = [f"{n} {c['validation_ndcg@10']:.4f}" + ("" if c["feasible"] else " (guard)")
                 for n, c in j["candidates"].items()]
        what = (" + memory" if (m.get("memory") or {}).get("kept", True)
                else " (the map alone: its memory was not kept)")
        print(f"deployed: {j['choice']}{what}, by {j['rule']} (validation NDCG@10 with memory: "
              + ", ".join(parts) + "; guard: " + _guard_phrase(j) + ")")
    mining = m.get("mining") or {}
    if mining.get("given"):
        g = mining["given"]
        print(f"negatives: {g['negatives']:,} given negatives of {g['queries']:,} of the {rep.n_train:,} training "
              f"queries come first among their {g['k']} hard negatives (the frozen model's mined ones fill the rest)")
    if mining.get("index", "exact") != "exact":
        print(f"mining: {mining['index']} (approximate), recall@{mining['k']} {mining['recall']:.3f} against exact "
              f"mining on {mining['n_queries']} training queries")
    blend = "(blend " in str((m.get("joint") or {}).get("choice", ""))
    print(f"{rep.dataset} / {rep.encoder}: {ad.geometry_} adapter, {ad.form}, rank {m['rank']}, n = {rep.n_train} "
          + ("(a blend of two query-only checkpoints)" if blend
             else f"(learning rate {ad.learning_rate_:g}, epoch {ad.best_epoch_})"))
    from .adapters.export import checkpoint_phrase

    vs = m.get("validation_subsample")
    if vs:
        print(f"validation: a seeded subsample of {vs['n']:,} of the {vs['of']:,} validation queries (--max-validation; "
              f"seed {vs['seed']}); frozen NDCG@10 on it has standard error {vs['frozen_ndcg@10_se']:.4f}")
    vp = m.get("validation_pool")
    if vp is not None:
        if vp.get("pooled"):
            print(f"validation: selected on a pool of {vp['documents']:,} of the {vp['of']:,} documents (each validation "
                  f"query's frozen top {vp['k']}, judged and training documents; --validation-pool); the chosen map's "
                  f"top 10 lay {100 * vp['coverage@10']:.1f}% inside it, validation NDCG@10 "
                  f"{vp['validation_ndcg@10_pooled']:.4f} on the pool, {vp['validation_ndcg@10_exact']:.4f} exact")
        else:
            print(f"validation: the pool (frozen top {vp['k']}) would hold {vp['documents']:,} of the {vp['of']:,} "
                  "documents, too many to save time: selected on the whole corpus")

    print(f"{'':<24}{'validation':>11}{'test':>9}   (NDCG@10; all {m['n_validation']} validation and "
          f"{m['n_test']} test queries; {checkpoint_phrase(m)})")
    rows = [("frozen", m["frozen"]), (f"closed-form (c = {m['closed_form']['c']:g})", m["closed_form"]),
            (f"trained {ad.geometry_}", m["trained"])]
    for name, r in rows:
        print(f"{name:<24}{r['validation_ndcg@10']:>11.4f}{r['test_ndcg@10']:>9.4f}")
    mem = m.get("memory")
    if mem and mem.get("kept"):
        print(f"{'+ document memory':<24}{'':>11}{m['deployed']['test_ndcg@10']:>9.4f}   (gate {mem['threshold']:.3f}, "
              f"weight {mem['weight']:.3g}; {mem['n_documents']:,} documents remembered from {mem['n_keys']:,} "
              f"train + validation queries; validation {mem['map_validation_ndcg@10']:.4f} -> "
              f"{mem['validation_ndcg@10']:.4f} before the validation queries joined it)")
    elif mem:
        print("document memory: not kept (no gate raised validation NDCG@10 without lowering the "
              f"{mem['n_protected']} document-disjoint validation queries)")
    if gen:
        from .adapters.generalisation import GeneralisationReport

        table = GeneralisationReport(gen["rows"], gen["prior_weight"], {}, gen["seen"], gen["focus"]).format_table()
        by = str(gen["seen"].get("defined_by", "train queries"))
        whose = "a training or validation query's positive (what the memory holds)" if "validation" in by \
            else "a training positive"
        print(f"test NDCG@10, gain over frozen [paired 95% interval]; seen-doc: a relevant document was "
              f"{whose} ({gen['seen']['n_seen_documents']:,} documents); prior: frozen + "
              f"{gen['prior_weight']:g} for the training positives")
        print(table)
        for note in gen.get("notes", []):
            print(f"note: {note}")
    for msg in ad.stopped_:
        print(f"warning: stopped early, {msg}", file=sys.stderr)
    for msg in m.get("warnings", []):
        print(f"asymgeo fit: warning: {msg}", file=sys.stderr)
    print(f"wrote {out}" + (f" and {args.plot}" if args.plot else ""))


# --------------------------------------------------------------------------- export
@_command("export")
def _add_export(sub):
    p = _subparser(
        sub,
        "export",
        "Export a saved adapter as a sentence-transformers model (encode_query / encode_document).",
        "asymgeo export adapters/scifact --format sentence-transformers --base all-MiniLM-L6-v2 --out models/scifact",
    )
    p.add_argument("adapter", metavar="ADAPTER_DIR", help="folder written by asymgeo fit")
    p.add_argument("--format", choices=["sentence-transformers"], default="sentence-transformers",
                   help="export format (default sentence-transformers)")
    p.add_argument("--base", default=None, help="base encoder (default: the encoder the adapter was trained on)")
    p.add_argument("--out", required=True, help="model folder to write (a new or empty folder)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier export at --out (swapped in only when the new one is complete)")
    p.add_argument("--normalize", action="store_true",
                   help="unit-norm query vectors (augmented form only): the ranking is unchanged, cosine equals the "
                        "dot product")
    p.add_argument("--default-route", choices=["none", "query", "document"], default="none",
                   help="route of model.encode(texts) without task=: none (refused, the default: use encode_query / "
                        "encode_document), query or document")
    p.set_defaults(func=_run_export)
    return p


def _run_export(args) -> int:
    from .adapters import load_adapter
    from .adapters.export import export_sentence_transformers

    ad = load_adapter(args.adapter)
    base = args.base or (ad.metadata_ or {}).get("encoder")
    if not base:
        raise ValueError(f"{args.adapter}: the adapter does not record its encoder; pass --base")
    route = None if args.default_route == "none" else args.default_route
    out = export_sentence_transformers(ad, base, args.out, overwrite=args.overwrite, normalize=args.normalize,
                                       default_route=route)
    print(f"wrote {out}: SentenceTransformer({str(out)!r}).encode_query / encode_document")
    from .adapters.export import similarity_note

    print(similarity_note(ad, args.normalize))
    print("model.encode(texts) without task= " + ("is refused (use encode_query / encode_document)" if route is None
                                                  else f"takes the {route} route"))
    from .adapters.export import memory_note

    note = memory_note(ad)
    if note:
        print(f"note: {note}")
    return 0


# --------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asymgeo",
        description=(
            "Should queries and documents share one projection, or get two? "
            "Theory, selectors (CARS, SURE), exact search and experiments for "
            "shared vs dual adapters on frozen embeddings."
        ),
        epilog=_EPILOG_TEMPLATE.format(example="asymgeo demo"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"asymgeo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _, add in _COMMANDS:
        add(sub)
    return parser


class _WarningHandler(logging.Handler):
    """Library warnings as one ``asymgeo CMD: warning: ...`` line each on the current stderr, and
    notices (INFO records with ``extra={"notice": True}``, e.g. where a file was written) as one
    ``asymgeo CMD: note: ...`` line each once the command has succeeded (:meth:`print_notes`: an
    error stays the one line on stderr); other INFO records are not shown."""

    def __init__(self, command: str):
        super().__init__(level=logging.INFO)
        self.command = command
        self.notes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        notice = record.levelno < logging.WARNING
        if notice and not getattr(record, "notice", False):
            return
        try:
            msg = record.getMessage().strip().splitlines()
        except Exception:  # noqa: BLE001 - a broken log call must not end the command
            msg = [str(record.msg)]
        if notice:
            self.notes.append(f"asymgeo {self.command}: note: {msg[0] if msg else ''}")
            return
        print(f"asymgeo {self.command}: warning: {msg[0] if msg else ''}", file=sys.stderr)

    def print_notes(self) -> None:
        for line in self.notes:
            print(line, file=sys.stderr)
        self.notes.clear()


def _error_line(exc: BaseException) -> str:
    """The first line of an exception's message (``KeyError`` without its quotes)."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    text = text.strip().splitlines()[0] if text.strip() else ""
    if isinstance(exc, MemoryError):
        return f"out of memory{': ' + text if text else ''} (use smaller sizes)"
    if isinstance(exc, OSError) and not text and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in text:
        return f"{exc.filename}: {exc.strerror or text}"
    return text or type(exc).__name__


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is in ``exc``'s ``__cause__`` / ``__context__`` chain: Ctrl-C
    during an import (torch, sentence-transformers) can surface wrapped, e.g. as ``RuntimeError:
    Error calling __set_name__ ...`` whose cause is the interrupt."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        todo += [e.__cause__, e.__context__]
    return False


def _interrupted(command: str) -> int:
    print(f"asymgeo {command}: interrupted", file=sys.stderr)
    return 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    handler = _WarningHandler(args.command)
    lib_logger = logging.getLogger("asymgeo")
    lib_logger.addHandler(handler)
    old_level = lib_logger.level
    if old_level == logging.NOTSET or old_level > logging.INFO:  # INFO: the handler shows notices only
        lib_logger.setLevel(logging.INFO)
    try:
        code = int(args.func(args) or 0)
        handler.print_notes()
        return code
    except KeyboardInterrupt:
        return _interrupted(args.command)
    except (ValueError, TypeError, KeyError, OSError, EOFError, ImportError, MemoryError) as exc:
        if _caused_by_interrupt(exc):  # Ctrl-C inside an import, wrapped
            return _interrupted(args.command)
        # bad input: a dataset, cache, argument or missing extra (OSError covers
        # FileNotFoundError, NotADirectoryError, PermissionError, disk full)
        print(f"asymgeo {args.command}: error: {_error_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - never a traceback; name the type so a bug can be reported
        if _caused_by_interrupt(exc):  # Ctrl-C inside an import, e.g. RuntimeError from __set_name__
            return _interrupted(args.command)
        if os.environ.get("ASYMGEO_DEBUG"):
            raise
        print(f"asymgeo {args.command}: error: {type(exc).__name__}: {_error_line(exc)} "
              "(set ASYMGEO_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2
    finally:
        lib_logger.removeHandler(handler)
        lib_logger.setLevel(old_level)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
