"""Jinja filters that build Open MPI command lines.

Pure functions, unit-tested in tests/unit/test_mpi_filters.py.
"""

import posixpath

# Each rank prints its short hostname, then stays a second. Open MPI 5's daemons sometimes lose
# a rank that exits right after it starts, and mpirun then hangs after every rank has finished
# (openpmix/prrte#1839). Measured on 4 virtual hosts under load: `hostname` hung 10 of 40 runs,
# with the pause 0 of 40.
HOSTNAME_PROGRAM = ["sh", "-c", "hostname -s; sleep 1"]

# btl_tcp_if_exclude's default in Open MPI 4 and 5 (`ompi_info --param btl tcp --level 9`).
BTL_TCP_DEFAULT_EXCLUDE = "127.0.0.1/8,sppp"
# The TCP BTL's default flags in Open MPI 4.1 and 5.0 (the same command) but "put". With put, a
# large message's bulk waits for a request from its receiver, and that request queues behind
# whatever the receiver is itself sending on the same connection. On 2 ranks, where each rank
# sends to and receives from the same peer, every all-reduce's halves then took turns on the
# link, 1.5-1.9x the wire's time; without put the sender streams its fragments and both
# directions run at once: 1.00-1.05x, 3 and 4 ranks unchanged
# (benchmarks/results/mpi_allreduce-1gbit-ranks-2-*.md).
BTL_TCP_FLAGS = "send,inplace,need-ack,need-csum,hetero-rdma"


def _major(version):
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        raise ValueError(f"Open MPI version {version!r} is not like '4.1.4' or '5.0.8'") from None


def openmpi_interface_args(version, interface=None, exclude=None):
    """Flags that keep Open MPI's control (oob) and data (btl) traffic on one interface, or off
    some networks.

    interface: an interface name or a network in CIDR notation (both layers take either) to
    include. exclude: a network (CIDR) to keep both layers off, e.g. the Thunderbolt cable pool
    when Open MPI runs over the management network; the TCP BTL's own default exclusions
    (loopback, sppp) stay, as the flag replaces them. Include and exclude are mutually
    exclusive in Open MPI. Open MPI 5 moved the out-of-band layer into PRRTE, whose parameters
    take --prtemca.
    """
    if interface and exclude:
        raise ValueError(f"interface {interface!r} and exclude {exclude!r}: Open MPI takes "
                         "either an include or an exclude list, not both")
    if not interface and not exclude:
        return []
    oob_flag = "--prtemca" if _major(version) >= 5 else "--mca"
    if interface:
        return [oob_flag, "oob_tcp_if_include", interface, "--mca", "btl_tcp_if_include",
                interface]
    return [oob_flag, "oob_tcp_if_exclude", exclude, "--mca", "btl_tcp_if_exclude",
                f"{BTL_TCP_DEFAULT_EXCLUDE},{exclude}"]


def mpirun_argv(
    mpirun, hostfile, np, version, interface=None, as_root=False, env=None, extra_args=None,
    exclude=None,
):
    """mpirun argv up to the program; the caller appends the program and its arguments.

    mpirun must be absolute: Open MPI then uses the same prefix to start its daemons on the
    other hosts, whose non-interactive ssh PATH often lacks Homebrew's bin directory. The TCP
    transport runs with BTL_TCP_FLAGS unless extra_args name btl_tcp_flags themselves.
    """
    if not posixpath.isabs(str(mpirun)):
        raise ValueError(f"mpirun path {mpirun!r} is not absolute — use openmpi_mpirun_path")
    if int(np) < 1:
        raise ValueError(f"np {np!r} must be at least 1 — give some host mpi_slots > 0")
    argv = [str(mpirun), "--hostfile", str(hostfile), "-np", str(int(np))]
    argv += ["--bind-to", "none", "--map-by", "slot"]
    # The user's decide alone: as an --mca parameter or as OMPI_MCA_btl_tcp_flags passed with -x.
    if not any("btl_tcp_flags" in str(arg) for arg in extra_args or []):
        argv += ["--mca", "btl_tcp_flags", BTL_TCP_FLAGS]
    argv += openmpi_interface_args(version, interface, exclude)
    if as_root:
        argv.append("--allow-run-as-root")
    for key, value in (env or {}).items():
        argv += ["-x", f"{key}={value}"]
    argv += [str(arg) for arg in extra_args or []]
    return argv


def print_hostnames(argv):
    """A launcher argv (mpirun_argv, or mpirun -np 1) plus the program that prints each rank's
    hostname, for checks that count who answered (hostname_count_errors)."""
    return [str(arg) for arg in argv] + HOSTNAME_PROGRAM


class FilterModule:
    def filters(self):
        return {
            "openmpi_interface_args": openmpi_interface_args,
            "mpirun_argv": mpirun_argv,
            "print_hostnames": print_hostnames,
        }
