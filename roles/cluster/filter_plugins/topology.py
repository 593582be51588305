"""What the cables of the `cables` topology allow: their shape, the ring MLX would pick, which
backends can run over them, and why not.

Pure functions over cluster_hosts entries and a cable_plan, unit-tested (against MLX's own
mlx.distributed_config functions) in tests/unit/test_topology.py.

What the backends need (MLX 0.32, Open MPI 4/5):
- MLX `ring`: rank r accepts connections on its own "ips" and connects to rank r+1's, one socket
  per IP (mlx/distributed/ring): a cable between every two consecutive ranks, rank n-1 to rank 0
  included. Over cables the ranks follow the ring, not the inventory (rank 0 stays the first
  host). mlx.distributed_config picks the first ring found by a depth-first walk from the first
  host, neighbours in inventory order; so do we, so both give the same ranks.
- MLX `jaccl`: an RDMA device between every two ranks, i.e. a cable between every two hosts.
- MLX `jaccl-ring`: RDMA devices to both ring neighbours only, i.e. the ring above.
- Open MPI (`mpi`): mpirun starts its daemons over ssh on the hostfile's addresses and the TCP
  BTL connects every rank to every other directly (no routing between the /30s). It pairs the
  interfaces of two hosts by a maximum matching that, on macOS (reachable/weighted), also pairs
  interfaces in different subnets. So Open MPI runs over the cables only where the ranked hosts
  are two (every cable of the pair lies in a /30 of both) and otherwise keeps to the management
  network (ansible_host), with the pool excluded from its interfaces.
"""

MLX_BACKENDS = ("ring", "jaccl", "jaccl-ring")


def _ring(count):
    """The first ring through every node, as mlx.distributed_config's extract_rings finds it: a
    depth-first walk from node 0 trying neighbours in index order. [] when there is none.
    Dead ends (last node, nodes used) are remembered: under 0.2 s for 16 hosts without a ring."""
    n = len(count)
    path, dead = [0], set()

    def extend(used):
        if len(path) == n:
            return count[path[-1]][0] > 0
        if (path[-1], used) in dead:
            return False
        for node in range(n):
            if not used >> node & 1 and count[path[-1]][node] > 0:
                path.append(node)
                if extend(used | 1 << node):
                    return True
                path.pop()
        dead.add((path[-1], used))
        return False

    return list(path) if n > 1 and extend(1) else []


def _connected(count):
    seen, todo = {0}, [0]
    while todo:
        node = todo.pop()
        for other, cables in enumerate(count[node]):
            if cables and other not in seen:
                seen.add(other)
                todo.append(other)
    return len(seen) == len(count)


def _shape(count, missing):
    n = len(count)
    if n < 2:
        return "single"
    if not missing:
        return "mesh"
    degrees = [sum(1 for cables in row if cables) for row in count]
    if not _connected(count):
        return "other"
    if all(d == 2 for d in degrees):
        return "ring"
    if sum(degrees) == 2 * (n - 1) and max(degrees) <= 2:
        return "chain"
    return "other"


def cable_topology(hosts, plan):
    """The cable graph over the hosts that run ranks (cluster_hosts entries, mpi_slots > 0).

    plan: cable_plan's result. Returns
    {"hosts": [ranked names, inventory order],
     "shape": "single" | "chain" | "ring" | "mesh" | "other",   # mesh: a cable between every two
     "cables": [the plan's cables between ranked hosts],
     "disconnected": [ranked hosts with no cable to another ranked host],
     "missing": [[a, b], ...],         # ranked pairs without a cable (what a mesh lacks)
     "ring": [names in MLX's ring order, i.e. the ranks of ring / jaccl-ring] or [],
     "ring_width": cables on the ring's thinnest link (MLX's connections per neighbour), or 0,
     "multi_slot": [ranked hosts with mpi_slots > 1],
     "backends": {"ring": bool, "jaccl": bool, "jaccl-ring": bool},
     "mpi": {"over": "cables", "include": pool} | {"over": "management", "exclude": pool},
     "summary": one line for the play}
    A backend is usable when cable_backend_errors(topology, backend) is empty.
    """
    ranked = [h["name"] for h in hosts if h["slots"] > 0]
    index = {name: i for i, name in enumerate(ranked)}
    n = len(ranked)
    count = [[0] * n for _ in range(n)]
    cables = []
    for cable in plan["cables"]:
        a, b = cable["hosts"]
        if a in index and b in index:
            cables.append(cable)
            count[index[a]][index[b]] += 1
            count[index[b]][index[a]] += 1
    missing = [[ranked[i], ranked[j]] for i in range(n) for j in range(i + 1, n) if not count[i][j]]
    ring = _ring(count)
    width = min((count[ring[i - 1]][node] for i, node in enumerate(ring)), default=0)
    shape = _shape(count, missing)
    disconnected = [name for i, name in enumerate(ranked) if n > 1 and not any(count[i])]
    topology = {
        "hosts": ranked,
        "shape": shape,
        "cables": cables,
        "disconnected": disconnected,
        "missing": missing,
        "ring": [ranked[i] for i in ring],
        "ring_width": width,
        "multi_slot": [h["name"] for h in hosts if h["slots"] > 1],
        "mpi": ({"over": "cables", "include": plan["pool"]} if n == 2 and not missing
                else {"over": "management", "exclude": plan["pool"]}),
    }
    topology["backends"] = {name: not cable_backend_errors(topology, name)
                            for name in MLX_BACKENDS}
    if n < 2:
        topology["summary"] = "one host runs ranks: its ranks need no cable"
    else:
        summary = f"{shape}: {n} hosts, {len(cables)} cable(s)"
        summary += ": " + ", ".join(c["label"] for c in cables) if cables else ""
        if disconnected:
            summary += f"; not cabled to the others: {', '.join(disconnected)}"
        topology["summary"] = summary
    return topology


SHAPES = {"chain": "a chain", "ring": "a ring", "mesh": "a full mesh",
          "other": "no chain, ring or full mesh"}


def _found(topology):
    """How the refusals name what was found."""
    text = f"the cables between {', '.join(topology['hosts'])} form {SHAPES[topology['shape']]}"
    if topology["disconnected"]:
        text += f" ({', '.join(topology['disconnected'])}: no cable to the others)"
    return text


def _ring_fix(topology):
    """The cheapest advice for a missing ring."""
    if topology["disconnected"]:
        return (f"cable {', '.join(topology['disconnected'])} to the others (or give it "
                "mpi_slots 0)")
    if topology["shape"] == "chain":
        ends = [name for name in topology["hosts"]  # a chain's ends have one neighbour
                if len({h for c in topology["cables"] if name in c["hosts"] for h in c["hosts"]})
                == 2]
        return f"add a cable {ends[0]} - {ends[-1]} to close the chain into a ring"
    return "cable the hosts as a ring (each to the next, the last to the first)"


def cable_backend_errors(topology, backend):
    """Why backend cannot run over these cables ([] when it can), naming the shape found and
    the fix. backend: ring, jaccl, jaccl-ring or mpi (mpi always can: see the module doc)."""
    if backend == "mpi":
        return []
    if backend not in MLX_BACKENDS:
        return [f"backend {backend!r} is not one of mpi, {', '.join(MLX_BACKENDS)}"]
    hosts = topology["hosts"]
    if len(hosts) < 2:
        return [] if backend == "ring" else [
            f"{backend}: only {', '.join(hosts) or 'no host'} runs ranks, and {backend} "
            "connects hosts over RDMA — use backend ring (or mpi) on one host"
        ]
    errors = [
        f"{name}: mpi_slots > 1 — over cables MLX's {backend} backend runs one rank per host (a "
        "rank listens on its host's cable addresses) — set mpi_slots 1, or use backend mpi"
        for name in topology["multi_slot"]
    ]
    if backend == "jaccl" and topology["missing"]:
        pairs = ", ".join(f"{a} - {b}" for a, b in topology["missing"])
        errors.append(
            f"jaccl: {_found(topology)}, and jaccl needs a cable between every two hosts — add "
            f"the cable(s) {pairs}, or use backend jaccl-ring or ring, which need a ring"
        )
    elif backend != "jaccl" and not topology["ring"]:
        errors.append(
            f"{backend}: {_found(topology)}, and {backend} needs a ring through every host that "
            f"runs ranks — {_ring_fix(topology)}, or use backend mpi (over the management "
            "network)"
        )
    return errors


def cable_dot(plan):
    """The cables as a Graphviz graph: one node per host, one edge per cable, labelled with the
    interfaces and addresses of both ends (`dot -Tpng` draws it)."""
    lines = ["graph cables {", "  node [shape=box];"]
    lines += [f'  "{name}";' for name in plan["hosts"]]
    for cable in plan["cables"]:
        (a, b), (ia, ib), (xa, xb) = cable["hosts"], cable["interfaces"], cable["addresses"]
        lines.append(f'  "{a}" -- "{b}" [label="{ia} {xa}\\n{ib} {xb}"];')
    return "\n".join(lines + ["}"]) + "\n"


class FilterModule:
    def filters(self):
        return {
            "cable_backend_errors": cable_backend_errors,
            "cable_dot": cable_dot,
            "cable_topology": cable_topology,
        }
