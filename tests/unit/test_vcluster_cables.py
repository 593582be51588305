"""tools/vcluster.py: which hosts a virtual cluster's cables join, and what it refuses, before
anything is built (no root needed)."""

import pytest

from tools.vcluster import ClusterError, VirtualCluster, cable_pairs


@pytest.mark.parametrize(("spec", "hosts", "pairs"), [
    ("chain", 4, [(0, 1), (1, 2), (2, 3)]),
    ("ring", 3, [(0, 1), (1, 2), (2, 0)]),
    ("mesh", 4, [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]),
    ("mesh", 2, [(0, 1)]),
    ("0-2,2-1,0-2", 3, [(0, 2), (2, 1), (0, 2)]),  # two cables between two Macs is allowed
    ([(1, 0)], 2, [(1, 0)]),
    ([[0, 1], [1, 2]], 3, [(0, 1), (1, 2)]),  # as read from JSON or YAML
    (None, 3, []),
])
def test_cable_pairs(spec, hosts, pairs):
    assert cable_pairs(spec, hosts) == pairs


@pytest.mark.parametrize(("spec", "hosts", "error"), [
    ("ring", 2, "cables=ring needs at least 3 hosts, not 2"),
    ("chain", 1, "cables=chain needs at least 2 hosts, not 1"),
    ("star", 3, "use chain, ring, mesh, or pairs of 0-based host positions such as 0-1,1-2"),
    ("0-1,1", 3, "pairs of 0-based host positions"),
    ("1-2", 2, "host positions go from 0 to 1"),
    ("0-0", 2, "two different hosts per cable"),
    ([(0, 1, 2)], 3, "two different hosts per cable"),
    ([(0, True)], 2, "two different hosts per cable"),
])
def test_bad_cables_are_refused_with_the_fix(spec, hosts, error):
    with pytest.raises(ClusterError, match=error):
        cable_pairs(spec, hosts)


def test_shape_names_the_interfaces_the_hosts_have():
    assert VirtualCluster(hosts=4, cables="mesh", shape="en0=1gbit,en4=10gbit").shape == {
        "en0": "1gbit", "en4": "10gbit"}
    with pytest.raises(ClusterError, match=r"'bridge0'; use one of \('en0', 'en2', 'en3'\)"):
        VirtualCluster(hosts=3, cables="ring", shape="bridge0=10gbit")
    with pytest.raises(ClusterError, match=r"'en2'; use one of \('bridge0', 'en0'\)"):
        VirtualCluster(hosts=3, shape="en2=10gbit")
