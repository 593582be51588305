"""Commands for the reachability matrices (setup's verification and check.yml): every host
probes every other, all of a host's probes in one concurrent_commands run (roles/cluster/library).

Hosts are cluster_hosts entries (inventory.py); each command's item is the probed host's entry.
"""


def ping_argv(system, interface, address, timeout=2):
    """argv that sends one ping to `address` out of `interface` and gives up after `timeout` s.

    Linux (iputils): -I binds to the interface, -W is the reply timeout in seconds.
    macOS: -b binds to the interface, -t is the overall timeout in seconds (-W is in ms there).
    """
    timeout = str(int(timeout))
    if system == "Darwin":
        return ["ping", "-c", "1", "-t", timeout, "-b", interface, address]
    if system == "Linux":
        return ["ping", "-c", "1", "-W", timeout, "-I", interface, address]
    raise ValueError(f"no ping flags for system {system!r} (Darwin or Linux)")


def ping_commands(hosts, system, interface, timeout=2):
    """Ping each host's thunderbolt_ip out of `interface`, so a reply proves that link."""
    return [
        {"item": host, "argv": ping_argv(system, interface, host["thunderbolt_ip"], timeout)}
        for host in hosts
    ]


def cable_ping_commands(ends, system, timeout=2):
    """Ping the other end of each of this host's cables out of its own port, so a reply proves
    that cable. ends: the host's cable ends (cable_plan(...)["hosts"][host]: "interface",
    "peer_address", ...), each the item of its command."""
    return [{"item": end, "argv": ping_argv(system, end["interface"], end["peer_address"], timeout)}
            for end in ends]


def ssh_commands(hosts, connect_timeout):
    """Log in to each host's MPI address as Open MPI does (no prompt, pinned host key) and print
    its hostname. Keepalives end a login that connects and then hangs."""
    options = ["BatchMode=yes", "StrictHostKeyChecking=yes",
               f"ConnectTimeout={int(connect_timeout)}", "ServerAliveInterval=2",
               "ServerAliveCountMax=2"]
    argv = ["ssh"] + [word for option in options for word in ("-o", option)]
    return [{"item": host, "argv": [*argv, host["mpi_address"], "hostname"]} for host in hosts]


class FilterModule:
    def filters(self):
        return {
            "cable_ping_commands": cable_ping_commands,
            "ping_argv": ping_argv,
            "ping_commands": ping_commands,
            "ssh_commands": ssh_commands,
        }
