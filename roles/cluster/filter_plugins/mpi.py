"""Jinja filters that build Open MPI command lines.

Pure functions, unit-tested in tests/unit/test_mpi_filters.py.
"""

import posixpath

# Each rank prints its short hostname, then stays a second. Open MPI 5's daemons sometimes lose
# a rank that exits right after it starts, and mpirun then hangs after every rank has finished
# (openpmix/prrte#1839). Measured on 4 virtual hosts under load: `hostname` hung 10 of 40 runs,
# with the pause 0 of 40.
HOSTNAME_PROGRAM = ["sh", "-c", "hostname -s; sleep 1"]


def _major(version):
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        raise ValueError(f"Open MPI version {version!r} is not like '4.1.4' or '5.0.8'") from None


def openmpi_interface_args(version, interface):
    """Flags that keep Open MPI's control (oob) and data (btl) traffic on one interface.

    Open MPI 5 moved the out-of-band layer into PRRTE, whose parameters take --prtemca.
    """
    if not interface:
        return []
    oob_flag = "--prtemca" if _major(version) >= 5 else "--mca"
    return [oob_flag, "oob_tcp_if_include", interface, "--mca", "btl_tcp_if_include", interface]


def mpirun_argv(
    mpirun, hostfile, np, version, interface=None, as_root=False, env=None, extra_args=None
):
    """mpirun argv up to the program; the caller appends the program and its arguments.

    mpirun must be absolute: Open MPI then uses the same prefix to start its daemons on the
    other hosts, whose non-interactive ssh PATH often lacks Homebrew's bin directory.
    """
    if not posixpath.isabs(str(mpirun)):
        raise ValueError(f"mpirun path {mpirun!r} is not absolute — use openmpi_mpirun_path")
    if int(np) < 1:
        raise ValueError(f"np {np!r} must be at least 1 — give some host mpi_slots > 0")
    argv = [str(mpirun), "--hostfile", str(hostfile), "-np", str(int(np))]
    argv += ["--bind-to", "none", "--map-by", "slot"]
    argv += openmpi_interface_args(version, interface)
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
