"""Table 2: local-risk (Theorem 2) and SURE (Theorem 3) calibration, Appendix F.

Design (fixed for every cell, from ``cell_seed(master, 0)``): a rank-r PSD point
``S = U diag(2..1) U^T`` in dimension p (:func:`~asymgeo.estimators.simulation.local_gaussian_point`),
a unit direction ``E_A`` in the dual-only space ``A = T_d ∩ T_s^⊥`` and a unit
direction ``E_s`` in ``T_s``.  At signal level ``level = δ²/(σ²k)`` the local
direction is ``H = δ E_A + sqrt(shared_signal) E_s`` (so ``||Π_A H||² = δ²``).

Risk cell (n, level): the target ``M_n = P_{d,r}(S + H/√n)`` lies on the rank-r
manifold with ``M_n = S + H/√n + O(1/n)``; each of ``risk_draws`` observations
``Y_n = M_n + (σ/√n) G`` is projected onto both closed families by the true
nearest-point maps (batched rank-r SVD truncation and positive eigen-truncation),
and ``n ||M̂_j - M_n||²`` is averaged.  Theory: ``σ² dim T_d`` and
``δ² + σ² dim T_s``.  The same draws give the finite-n SURE choice frequency for
``Z_n = √n Π_{T_d}(Y_n - S)``.

SURE (per cell, independent draws): ``sure_draws`` Gaussian-sequence draws
``Z = H + σ Π_{T_d} G`` in the limit model; SURE picks dual iff
``R̂_d < R̂_s`` (eq. 4).  Theory: ``Pr{χ²_k(δ²/σ²) > 2k}`` (eq. 5).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..estimators.simulation import local_gaussian_point
from ..kernels.geometry import tangent_dims, tangent_projectors
from ..kernels.theory import local_risks, sure_select_probability
from .runner import cell_seed

__all__ = ["design", "batched_dual_truncate", "batched_shared_truncate", "cell", "summarise",
           "claims", "plot", "PAPER_RISK_REL_TOL", "PAPER_SURE_ABS_TOL"]

PAPER_RISK_REL_TOL = 0.0025  # "within 0.25%" at n = 4096
PAPER_SURE_ABS_TOL = 0.001   # "within 0.001"


def design(p: int, rank: int, sigma: float, level: float, shared_signal: float, master_seed: int):
    """The fixed local design: ``(S, U, H, delta2, k)`` for one signal level."""
    rng = np.random.default_rng(cell_seed(master_seed, 0))
    S, U = local_gaussian_point(p, rank, rng)
    proj = tangent_projectors(U)
    _, _, k = tangent_dims(p, rank)
    E_A = proj.Pi_A(rng.standard_normal((p, p)))
    E_A /= np.linalg.norm(E_A)
    E_s = proj.Pi_Ts(rng.standard_normal((p, p)))
    E_s /= np.linalg.norm(E_s)
    delta2 = float(level) * sigma * sigma * k
    H = np.sqrt(delta2) * E_A + np.sqrt(shared_signal) * E_s
    return S, U, H, delta2, k


def batched_dual_truncate(Y: np.ndarray, rank: int) -> np.ndarray:
    """Rank-r SVD truncation of each matrix in a stack ``Y`` (b, p, p)."""
    U, s, Vt = np.linalg.svd(Y)
    return (U[..., :rank] * s[..., None, :rank]) @ Vt[..., :rank, :]


def batched_shared_truncate(Y: np.ndarray, rank: int) -> np.ndarray:
    """Positive eigen-truncation (largest ≤ r positive eigenvalues of the symmetric part)
    of each matrix in a stack ``Y`` (b, p, p)."""
    w, Q = np.linalg.eigh((Y + np.swapaxes(Y, -1, -2)) / 2.0)
    w, Q = np.maximum(w[..., -rank:], 0.0), Q[..., -rank:]
    return (Q * w[..., None, :]) @ np.swapaxes(Q, -1, -2)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


def cell(config: dict[str, Any]) -> dict[str, Any]:
    """One Table-2 cell at (n, level): Monte-Carlo risks and SURE probabilities.

    Config keys: ``n, level, p, rank, sigma, shared_signal, risk_draws, sure_draws,
    chunk, master_seed``.
    """
    master = int(config["master_seed"])
    n, level = int(config["n"]), float(config["level"])
    p, r, sigma = int(config["p"]), int(config["rank"]), float(config["sigma"])
    chunk = int(config.get("chunk", 5000))
    S, U, H, delta2, k = design(p, r, sigma, level, float(config["shared_signal"]), master)
    proj = tangent_projectors(U)
    d_d, d_s, _ = tangent_dims(p, r)
    theory = local_risks(H, U, sigma)
    root_n = np.sqrt(n)
    M_n = batched_dual_truncate((S + H / root_n)[None], r)[0]
    risk_seed = cell_seed(master, 1, n)
    sure_seed = cell_seed(master, 2, n)

    # Nonlinear projections (risks) and finite-n SURE on the same draws.
    rng = np.random.default_rng(risk_seed)
    n_draws = int(config["risk_draws"])
    loss_d_parts: list[np.ndarray] = []
    loss_s_parts: list[np.ndarray] = []
    pick_n_parts: list[np.ndarray] = []
    s2 = sigma * sigma
    for start in range(0, n_draws, chunk):
        b = min(chunk, n_draws - start)
        G = rng.standard_normal((b, p, p))
        Y = M_n + (sigma / root_n) * G
        Md = batched_dual_truncate(Y, r)
        Ms = batched_shared_truncate(Y, r)
        loss_d_parts.append(n * np.sum((Md - M_n) ** 2, axis=(1, 2)))
        loss_s_parts.append(n * np.sum((Ms - M_n) ** 2, axis=(1, 2)))
        Z = root_n * proj.Pi_Td(Y - S)
        pick_n_parts.append(_sure_pick(Z, proj, s2, d_d, d_s))
    loss_d, loss_s, pick_n = (np.concatenate(x) for x in (loss_d_parts, loss_s_parts, pick_n_parts))

    # Limit Gaussian sequence model Z = H + sigma Pi_Td(G).
    rng = np.random.default_rng(sure_seed)
    m_draws = int(config["sure_draws"])
    picks = 0
    for start in range(0, m_draws, chunk):
        b = min(chunk, m_draws - start)
        Z = H + sigma * proj.Pi_Td(rng.standard_normal((b, p, p)))
        picks += int(_sure_pick(Z, proj, s2, d_d, d_s).sum())
    p_sure = picks / m_draws
    p_theory = float(sure_select_probability(k, delta2 / s2))

    rd, rd_se = _mean_se(loss_d)
    rs, rs_se = _mean_se(loss_s)
    diff, diff_se = _mean_se(loss_s - loss_d)
    return {
        "delta2": delta2,
        "k": k,
        "dim_Td": d_d,
        "dim_Ts": d_s,
        "risk_dual": rd,
        "risk_dual_se": rd_se,
        "risk_dual_theory": theory.dual,
        "risk_shared": rs,
        "risk_shared_se": rs_se,
        "risk_shared_theory": theory.shared,
        "risk_diff": diff,
        "risk_diff_se": diff_se,
        "risk_diff_theory": theory.difference,
        "sure_prob": p_sure,
        "sure_prob_se": float(np.sqrt(max(p_theory * (1 - p_theory), 1e-300) / m_draws)),
        "sure_prob_theory": p_theory,
        "sure_prob_finite_n": float(pick_n.mean()),
        "risk_seed": risk_seed,
        "sure_seed": sure_seed,
    }


def _sure_pick(Z: np.ndarray, proj, s2: float, d_d: int, d_s: int) -> np.ndarray:
    """SURE choice (True = dual) for a stack of scaled observations (eq. 4 via the risks)."""
    Rd = np.sum((Z - proj.Pi_Td(Z)) ** 2, axis=(1, 2)) + s2 * d_d
    Rs = np.sum((Z - proj.Pi_Ts(Z)) ** 2, axis=(1, 2)) + s2 * (2 * d_s - d_d)
    return Rd < Rs


def summarise(df):
    """Add relative/absolute errors and Monte-Carlo z-scores; one row per (n, level)."""
    out = df.sort_values(["n", "level"]).copy()
    for fam in ("dual", "shared"):
        out[f"rel_err_{fam}"] = out[f"risk_{fam}"] / out[f"risk_{fam}_theory"] - 1.0
        out[f"rel_se_{fam}"] = out[f"risk_{fam}_se"] / out[f"risk_{fam}_theory"]
        out[f"z_{fam}"] = (out[f"risk_{fam}"] - out[f"risk_{fam}_theory"]) / out[f"risk_{fam}_se"]
    out["abs_err_sure"] = out["sure_prob"] - out["sure_prob_theory"]
    out["z_sure"] = out["abs_err_sure"] / out["sure_prob_se"]
    out["abs_err_sure_finite_n"] = out["sure_prob_finite_n"] - out["sure_prob_theory"]
    return out.reset_index(drop=True)


def claims(summary) -> dict[str, Any]:
    """Checks of the Table 2 claims at the largest n of a :func:`summarise` table.

    Theorem 2's risks within 0.25% relative (:data:`PAPER_RISK_REL_TOL`) and Theorem 3's SURE
    probabilities within 0.001 absolute (:data:`PAPER_SURE_ABS_TOL`), with the Monte-Carlo
    precision that qualifies them: ``max_rel_err``, ``max_rel_se``, ``max_abs_z``,
    ``risks_hold``; ``max_abs_err_sure``, ``max_sure_se``, ``max_abs_z_sure``, ``sure_holds``;
    ``n`` the size they refer to.
    """
    n_max = int(summary["n"].max())
    top = summary[summary["n"] == n_max]
    max_rel = float(np.abs(top[["rel_err_dual", "rel_err_shared"]]).to_numpy().max())
    max_abs = float(np.abs(top["abs_err_sure"]).max())
    return {
        "n": n_max,
        "max_rel_err": max_rel,
        "max_rel_se": float(top[["rel_se_dual", "rel_se_shared"]].to_numpy().max()),
        "max_abs_z": float(np.abs(top[["z_dual", "z_shared"]]).to_numpy().max()),
        "risks_hold": max_rel <= PAPER_RISK_REL_TOL,
        "max_abs_err_sure": max_abs,
        "max_sure_se": float(top["sure_prob_se"].max()),
        "max_abs_z_sure": float(np.abs(top["z_sure"]).max()),
        "sure_holds": max_abs <= PAPER_SURE_ABS_TOL,
    }


def plot(summary, path) -> None:
    """Relative risk error against n (with ±1.96 SE bands) and SURE probability error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_p) = plt.subplots(1, 2, figsize=(11, 4))
    cmap = plt.get_cmap("viridis")
    levels = sorted(summary["level"].unique())
    for j, lev in enumerate(levels):
        g = summary[summary["level"] == lev].sort_values("n")
        c = cmap(j / max(1, len(levels) - 1))
        for fam, style in (("dual", "o-"), ("shared", "s--")):
            ax_r.plot(g["n"], 100 * g[f"rel_err_{fam}"], style, color=c, ms=4,
                      label=f"{fam}, δ²/σ²k={lev:g}")
            ax_r.fill_between(g["n"], 100 * (g[f"rel_err_{fam}"] - 1.96 * g[f"rel_se_{fam}"]),
                              100 * (g[f"rel_err_{fam}"] + 1.96 * g[f"rel_se_{fam}"]), color=c, alpha=0.08)
        ax_p.errorbar(g["n"] * (1 + 0.04 * j), g["abs_err_sure"], yerr=1.96 * g["sure_prob_se"], fmt="o",
                      color=c, ms=4, capsize=2, label=f"δ²/σ²k={lev:g}")
    for ax in (ax_r, ax_p):
        ax.set_xscale("log", base=2)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel("n")
    ax_r.axhspan(-100 * PAPER_RISK_REL_TOL, 100 * PAPER_RISK_REL_TOL, color="gold", alpha=0.25)
    ax_r.set_ylabel("simulation / theory - 1  (%)")
    ax_r.set_title("Theorem 2: n-scaled risk, relative error (band: paper's ±0.25%)")
    ax_r.legend(fontsize=6, ncol=2)
    ax_p.axhspan(-PAPER_SURE_ABS_TOL, PAPER_SURE_ABS_TOL, color="gold", alpha=0.25)
    ax_p.set_ylabel("simulated - exact  Pr(SURE picks dual)")
    ax_p.set_title("Theorem 3: SURE probability error (±1.96 MC SE)")
    ax_p.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
