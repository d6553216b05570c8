"""Plant one fault at a time in the code that decides results or protects data, run the tests
meant to catch it, and report which faults the suite kills (issue #19).

Usage::

    python tools/plant_faults.py            # every fault; writes docs/testing.md's table
    python tools/plant_faults.py --list     # the faults, no runs

Each fault is a textual replacement in one file (``old`` -> ``new``, which must occur); the
file is restored byte for byte afterwards (also on Ctrl-C). Not run in CI: about two minutes.
This is a fixed, reviewed set of planted faults, not a mutation tool: it documents which of the
faults a reviewer planted are caught, and by which test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "asymgeo"

#: (description, file under src/asymgeo, old, new, pytest arguments)
FAULTS: list[tuple[str, str, str, str, list[str]]] = [
    ("the memory's gate ignores its threshold", "retrieval/memory.py",
     "np.maximum(np.asarray(similarity, dtype=np.float32) - np.float32(threshold), 0.0)",
     "np.maximum(np.asarray(similarity, dtype=np.float32), 0.0)",
     ["tests/retrieval/test_memory.py", "-k", "by_hand"]),
    ("a remembered document already in the map's top k keeps its unboosted score", "retrieval/memory.py",
     "    bs[hit] = total[rows, s[hit]]\n", "    pass\n",
     ["tests/retrieval/test_memory.py", "-k", "brute_force"]),
    ("the memory's guard on document-disjoint validation queries is ignored", "adapters/memory.py",
     "ok = (not guard) or d_prot >= 0.0", "ok = True",
     ["tests/adapters/test_document_memory.py", "-k", "guard"]),
    ("the validation queries never join the deployed memory", "adapters/workflow.py",
     "        mem.extend(d.V, val_rows)\n", "        pass\n",
     ["tests/adapters/test_document_memory.py", "-k", "fit_adapter_deploys"]),
    ("a corpus scan is remembered for a file written just before it (racy timestamps)", "data/scan_memo.py",
     "before.mtime_ns / 1e9 > started - SETTLE_SECONDS", "False",
     ["tests/data/test_scan_memo.py", "-k", "freshly"]),
    ("a corpus with faults is remembered (its warnings lost on the next read)", "data/beir.py",
     "if not scan.skip_lines and not rep.empty_documents:", "if True:",
     ["tests/data/test_scan_memo.py", "-k", "faults"]),
    ("leave-one-out scoring keeps each validation query's own key", "retrieval/memory.py",
     "            S[rows, e[rows]] = -np.inf\n", "            pass\n",
     ["tests/retrieval/test_memory.py", "tests/adapters/test_document_memory.py", "-k", "leave"]),
    ("leave-one-out protects queries whose document another validation query holds", "adapters/memory.py",
     "r in train_docs or holders[r] > 1", "r in train_docs",
     ["tests/adapters/test_document_memory.py", "-k", "leave_one_out"]),
    ("fit selects its checkpoint on the test split", "adapters/workflow.py",
     "validation_queries=V_ if sel_V is None else sel_V,\n                       "
     "validation_relevance=vt_ if sel_table is None else sel_table)",
     "validation_queries=d.T if sel_V is None else sel_V,\n                       "
     "validation_relevance=d.test if sel_table is None else sel_table)",
     ["tests/adapters/test_planted_faults.py", "-k", "never_test"]),
    ("the blended query map ignores its weight", "adapters/workflow.py",
     "W = (1.0 - lam) * np.asarray(a.query_map_, dtype=np.float64) + lam * np.asarray(b.query_map_, dtype=np.float64)",
     "W = 0.5 * np.asarray(a.query_map_, dtype=np.float64) + 0.5 * np.asarray(b.query_map_, dtype=np.float64)",
     ["tests/adapters/test_joint_deployment.py", "-k", "deployed_whole_among or straight_path"]),
    ("the deployment guard ignores protected queries", "adapters/workflow.py",
     'rec["feasible"] = bool((not guard) or rec["protected_diff"] >= guard_margin * rec["protected_se"])', 'rec["feasible"] = True',
     ["tests/adapters/test_joint_deployment.py", "-k", "best_validation or least_harmful"]),
    ("the cross-fitted guard reads this split's protected queries alone", "adapters/workflow.py",
     "            d = _pooled_differences(name, d, guard_differences, rec)\n", "            pass\n",
     ["tests/adapters/test_joint_deployment.py", "-k", "pooled_differences_decide or crossfitted_blocks"]),
    ("a cross-fitted guard block trains on its own validation queries", "adapters/workflow.py",
     "train_k = [q for q in tr.query_ids if q not in held] + list(d.validation.query_ids)",
     "train_k = list(tr.query_ids) + list(d.validation.query_ids)",
     ["tests/adapters/test_joint_deployment.py", "-k", "crossfitted_blocks"]),
    ("the deployment guard ignores its margin", "adapters/workflow.py",
     'rec["feasible"] = bool((not guard) or rec["protected_diff"] >= guard_margin * rec["protected_se"])',
     'rec["feasible"] = bool((not guard) or rec["protected_diff"] >= 0.0)',
     ["tests/adapters/test_joint_deployment.py", "-k", "guard_margin_standard_errors"]),
    ("the memory's guard protects the validation queries it helps (the mask inverted)", "adapters/workflow.py",
     "    return np.array([q in unseen for q in val_ids], dtype=bool)",
     "    return np.array([q not in unseen for q in val_ids], dtype=bool)",
     ["tests/adapters/test_fit_memory_wiring.py", "-k", "protected_validation_is or guards_the_document"]),
    ("the memory's gate is chosen without its guard", "adapters/workflow.py",
     "                                   protected=protected_validation(d, train_query_ids),\n",
     "                                   protected=None,\n",
     ["tests/adapters/test_fit_memory_wiring.py", "-k", "guards_the_document"]),
    ("the jointly deployed memory never holds the validation queries", "adapters/workflow.py",
     "            mem.extend(dsel.V, _relevant_rows(dsel, list(dsel.validation.query_ids)))\n", "            pass\n",
     ["tests/adapters/test_joint_deployment.py", "-k", "deployed_whole_among"]),
    ("a pooled fit deploys a memory of pool positions", "adapters/workflow.py",
     "            pooled_memory_to_corpus(mem, pool_rows)", "            pass",
     ["tests/adapters/test_pooled_validation.py", "-k", "remembers_the_corpus_documents"]),
    ("the validation pool leaves out the judged documents", "adapters/pooled_validation.py",
     "d.relevant, judged)", "d.relevant)",
     ["tests/adapters/test_pooled_validation.py", "-k", "union"]),
    ("pool coverage counts the rows outside the pool", "adapters/pooled_validation.py",
     "inside = np.isin(idx, pool) | (idx < 0)", "inside = ~np.isin(idx, pool) | (idx < 0)",
     ["tests/adapters/test_pooled_validation.py", "-k", "wherever"]),
    ("fit trains on the validation split", "adapters/workflow.py",
     'tr = load_triples(ds, encoder, "train" if train_ids is None else list(train_ids), cache=emb,',
     'tr = load_triples(ds, encoder, "validation" if train_ids is None else list(train_ids), cache=emb,',
     ["tests/adapters/test_planted_faults.py", "-k", "never_test"]),
    ("AdamW's learning rate divided by 1,000 (training does nothing)", "adapters/training.py",
     "opt = torch.optim.AdamW(params, lr=lr,", "opt = torch.optim.AdamW(params, lr=lr / 1000,",
     ["tests/adapters/test_planted_faults.py", "-k", "improves"]),
    ("the hard-negative relevance mask removed", "adapters/training.py",
     "H = H.masked_fill(hard_mask[idx], -math.inf)", "H = H",
     ["tests/adapters/test_planted_faults.py", "-k", "masks_hard"]),
    ("ValidationScorer merges corpus blocks at the wrong offset", "adapters/training.py",
     "        i = i + d0", "        i = i",
     ["tests/adapters/test_planted_faults.py", "-k", "small_tiles"]),
    ("the cache fingerprint ignores query texts", "data/cache.py",
     '            ("queries_sha256", "query texts"),', "",
     ["tests/data/test_cache.py", "-k", "query_text_change"]),
    ("the cache ignores changed encoder settings", "data/cache.py",
     "                if spec.get(key) != value:", "                if False:",
     ["tests/data/test_cache.py", "-k", "other_encoder_settings"]),
    ("trec_eval tie resolution never widens its search", "retrieval/search.py",
     "        depth = min(n_docs, 2 * depth)", "        break",
     ["tests/retrieval/test_search.py", "-k", "trec_order"]),
    ("select --validate ignores --selector-dim and --seed", "cli.py",
     "selector_dim=args.selector_dim, seed=args.seed, query_ids=tr.query_ids,",
     "selector_dim=None, seed=0, query_ids=tr.query_ids,",
     ["tests/test_cli.py", "-k", "passes_selector_dim"]),
    ("the Gram-SVD path is never certified", "linalg/lowrank.py",
     '    if np.all(resid <= tol * s[0]):\n        _count("singular:gram")', '    if True:\n        _count("singular:gram")',
     ["tests/linalg/test_lowrank.py", "-k", "ill_conditioned"]),
    ("a grade-0 judgement counts as a seen document", "retrieval/generalisation.py",
     "            if g > 0:\n                out.add(str(d))", "            if g >= 0:\n                out.add(str(d))",
     ["tests/retrieval/test_generalisation.py", "-k", "seen"]),
    ("the document prior forgets its weight", "retrieval/generalisation.py",
     "        scores = scores + beta * is_seen[rows]", "        scores = scores",
     ["tests/retrieval/test_generalisation.py", "-k", "prior"]),
    ("unseen-relevant rankings keep the seen relevant documents", "retrieval/generalisation.py",
     "        ranked = [r for r in idx[i].tolist() if r not in drop][:k]", "        ranked = idx[i].tolist()[:k]",
     ["tests/retrieval/test_generalisation.py", "-k", "unseen_relevant"]),
    ("auto keeps the family that lost on validation", "selectors/validation.py",
     'return ("dual" if diff > 0 else "shared"), "validation"',
     'return ("shared" if diff > 0 else "dual"), "validation"',
     ["tests/adapters/test_workflow.py", "-k", "choose_family"]),
    ("a folder replacement does not roll back", "_atomic.py",
     "            os.replace(old, dest)  # put the previous folder back", "            pass",
     ["tests/test_atomic.py"]),
    ("fit --out accepts an adapter folder holding a user's file", "adapters/io.py",
     "            if foreign:\n                shown", "            if False:\n                shown",
     ["tests/adapters/test_io.py", "-k", "users_file"]),
    ("a sweep cell with an edited record counts as done", "experiments/store.py",
     "    if digest is not None and digest != _record_digest(record):", "    if False:",
     ["tests/experiments/test_runner.py", "-k", "without_its_record"]),
    ("evaluate --adapter scores the adapter's training queries", "adapters/workflow.py",
     "operator=ad.operator_, backend=backend, ties=ties, exclude_queries=seen, cache=emb,",
     "operator=ad.operator_, backend=backend, ties=ties, exclude_queries=None, cache=emb,",
     ["tests/adapters/test_workflow.py", "-k", "test_only"]),
    ("the anchor term never reaches the loss", "adapters/training.py",
     "                        if anchor > 0:  # L2-SP", "                        if False:  # L2-SP",
     ["tests/adapters/test_planted_faults.py", "-k", "anchor"]),
    ("a damaged split record is read as no record", "adapters/workflow.py",
     "    if not isinstance(split, dict):\n        raise", "    if not isinstance(split, dict):\n        return {}\n        raise",
     ["tests/adapters/test_workflow.py", "-k", "damaged_split"]),
    ("an edited adapter.json form is scored", "adapters/io.py",
     "        if key in training and training[key] != value:", "        if False:",
     ["tests/adapters/test_io.py", "-k", "edited_decision"]),
    ("a validation cell decomposes the largest prefix's moment, not its own", "estimators/validation.py",
     "spectra = truncation_spectra(moments[m], top,", "spectra = truncation_spectra(moments[max(moments)], top,",
     ["tests/estimators/test_validation.py", "-k", "brute_force"]),
    ("SURE reuses the unprojected eigenpairs under a selector projection", "estimators/validation.py",
     "(None if projected else eigen)", "eigen",
     ["tests/estimators/test_validation.py", "-k", "decomposition_per_size"]),
    ("the anisotropic noise forgets the mean term", "kernels/theory.py",
     "(_skew_tangent_norms(X, D, U).sum() - n * mean_part) / (n - 1)", "(_skew_tangent_norms(X, D, U).sum()) / (n - 1)",
     ["tests/kernels/test_theory.py", "-k", "anisotropic"]),
    ("the anisotropic rule compares with one noise, not two", "kernels/theory.py",
     "thr = 2.0 * noise", "thr = noise",
     ["tests/kernels/test_theory.py", "-k", "anisotropic"]),
    ("the ranking selector drops its one-SE rule", "selectors/ranking.py",
     'choice="dual" if diff > se else "shared"', 'choice="dual" if diff > 0 else "shared"',
     ["tests/retrieval/test_ranking_selector.py"]),
    ("CARS cuts no Gram blocks for a half (recomputes them)", "linalg/solver_choice.py",
     "return (_spectra_from_factors(X1, D1, 1.0 / m1, rank, g1, S1),",
     "return (_spectra_from_factors(X1, D1, 1.0 / m1, rank, None, S1),",
     ["tests/kernels/test_selection.py", "-k", "real_mpnet"]),
    ("a legacy cache with other query ids is accepted", "data/cache.py",
     "    if cache.query_ids != dataset.query_ids:", "    if False:",
     ["tests/data/test_cache.py", "-k", "every_refusal"]),
    ("auto with a named selector trains both families", "adapters/workflow.py",
     '            ad = train(auto["choice"])', '            fitted = {fam: train(fam) for fam in ("shared", "dual")}\n            ad = fitted[auto["choice"]]',
     ["tests/adapters/test_workflow.py", "-k", "named_selector and cars"]),
    ("a damaged chunk is trusted when encoding resumes", "data/encoding.py",
     "        except (ValueError, OSError, EOFError):\n            return False",
     "        except (ValueError, OSError, EOFError):\n            return True",
     ["tests/data/test_cache.py", "-k", "damaged_chunk"]),
    ("a score overflow for a later query is ranked as +inf", "retrieval/search.py",
     "    bad = ~np.isfinite(top.scores) & (top.indices >= 0)\n    if bad.any():",
     "    bad = ~np.isfinite(top.scores) & (top.indices >= 0)\n    if False:",
     ["tests/retrieval/test_search.py", "-k", "later_query"]),
    ("evaluate --adapter's frozen run ignores the tie order asked for", "adapters/workflow.py",
     "                             backend=backend, ties=ties, exclude_queries=seen, cache=emb)",
     "                             backend=backend, exclude_queries=seen, cache=emb)",
     ["tests/adapters/test_workflow.py", "-k", "ties_and_backend"]),
    ("the training queries are rebuilt with seed 0 when none is recorded", "adapters/workflow.py",
     'ids = training_pool(ds, split.get("seed", DEFAULT_SPLIT_SEED))', 'ids = training_pool(ds, split.get("seed", 0))',
     ["tests/adapters/test_workflow.py", "-k", "recorded_split_seed"]),
    ("a validation table of the wrong type reaches len()", "adapters/training.py",
     '        for attr in ("rows", "n_docs", "grades"):\n            if not hasattr(validation_relevance, attr):',
     '        for attr in ():\n            if not hasattr(validation_relevance, attr):',
     ["tests/adapters/test_training.py", "-k", "refused_naming"]),
    ("a failed pivoted Cholesky is not caught", "linalg/lowrank.py",
     "    except np.linalg.LinAlgError:\n        return None\n    if k < 1:",
     "    except ZeroDivisionError:\n        return None\n    if k < 1:",
     ["tests/linalg/test_lowrank.py", "-k", "failed_pivoted"]),
    ("a cache of another encoder stands in for the one named", "data/cache.py",
     "    if recorded != want and get_encoder(recorded).name != want:", "    if False:",
     ["tests/data/test_triples.py", "-k", "encoder_named"]),
    ("CARS hands a half the other side's Gram block", "linalg/solver_choice.py",
     "g1 = (grams[0][np.ix_(I1, I1)], grams[1][np.ix_(I1, I1)])", "g1 = (grams[1][np.ix_(I1, I1)], grams[1][np.ix_(I1, I1)])",
     ["tests/kernels/test_selection.py", "-k", "real_mpnet"]),
    ("one rule's cell fields replace the other rules'", "estimators/validation.py",
     "                row.update(_rule_cell(rule, Xr, Dr, int(r), split_seed, context.with_(eigen=eigen)))",
     "                row = {**{k: row[k] for k in ('fold', 'size', 'rank', 'loss_shared', 'loss_dual')},\n"
     "                       **_rule_cell(rule, Xr, Dr, int(r), split_seed, context.with_(eigen=eigen))}",
     ["tests/estimators/test_validation.py", "-k", "every_cell_field"]),
]


def run_one(fault: tuple[str, str, str, str, list[str]]) -> tuple[bool, float]:
    _, rel, old, new, args = fault
    path = SRC / rel
    original = path.read_bytes()
    text = original.decode()
    if old not in text:
        raise SystemExit(f"{rel}: the text to replace is gone; update tools/plant_faults.py ({old[:60]!r})")
    try:
        path.write_text(text.replace(old, new, 1))
        t0 = time.perf_counter()
        rc = _pytest(args)
        if rc not in (0, 1):
            raise SystemExit(f"{' '.join(args)}: pytest exited {rc} with the fault planted (no tests selected, "
                             "or a collection error): the fault is not judged")
        return rc == 1, time.perf_counter() - t0
    finally:
        path.write_bytes(original)


def _pytest(args: list[str]) -> int:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True).returncode


def check_baseline(faults: list[tuple[str, str, str, str, list[str]]]) -> None:
    """The tests meant to catch each fault must select something and pass on the unplanted code,
    or a "killed" would only mean they fail anyway."""
    for args in {tuple(f[4]) for f in faults}:
        rc = _pytest(list(args))
        if rc != 0:
            raise SystemExit(f"{' '.join(args)}: exits {rc} on the unplanted code; fix the tests before planting")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print the faults and exit")
    args = ap.parse_args(argv)
    if args.list:
        for d, rel, *_ in FAULTS:
            print(f"{rel}: {d}")
        return 0
    check_baseline(FAULTS)
    rows, killed = [], 0
    for fault in FAULTS:
        caught, secs = run_one(fault)
        killed += caught
        rows.append(f"| {fault[0]} | `{fault[1]}` | {'killed' if caught else '**survived**'} | "
                    f"`{' '.join(fault[4])}` | {secs:.1f} |")
        print(rows[-1], flush=True)
    print(f"\n{killed} of {len(FAULTS)} planted faults fail the tests meant to catch them.")
    return 0 if killed == len(FAULTS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
