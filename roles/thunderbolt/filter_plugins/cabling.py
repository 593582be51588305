"""The `cables` topology in the thunderbolt role: the links a host configures, what setup says
about the cables it found, and what it refuses.

Pure functions over cable_plan / cable_topology results (roles/cluster/filter_plugins),
unit-tested in tests/unit/test_thunderbolt_cabling.py.
"""

def thunderbolt_cable_links(ends, connection_prefix):
    """This host's ends of the cables (cable_plan(...)["hosts"][host]) as the links the role
    configures: each end plus "connection", the NetworkManager profile (Linux) or network service
    (macOS) the role keeps for that port: connection_prefix + interface, e.g. mlx-en2."""
    return [{**end, "connection": f"{connection_prefix}{end['interface']}"} for end in ends]


def cable_topology_report(topology):
    """One line for the play: the shape found, MLX's ring order, the backends it allows and where
    Open MPI runs."""
    line = topology["summary"]
    if len(topology["hosts"]) < 2:
        return line
    if topology["ring"]:
        line += f". Ring order (ranks of ring, jaccl-ring): {', '.join(topology['ring'])}"
    backends = topology["backends"]  # MLX's: ring, jaccl, jaccl-ring
    usable = [name for name, ok in backends.items() if ok]
    unusable = [name for name, ok in backends.items() if not ok]
    mpi = topology["mpi"]
    where = (f"over the cables ({mpi['include']})" if mpi["over"] == "cables"
             else f"over the management network, off {mpi['exclude']}")
    line += f". Backends: {', '.join(usable + ['mpi'])} (mpi {where})"
    if unusable:
        line += f"; not {', '.join(unusable)}"
    return line


def cable_setup_errors(topology):
    """What setup refuses whatever the backend: a host that runs ranks without a cable to another
    such host (an unplugged or unlisted cable, most likely). Its cables would carry nothing."""
    cabled = sorted({h for cable in topology["cables"] for h in cable["hosts"]})
    return [
        f"{name}: no Thunderbolt cable to another host that runs ranks (cabled: "
        f"{', '.join(cabled) or 'none'}) — plug its cable(s) in (and list them in "
        "thunderbolt_cables where cables are not discovered), or give it mpi_slots 0"
        for name in topology["disconnected"]
    ]


class FilterModule:
    def filters(self):
        return {
            "cable_setup_errors": cable_setup_errors,
            "cable_topology_report": cable_topology_report,
            "thunderbolt_cable_links": thunderbolt_cable_links,
        }
