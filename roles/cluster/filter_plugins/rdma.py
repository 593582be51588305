"""What macOS says about RDMA over Thunderbolt (MLX's jaccl backend): `rdma_ctl status`,
`ibv_devices` and `sw_vers -buildVersion`, for check.yml's RDMA rows and train.yml's preflight.

RDMA over Thunderbolt needs macOS 26.2 or later, Thunderbolt 5, `rdma_ctl enable` run once in
macOS Recovery (it cannot be done from the running system, not even with sudo), and the same
macOS build on every Mac (Apple TN3205; MLX's distributed docs; exo's README). Then `ibv_devices`
lists one device per Thunderbolt port, rdma_<its network interface>. Pure functions,
unit-tested against recorded real outputs in tests/unit/test_rdma.py.
"""

def ibv_device_names(stdout):
    """The RDMA devices `ibv_devices` lists: ['rdma_en2', 'rdma_en3', ...], in its order.

    It prints a header (`device  node GUID` and a line of dashes), then one device per line; the
    names MLX uses are those starting with rdma_ (mlx.distributed_config's check_rdma)."""
    names = []
    for line in str(stdout or "").splitlines():
        words = line.split()
        if words and words[0].startswith("rdma_"):
            names.append(words[0])
    return names


def rdma_ctl_state(stdout):
    """`rdma_ctl status` -> 'enabled', 'disabled', or None when it said something else."""
    text = str(stdout or "").strip().lower()
    if text in ("enabled", "disabled"):
        return text
    return None


def macos_build(stdout):
    """`sw_vers -buildVersion` -> '25D125' (None when it printed nothing)."""
    return str(stdout or "").strip() or None


def rdma_missing_devices(devices, ports):
    """The RDMA devices a host lacks for its cable ports: ports ['en2', 'en3'] need rdma_en2 and
    rdma_en3 in `devices` (ibv_device_names)."""
    return [f"rdma_{port}" for port in ports if f"rdma_{port}" not in set(devices)]


class FilterModule:
    def filters(self):
        return {
            "ibv_device_names": ibv_device_names,
            "macos_build": macos_build,
            "rdma_ctl_state": rdma_ctl_state,
            "rdma_missing_devices": rdma_missing_devices,
        }
