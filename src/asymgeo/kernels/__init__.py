"""Layer 2, kernels: the paper's mathematics, pure functions on arrays; imports only the foundation and linalg.

Relevance moment and the two truncations (:mod:`.geometry`, Theorems 1 and 4), local risks
and the SURE rule (:mod:`.theory`, Theorems 2 and 3), its bootstrap on the actual truncations
(:mod:`.bootstrap_risk`), CARS (:mod:`.selection`, eq. 7),
held-out operator risk (:mod:`.operator_risk`, RQ4), partial sharing (:mod:`.partial_sharing`,
issue 20), query rotations (:mod:`.rotation`, RQ3) and seeded folds and nested subsets
(:mod:`.folds`).  No I/O, no state.
"""
