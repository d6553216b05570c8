"""Layer 1, linalg (private): certified top-r solvers, GIL-free LAPACK; imports the foundation, numpy, SciPy.

:mod:`.lowrank` answers the truncations' spectral problems (subset LAPACK, thin factors,
mixed precision, block Krylov), each answer checked by a float64 certificate with a LAPACK
fallback; :mod:`.solver_choice` decides once, from a full moment, which of them answers
its half moments (:class:`.solver_choice.HalfMomentSolver`, for CARS); :mod:`.lapack` calls
the hot LAPACK/BLAS routines through SciPy's Cython API without the GIL.  Not public API:
use :mod:`asymgeo.kernels`.
"""
