"""roles/cluster/filter_plugins/mpi.py: Open MPI command lines for 4.x and 5.x."""

import socket
import subprocess
import time

import pytest

from tests.unit.plugins import load

mpi = load("roles/cluster/filter_plugins/mpi.py")


def test_interface_args_open_mpi_4_use_mca_for_both_layers():
    assert mpi.openmpi_interface_args("4.1.4", "bridge0") == [
        "--mca", "oob_tcp_if_include", "bridge0",
        "--mca", "btl_tcp_if_include", "bridge0",
    ]  # fmt: skip


def test_interface_args_open_mpi_5_use_prtemca_for_oob():
    assert mpi.openmpi_interface_args("5.0.8", "bridge0") == [
        "--prtemca", "oob_tcp_if_include", "bridge0",
        "--mca", "btl_tcp_if_include", "bridge0",
    ]  # fmt: skip


@pytest.mark.parametrize("interface", [None, ""])
def test_no_interface_means_no_flags(interface):
    assert mpi.openmpi_interface_args("5.0.8", interface) == []


def test_bad_version_is_a_clear_error():
    with pytest.raises(ValueError, match="not like"):
        mpi.openmpi_interface_args("unknown", "bridge0")


def test_mpirun_argv_minimal():
    assert mpi.mpirun_argv("/usr/bin/mpirun", "/h/hostfile", 2, "4.1.4") == [
        "/usr/bin/mpirun", "--hostfile", "/h/hostfile", "-np", "2",
        "--bind-to", "none", "--map-by", "slot",
    ]  # fmt: skip


def test_mpirun_argv_everything_in_order():
    argv = mpi.mpirun_argv(
        "/opt/homebrew/bin/mpirun",
        "/Users/a/mlx-cluster/hostfile",
        "3",
        "5.0.8",
        interface="bridge0",
        as_root=True,
        env={"MLX_MPI_LIBNAME": "/x/libmpi.so.40", "A": "b c"},
        extra_args=["--output", ":raw"],
    )
    assert argv == [
        "/opt/homebrew/bin/mpirun", "--hostfile", "/Users/a/mlx-cluster/hostfile", "-np", "3",
        "--bind-to", "none", "--map-by", "slot",
        "--prtemca", "oob_tcp_if_include", "bridge0", "--mca", "btl_tcp_if_include", "bridge0",
        "--allow-run-as-root",
        "-x", "MLX_MPI_LIBNAME=/x/libmpi.so.40", "-x", "A=b c",
        "--output", ":raw",
    ]  # fmt: skip


def test_not_root_means_no_allow_run_as_root():
    argv = mpi.mpirun_argv("/usr/bin/mpirun", "hf", 1, "4.1.4", interface="en0")
    assert "--allow-run-as-root" not in argv
    assert argv[-6:] == ["--mca", "oob_tcp_if_include", "en0", "--mca", "btl_tcp_if_include", "en0"]


def test_relative_mpirun_is_refused():
    with pytest.raises(ValueError, match="not absolute"):
        mpi.mpirun_argv("mpirun", "hf", 1, "4.1.4")


def test_zero_ranks_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        mpi.mpirun_argv("/usr/bin/mpirun", "hf", 0, "4.1.4")


def test_print_hostnames_appends_a_rank_that_prints_the_short_hostname_and_lingers():
    argv = mpi.print_hostnames(["/usr/bin/mpirun", "-np", 1])
    assert argv[:3] == ["/usr/bin/mpirun", "-np", "1"]
    start = time.monotonic()
    rank = subprocess.run(argv[3:], capture_output=True, text=True, check=True)
    assert rank.stdout.strip() == socket.gethostname().split(".")[0]
    # A rank that exits at once can hang Open MPI 5's mpirun (openpmix/prrte#1839).
    assert time.monotonic() - start >= 0.9


def test_filter_names():
    assert set(mpi.FilterModule().filters()) == {
        "openmpi_interface_args",
        "mpirun_argv",
        "print_hostnames",
    }
