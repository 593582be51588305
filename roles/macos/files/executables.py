"""Which executables take the cluster's connections on this host, as the firewall sees them.

Run by the environment's Python with Open MPI's bin directory as its argument; prints JSON
{"python": ..., "openmpi": [...], "identifiers": {...}}: the binary this interpreter really runs
as, the files behind Open MPI's launcher and daemons (symlinks resolved, each once), and the
bundle identifier of each one inside an app bundle (some macOS versions list rules by it).
A framework build's bin/python3.X (Homebrew's, python.org's) only starts
Resources/Python.app/Contents/MacOS/Python, and that process is the one that listens: hence the
running executable, not the venv's symlink.
"""

import ctypes
import json
import os
import plistlib
import re
import sys

# Open MPI 5: mpirun/mpiexec start prterun, prted runs on every host; 4.x: orterun/orted.
OPENMPI = ("mpirun", "mpiexec", "prterun", "prted", "orterun", "orted")


def running_executable():
    """Real path of the executable this process runs (macOS: dyld's answer; Linux: /proc)."""
    if sys.platform != "darwin":
        return os.path.realpath("/proc/self/exe")
    libc = ctypes.CDLL(None)
    size = ctypes.c_uint32(0)
    libc._NSGetExecutablePath(None, ctypes.byref(size))  # sets the size it needs
    buffer = ctypes.create_string_buffer(size.value)
    if libc._NSGetExecutablePath(buffer, ctypes.byref(size)) != 0:
        raise OSError("_NSGetExecutablePath failed")
    return os.path.realpath(os.fsdecode(buffer.value))


def openmpi_executables(bindir):
    found = [os.path.realpath(os.path.join(bindir, name)) for name in OPENMPI
             if bindir and os.path.isfile(os.path.join(bindir, name))]
    return list(dict.fromkeys(found))


def bundle_identifiers(paths):
    """{path: CFBundleIdentifier} of the paths inside an app bundle (.../X.app/Contents/MacOS/Y)."""
    found = {}
    for path in paths:
        bundle = re.fullmatch(r"(/.+?\.app)/Contents/MacOS/[^/]+", path)
        info = bundle and os.path.join(bundle[1], "Contents", "Info.plist")
        if info and os.path.isfile(info):
            with open(info, "rb") as file:
                identifier = plistlib.load(file).get("CFBundleIdentifier")
            if identifier:
                found[path] = identifier
    return found


if __name__ == "__main__":
    python = running_executable()
    openmpi = openmpi_executables(sys.argv[1] if len(sys.argv) > 1 else "")
    print(json.dumps({"python": python, "openmpi": openmpi,
                      "identifiers": bundle_identifiers([python, *openmpi])}))
