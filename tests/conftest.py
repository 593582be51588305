"""Shared fixtures: `vcluster`, a factory of virtual Thunderbolt clusters (tools/vcluster.py)."""

import os
import shutil
import subprocess

import pytest

from tools.vcluster import VirtualCluster


def cluster_unavailable() -> str | None:
    """Why virtual clusters cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "virtual cluster needs root (network and mount namespaces)"
    netns = shutil.which("ip") and subprocess.run(["ip", "netns", "list"], capture_output=True)
    if not netns or netns.returncode:
        return "virtual cluster needs iproute2 with `ip netns`"
    return None


def pytest_collection_modifyitems(items):
    reason = cluster_unavailable() if any("cluster" in i.keywords for i in items) else None
    for item in items:
        if reason and "cluster" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def vcluster(tmp_path_factory):
    """`vc = vcluster(hosts=2, **kw)` returns an up VirtualCluster; all are removed at test end."""
    reason = cluster_unavailable()
    if reason:
        pytest.skip(reason)
    clusters = []

    def make(hosts=2, **kw):
        kw.setdefault("workdir", tmp_path_factory.mktemp("vcluster") / "vc")
        vc = VirtualCluster(hosts=hosts, **kw)
        clusters.append(vc)
        return vc.up()

    yield make
    errors = []
    for vc in reversed(clusters):
        try:
            vc.down()
        except Exception as exc:  # keep tearing the others down, then report
            errors.append(exc)
    if errors:
        raise errors[0]
