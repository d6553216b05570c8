"""The runtime helpers: usable CPUs (affinity and cgroup quota), BLAS limits, JSON encoding."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from asymgeo import _runtime
from asymgeo._runtime import available_cpus, cgroup_cpu_limit, json_default, limit_blas_threads


def test_available_cpus_is_the_affinity_mask_when_no_quota(monkeypatch):
    monkeypatch.setattr(_runtime, "cgroup_cpu_limit", lambda: None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert available_cpus() == 2  # a container pinned to 2 cores of a 64-core host


def test_available_cpus_capped_by_cgroup_quota(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(_runtime, "cgroup_cpu_limit", lambda: 2.5)
    assert available_cpus() == 3  # ceil(2.5)
    monkeypatch.setattr(_runtime, "cgroup_cpu_limit", lambda: 0.2)
    assert available_cpus() == 1


def test_available_cpus_matches_this_process():
    expected = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_limit()
    if quota is not None:
        expected = min(expected, -(-quota // 1))
    assert available_cpus() == max(1, int(expected))


@pytest.mark.parametrize("text, expected", [
    ("max 100000\n", None),
    ("200000 100000\n", 2.0),
    ("150000 100000", 1.5),
    ("garbage", None),
])
def test_cgroup_v2_cpu_max(tmp_path: Path, text, expected):
    (tmp_path / "cpu.max").write_text(text)
    assert cgroup_cpu_limit(tmp_path) == expected


def test_cgroup_v1_quota(tmp_path: Path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_missing_files_mean_no_limit(tmp_path: Path):
    assert cgroup_cpu_limit(tmp_path) is None


def test_limit_blas_threads_sets_and_restores():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return [d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"]

    with threadpool_limits(limits=2, user_api="blas"):  # start from 2 even under OPENBLAS_NUM_THREADS=1
        assert blas_threads() and set(blas_threads()) == {2}
        with limit_blas_threads(1):
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {2}


def test_json_default_numpy_and_paths():
    obj = {"a": np.arange(3), "b": np.float32(0.5), "c": np.int64(7), "d": np.bool_(True), "e": Path("x/y")}
    assert json.loads(json.dumps(obj, default=json_default)) == {
        "a": [0, 1, 2], "b": 0.5, "c": 7, "d": True, "e": "x/y"}
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        json.dumps({"x": object()}, default=json_default)
