"""roles/macos/files/executables.py, run as setup runs it: by a real Python, with a bin directory
laid out as Homebrew's (symlinks into a Cellar, mpiexec a link to mpirun)."""

import json
import os
import plistlib
import subprocess
import sys
from pathlib import Path

from tests.unit.plugins import load

ROOT = Path(__file__).resolve().parents[2]
PROBE = (ROOT / "roles/macos/files/executables.py").read_text()
probe = load("roles/macos/files/executables.py")


def run_probe(python, bindir):
    done = subprocess.run([python, "-I", "-c", PROBE, str(bindir)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def test_symlinks_resolve_to_the_real_files_each_once(tmp_path):
    cellar = tmp_path / "Cellar/open-mpi/5.0.6/bin"
    cellar.mkdir(parents=True)
    for name in ("mpirun", "prterun", "prted"):
        (cellar / name).write_text("#!/bin/sh\n")
    (cellar / "mpiexec").symlink_to("mpirun")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("mpirun", "mpiexec", "prterun", "prted"):
        (bindir / name).symlink_to(cellar / name)
    (bindir / "orted").symlink_to(tmp_path / "gone")  # a dangling link is no executable
    found = run_probe(sys.executable, bindir)
    assert found["openmpi"] == [str(cellar / "mpirun"), str(cellar / "prterun"),
                                str(cellar / "prted")]
    assert found["identifiers"] == {}


def test_python_is_the_file_the_interpreter_runs_not_the_link(tmp_path):
    link = tmp_path / "venv-python"
    link.symlink_to(sys.executable)
    found = run_probe(str(link), "")
    assert found["python"] == os.path.realpath(sys.executable) != str(link)
    assert found["openmpi"] == []


def test_an_app_bundle_reports_its_identifier(tmp_path):
    # Python.app's layout inside a framework build, with the Info.plist key macOS reads.
    macos = tmp_path / "Python.framework/Versions/3.12/Resources/Python.app/Contents/MacOS"
    macos.mkdir(parents=True)
    (macos.parent / "Info.plist").write_bytes(plistlib.dumps(
        {"CFBundleIdentifier": "org.python.python", "CFBundleExecutable": "Python"}))
    binary = macos / "Python"
    binary.write_text("")
    assert probe.bundle_identifiers([str(binary), sys.executable]) == {
        str(binary): "org.python.python"}
