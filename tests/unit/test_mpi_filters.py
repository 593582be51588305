"""roles/cluster/filter_plugins/mpi.py: Open MPI command lines for 4.x and 5.x."""

import shutil
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


def test_a_network_is_included_like_an_interface():
    # cables topology, two hosts: Open MPI runs over the cables, i.e. the pool's /30s.
    assert mpi.openmpi_interface_args("4.1.4", "198.19.0.0/24") == [
        "--mca", "oob_tcp_if_include", "198.19.0.0/24",
        "--mca", "btl_tcp_if_include", "198.19.0.0/24",
    ]  # fmt: skip


@pytest.mark.parametrize(("version", "oob_flag"), [("4.1.4", "--mca"), ("5.0.8", "--prtemca")])
def test_exclude_keeps_both_layers_off_a_network_and_the_btl_defaults(version, oob_flag):
    # cables topology, three hosts or more: over the management network, never the /30s.
    assert mpi.openmpi_interface_args(version, exclude="198.19.0.0/24") == [
        oob_flag, "oob_tcp_if_exclude", "198.19.0.0/24",
        "--mca", "btl_tcp_if_exclude", "127.0.0.1/8,sppp,198.19.0.0/24",
    ]  # fmt: skip


def btl_tcp_default(name):
    """The TCP BTL parameter's default as this machine's Open MPI gives it."""
    ompi_info = shutil.which("ompi_info")
    if not ompi_info:
        pytest.skip("no ompi_info (Open MPI) here")
    out = subprocess.run([ompi_info, "--param", "btl", "tcp", "--level", "9", "--parsable"],
                         capture_output=True, text=True, check=True).stdout
    [value] = [line.split(":value:", 1)[1] for line in out.splitlines()
               if line.startswith(f"mca:btl:tcp:param:{name}:value:")]
    return value


def test_the_btl_default_exclusions_are_open_mpis():
    assert btl_tcp_default("btl_tcp_if_exclude") == mpi.BTL_TCP_DEFAULT_EXCLUDE


def test_the_btl_flags_are_open_mpis_but_put():
    default = btl_tcp_default("btl_tcp_flags").split(",")
    assert "put" in default
    assert mpi.BTL_TCP_FLAGS.split(",") == [flag for flag in default if flag != "put"]


def test_btl_flags_the_user_gives_decide_alone():
    argv = mpi.mpirun_argv("/usr/bin/mpirun", "hf", 2, "4.1.4",
                           extra_args=["--mca", "btl_tcp_flags", "send,put"])
    assert argv.count("btl_tcp_flags") == 1 and argv[-3:] == ["--mca", "btl_tcp_flags", "send,put"]
    argv = mpi.mpirun_argv("/usr/bin/mpirun", "hf", 2, "4.1.4",
                           extra_args=["-x", "OMPI_MCA_btl_tcp_flags=send,put"])
    assert "btl_tcp_flags" not in argv and argv[-2:] == ["-x", "OMPI_MCA_btl_tcp_flags=send,put"]


def test_include_and_exclude_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        mpi.openmpi_interface_args("4.1.4", "bridge0", "10.213.0.0/24")


def test_mpirun_argv_passes_the_exclusion():
    argv = mpi.mpirun_argv("/usr/bin/mpirun", "hf", 2, "4.1.4", exclude="198.19.3.0/24")
    assert argv[-6:] == ["--mca", "oob_tcp_if_exclude", "198.19.3.0/24",
                         "--mca", "btl_tcp_if_exclude", "127.0.0.1/8,sppp,198.19.3.0/24"]


def test_bad_version_is_a_clear_error():
    with pytest.raises(ValueError, match="not like"):
        mpi.openmpi_interface_args("unknown", "bridge0")


def test_mpirun_argv_minimal():
    assert mpi.mpirun_argv("/usr/bin/mpirun", "/h/hostfile", 2, "4.1.4") == [
        "/usr/bin/mpirun", "--hostfile", "/h/hostfile", "-np", "2",
        "--bind-to", "none", "--map-by", "slot", "--mca", "btl_tcp_flags", mpi.BTL_TCP_FLAGS,
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
        "--bind-to", "none", "--map-by", "slot", "--mca", "btl_tcp_flags", mpi.BTL_TCP_FLAGS,
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
