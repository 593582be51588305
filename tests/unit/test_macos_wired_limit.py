"""The macos role's GPU wired-memory limit: `sysctl` output, the decision, the LaunchDaemon.

Samples:
- SET_14000: `sudo sysctl iogpu.wired_limit_mb=14000` in public notes on running mlx-lm
  ("iogpu.wired_limit_mb: 0 -> 14000").
- BOOT_LOG: the log of a LaunchDaemon that runs that sysctl at boot, after a reboot (public notes
  of a local-LLM setup): "iogpu.wired_limit_mb: 0 -> 114688" - the limit is gone after a reboot
  until something sets it again.
- MEMSIZE_36GB: `sysctl -n hw.memsize` of an Apple M3 Max with 36 GB, macOS 14.4 (benchmark
  environment notes in a public repository).
A sysctl that fails (an unknown name on macOS 13 and older) is a result with rc 1 and no output.
"""

import plistlib
from pathlib import Path

import jinja2

from tests.unit.plugins import load

ROOT = Path(__file__).resolve().parents[2]
wired = load("roles/macos/filter_plugins/wired_limit.py")

SET_14000 = "iogpu.wired_limit_mb: 0 -> 14000\n"
BOOT_LOG = "iogpu.wired_limit_mb: 0 -> 114688\n"
MEMSIZE_36GB = "38654705664\n"
MEMORY_MB = 36864


def ran(stdout, rc=0):
    return {"rc": rc, "stdout": stdout.rstrip("\n"), "stderr": ""}


FAILED = {"rc": 1, "stdout": "", "stderr": ""}


def daemon_plist(limit):
    """templates/wired-limit.plist.j2 rendered as Ansible's template module does."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "roles/macos/templates"),
                             trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("wired-limit.plist.j2").render(
        mlx_wired_limit_mb=limit, macos_wired_limit_label="org.mlx-cluster.wired-limit")


def probe(now, daemon=None):
    return {"wired": ran(str(now)) if now is not None else FAILED, "memsize": ran(MEMSIZE_36GB),
            "daemon": ran(daemon) if daemon is not None else FAILED}


def test_sysctl_values_plain_and_as_set():
    assert wired.sysctl_int(ran("0")) == 0
    assert wired.sysctl_int(ran(SET_14000)) == 14000
    assert wired.sysctl_int(ran(BOOT_LOG)) == 114688
    assert wired.sysctl_int(ran(MEMSIZE_36GB)) == 38654705664
    assert wired.sysctl_int(FAILED) is None
    assert wired.sysctl_int(ran("")) is None


def test_the_launch_daemon_runs_sysctl_at_boot_until_it_succeeds():
    plist = plistlib.loads(daemon_plist(24576).encode())
    assert plist["Label"] == "org.mlx-cluster.wired-limit"
    assert plist["ProgramArguments"] == ["/usr/sbin/sysctl", "iogpu.wired_limit_mb=24576"]
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}


def test_nothing_requested_changes_nothing():
    plan = wired.wired_limit_plan(probe(0), 0, daemon_plist(0))
    assert plan == {"requested": 0, "now": 0, "memory_mb": MEMORY_MB, "change": False,
                    "persisted": False, "daemon_present": False, "errors": []}


def test_a_new_limit_is_set_and_needs_its_daemon():
    plan = wired.wired_limit_plan(probe(0), 24576, daemon_plist(24576))
    assert plan["change"] is True and plan["persisted"] is False and plan["errors"] == []


def test_a_set_and_persisted_limit_changes_nothing():
    # concurrent_commands cuts the trailing newline the file has.
    plan = wired.wired_limit_plan(probe(24576, daemon_plist(24576)), "24576", daemon_plist(24576))
    assert plan["change"] is False and plan["persisted"] is True and plan["daemon_present"]


def test_after_a_reboot_without_the_daemon_the_limit_is_set_again():
    plan = wired.wired_limit_plan(probe(0, daemon_plist(16384)), 24576, daemon_plist(24576))
    assert plan["change"] is True and plan["persisted"] is False and plan["daemon_present"]


def test_a_limit_not_below_memory_is_refused_with_a_suggestion():
    plan = wired.wired_limit_plan(probe(0), MEMORY_MB, daemon_plist(MEMORY_MB))
    [error] = plan["errors"]
    assert error.startswith(f"mlx_wired_limit_mb {MEMORY_MB} is not below this Mac's memory "
                            f"({MEMORY_MB} MB)")
    assert error.endswith("e.g. mlx_wired_limit_mb: 31744")  # 36 GB less 5 GB > 80 %
    assert plan["change"] is False


def test_a_mac_without_the_setting_is_refused_only_when_a_limit_is_requested():
    assert wired.wired_limit_plan(probe(None), 0, daemon_plist(0))["errors"] == []
    [error] = wired.wired_limit_plan(probe(None), 8192, daemon_plist(8192))["errors"]
    assert "no iogpu.wired_limit_mb" in error and "macOS 14" in error
