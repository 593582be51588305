"""roles/doctor/filter_plugins/doctor.py: probe classification and the check.yml report table."""

import json

import pytest

from tests.unit import test_macos_pmset as pm
from tests.unit import test_macos_socketfilterfw as fw
from tests.unit import test_macos_wired_limit as wl
from tests.unit.plugins import load

doctor = load("roles/doctor/filter_plugins/doctor.py")
# check.yml reads every probe result through the shared filter before classifying it.
read = load("roles/cluster/filter_plugins/command_result.py").command_result


def command_row(result, *args, **kwargs):
    return doctor.doctor_command_row(read(result), *args, **kwargs)


def ssh_reason(result, *args, **kwargs):
    return doctor.doctor_ssh_reason(read(result), *args, **kwargs)


def ssh_row(result, *args, **kwargs):
    return doctor.doctor_ssh_row(read(result), *args, **kwargs)


CHANGED_KEY = """@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Host key for 198.19.1.3 has changed and you have requested strict checking.
Host key verification failed."""


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        ({"rc": 0, "stdout": "b\n", "stderr": ""}, "ok"),
        ({"rc": 255, "stdout": "", "stderr": CHANGED_KEY}, "host_key_changed"),
        ({"rc": 255, "stderr": "No ED25519 host key is known for x and you have requested "
          "strict checking.\nHost key verification failed."}, "host_key_unknown"),
        ({"rc": 255, "stderr": "u@198.19.1.3: Permission denied (publickey)."}, "auth"),
        ({"rc": 255, "stderr": "ssh: connect to host 198.19.1.3 port 22: Connection refused"},
         "unreachable"),
        ({"rc": 255, "stderr": "ssh: connect to host 198.19.1.3 port 22: Connection timed out"},
         "unreachable"),
        ({"failed": True, "msg": "async task did not complete within the requested time - 30s"},
         "timeout"),
        ({"failed": True, "msg": "Timeout exceeded", "child_pid": 7}, "timeout"),
        ({"rc": 0, "stdout": "c\n"}, "wrong_host"),
    ],
)
def test_ssh_reason_tells_a_changed_host_key_from_an_unreachable_host(result, reason):
    assert ssh_reason(result, expected_hostname="b") == reason


def test_ssh_row_names_the_pair_and_the_changed_key():
    row = ssh_row({"rc": 255, "stderr": CHANGED_KEY}, "a", "b", "198.19.1.3", "b")
    assert row["check"] == "ssh" and row["target"] == "a -> b" and row["status"] == "failed"
    assert row["reason"] == "host_key_changed"
    assert "CHANGED" in row["detail"] and "198.19.1.3" in row["detail"]
    table = doctor.doctor_table(doctor.doctor_report_rows([row]))
    assert "mlx_cluster_known_hosts on a" in table and "re-run setup.yml" in table


def test_command_row_timeout_names_the_bound():
    row = command_row({"failed": True, "msg": "Timeout exceeded"}, "mpirun_all",
                                    "cluster", 120)
    assert (row["status"], row["reason"]) == ("failed", "timeout")
    assert "120s" in row["detail"]


def test_command_row_skips_open_mpi_banner_lines():
    stderr = ("-----\nmpirun was unable to launch the specified application.\nThis usually is "
              "caused by:\n-----\nx\n")
    row = command_row({"rc": 1, "stderr": stderr}, "mlx_mpi", "cluster")
    assert row["detail"] == "rc=1: mpirun was unable to launch the specified application."


def test_command_row_shows_the_start_of_open_mpis_framed_message():
    stderr = ("----------\nOpen RTE was unable to open the hostfile:\n    /h/hostfile\n"
              "Check to make sure the path and filename are correct.\n----------\n"
              "[a:1] ORTE_ERROR_LOG: Not found\nThis is something that should be reported to the "
              "developers.\n")
    row = command_row({"rc": 1, "stderr": stderr}, "mpirun_all", "cluster")
    assert row["detail"] == "rc=1: Open RTE was unable to open the hostfile: /h/hostfile"


def test_command_row_checks_expected_output():
    row = command_row
    ok = row({"rc": 0, "stdout": "host-a\n"}, "mpirun_local", "a", 5, "host-a")
    bad = row({"rc": 0, "stdout": "other\n"}, "mpirun_local", "a", 5, "host-a")
    assert ok["status"] == "ok" and bad["status"] == "failed"


def test_command_row_of_a_missing_program_says_which():
    result = {"rc": 2, "msg": "Error executing command.", "cmd": ["/x/venv/bin/python", "-c", ""]}
    assert "cannot run /x/venv/bin/python (No such file" in command_row(
        result, "mlx_import", "a")["detail"]
    result = {"rc": 13, "msg": "Error executing command.", "cmd": "/usr/bin/mpirun --version"}
    assert command_row(result, "openmpi", "a")["detail"] == (
        "rc=13: cannot run /usr/bin/mpirun (Permission denied)")


def test_unknown_check_is_an_error():
    with pytest.raises(ValueError, match="unknown check"):
        doctor.doctor_row("nope", "a", True)


LINUX_BRIDGE = {"device": "bridge0", "active": True,
                "ipv4": {"address": "198.19.1.2", "prefix": "24"}}
DARWIN_BRIDGE = {"device": "bridge0", "status": "active", "flags": ["UP", "BROADCAST"],
                 "ipv4": [{"address": "198.19.0.2", "netmask": "255.255.255.0"}]}


@pytest.mark.parametrize(
    ("facts", "ip", "status", "reason"),
    [
        ({"interfaces": ["bridge0"], "bridge0": LINUX_BRIDGE}, "198.19.1.2", "ok", None),
        ({"interfaces": ["bridge0"], "bridge0": DARWIN_BRIDGE}, "198.19.0.2", "ok", None),
        ({"interfaces": ["en0"], "en0": {}}, "198.19.1.2", "failed", "missing"),
        ({"interfaces": ["bridge0"], "bridge0": {**LINUX_BRIDGE, "active": False}}, "198.19.1.2",
         "failed", "down"),
        ({"interfaces": ["bridge0"], "bridge0": {**DARWIN_BRIDGE, "status": "inactive"}},
         "198.19.0.2", "failed", "down"),
        ({"interfaces": ["bridge0"], "bridge0": {"device": "bridge0", "active": True}},
         "198.19.1.2", "failed", "address"),
        ({"interfaces": ["bridge0"], "bridge0": {**LINUX_BRIDGE, "ipv4_secondaries": [
            {"address": "198.19.1.9"}]}}, "198.19.1.9", "ok", None),
    ],
)
def test_iface_row_from_linux_and_macos_facts(facts, ip, status, reason):
    row = doctor.doctor_iface_row(facts, "a", "bridge0", ip)
    assert (row["status"], row["reason"]) == (status, reason)


def test_digest_ignores_key_order():
    tree = {"__init__.py": "1", "loop.py": "2"}
    assert doctor.doctor_digest(tree) == doctor.doctor_digest(dict(reversed(tree.items())))


def test_env_diff():
    assert doctor.doctor_env_diff(["mlx==1", "numpy==2"], ["mlx==1", "numpy==3"]) == [
        "+numpy==2", "-numpy==3"]


MATRIX = {
    "hosts": ["h1", "h2", "h3"],
    "size": 1048576,
    "pairs": [
        {"a": 0, "b": 1, "latency_us": 50, "gbps": 12.0},
        {"a": 0, "b": 2, "latency_us": 300, "gbps": 0.05},
        {"a": 1, "b": 2, "latency_us": 310, "gbps": 0.05},
    ],
}


def test_link_rows_flag_slow_pairs_and_the_host_they_share():
    rows = doctor.doctor_link_rows(MATRIX, {"h1": "a", "h2": "b", "h3": "c"}, 0.25)
    by_target = {r["target"]: r for r in rows}
    assert by_target["a <-> b"]["status"] == "ok"
    for pair in ("a <-> c", "b <-> c"):
        assert by_target[pair]["status"] == "failed"
        assert by_target[pair]["reason"] == "slow"
        assert "every slow pair includes c" in by_target[pair]["detail"]


def test_link_rows_all_similar_are_ok():
    matrix = {**MATRIX, "pairs": [{**p, "gbps": 10 + i} for i, p in enumerate(MATRIX["pairs"])]}
    assert {r["status"] for r in doctor.doctor_link_rows(matrix, {})} == {"ok"}


def test_a_pair_measured_again_counts_its_better_figures():
    """The second run's ranks may sit on the hosts in another order: pairs go by host."""
    again = {"hosts": ["h2", "h1", "h3"], "size": 1048576, "pairs": [
        {"a": 0, "b": 1, "latency_us": 40, "gbps": 11.0},  # h2-h1
        {"a": 1, "b": 2, "latency_us": 60, "gbps": 10.5},  # h1-h3: busy the first time
        {"a": 0, "b": 2, "latency_us": 320, "gbps": 0.04}]}  # h2-h3: slow again
    merged = doctor.doctor_faster_matrix(MATRIX, again)
    assert merged["hosts"] == MATRIX["hosts"]
    assert [(p["a"], p["b"], p["latency_us"], p["gbps"]) for p in merged["pairs"]] == [
        (0, 1, 40, 12.0), (0, 2, 60, 10.5), (1, 2, 310, 0.05)]
    rows = {r["target"]: r for r in doctor.doctor_link_rows(merged, {}, 0.25)}
    assert [t for t, r in rows.items() if r["status"] != "ok"] == ["h2 <-> h3"]
    assert doctor.doctor_faster_matrix(MATRIX, {}) == MATRIX


def test_link_table_is_symmetric_markdown():
    table = doctor.doctor_link_table(MATRIX, {"h1": "a", "h2": "b", "h3": "c"})
    assert "| latency (us) | a | b | c |" in table
    assert "| c | 300 | 310 | - |" in table
    assert "| a | - | 12.00 | 0.05 |" in table


def test_table_lists_rows_in_check_order_with_fixes_and_a_summary():
    rows = [
        doctor.doctor_row("mlx_import", "b", False, "rc=1: No module named mlx", "error"),
        doctor.doctor_row("inventory", "cluster", True),
        doctor.doctor_row("tb_loop", "cluster", True, "3 hosts", "loop", "warn"),
        doctor.doctor_row("tb_iface", "c", False, "bridge0 is down", "down"),
    ]
    lines = doctor.doctor_table(doctor.doctor_report_rows(rows)).splitlines()
    assert lines[0].split() == ["CHECK", "TARGET", "RESULT", "DETAIL"]
    assert lines[1].startswith("inventory valid") and lines[1].split()[-1] == "ok"
    assert "Thunderbolt interface" in lines[2] and "FAILED" in lines[2] and "c " in lines[2]
    assert lines[3].strip().startswith("fix: Bring the interface up on c")
    assert "WARN" in lines[4] and "chain or" in lines[5]
    assert "mlx imports" in lines[6] and "fix:" in lines[7]
    assert lines[-1] == "1 ok, 2 failed, 1 warnings, 0 skipped"
    assert [r["check"] for r in doctor.doctor_failed(rows)] == ["mlx_import", "tb_iface"]


def test_markdown_table_escapes_pipes():
    rows = [doctor.doctor_row("ssh", "a -> b", False, "x | y", "auth")]
    md = doctor.doctor_table(doctor.doctor_report_rows(rows), markdown=True)
    assert "x \\| y" in md and md.splitlines()[0].startswith("| check |")


def test_report_rows_are_what_report_json_holds():
    rows = [
        doctor.doctor_row("ssh", "a -> b", False, "198.19.1.3: key not accepted", "auth"),
        doctor.doctor_row("inventory", "cluster", True, "3 hosts"),
        doctor.doctor_row("tb_loop", "cluster", True, "3 hosts", "loop", "warn"),
    ]
    report = doctor.doctor_report_rows(rows)
    assert json.loads(json.dumps(report)) == report  # plain JSON, nothing Jinja-specific
    assert [(r["check"], r["host"], r["ok"]) for r in report] == [
        ("inventory", "cluster", True), ("ssh", "a -> b", False), ("tb_loop", "cluster", True)]
    assert report[0]["fix"] is None and report[0]["title"] == "inventory valid"
    assert report[1]["status"] == "failed" and report[1]["detail"] == rows[0]["detail"]
    assert report[1]["fix"].startswith("The mesh key is not accepted: re-run setup.yml to "
                                       "install a's")
    assert report[2]["status"] == "warn" and "never a ring" in report[2]["fix"]
    # The markdown table is these rows, line for line.
    md = doctor.doctor_table(report, markdown=True).splitlines()[2:5]
    assert [line.split(" | ")[:3] for line in md] == [
        ["| " + r["title"], r["host"], r["status"]] for r in report]


def test_every_check_has_a_fix():
    for check in doctor.CHECKS:
        if check in ("inventory", "reach"):
            continue
        row = doctor.doctor_row(check, "a -> b", False, "d", "some-reason")
        assert doctor._fix(row)


def test_a_concurrent_command_killed_at_its_bound_is_a_timeout():
    result = {"rc": -1, "stdout": "", "stderr": "", "msg": "no answer within 30 s",
              "timed_out": True}
    assert ssh_reason(result) == "timeout"
    assert command_row(result, "ping", "a -> b", 30)["reason"] == "timeout"


# --- the macos group: rows from the macos role's inspection (its plan filters fed with recorded
# outputs, see tests/unit/test_macos_*.py) --------------------------------------------------


def mac_inspection(*, firewall="", listing="", custom="", pmset=None, wired_now=0, limit=0,
                   daemon=None):
    plans = {name: load(f"roles/macos/filter_plugins/{name}.py")
             for name in ("pmset", "socketfilterfw", "wired_limit")}
    return {
        "pmset": plans["pmset"].pmset_plan(pm.ran(custom or pm.CUSTOM_AC_AWAKE), pmset or {}),
        "wired": plans["wired_limit"].wired_limit_plan(wl.probe(wired_now, daemon), limit,
                                                       wl.daemon_plist(limit)),
        "firewall": plans["socketfilterfw"].socketfilterfw_plan(
            pm.ran(firewall or fw.OFF), pm.ran(listing or fw.LIST_RECENT), fw.EXECUTABLES),
    }


def mac_rows(inspection, system="Darwin"):
    return {r["check"]: r for r in doctor.doctor_macos_rows(inspection, "mac1", system)}


def test_linux_hosts_get_the_mac_rows_as_skipped():
    rows = doctor.doctor_macos_rows(None, "linux1", "Linux")
    assert [(r["check"], r["status"], r["detail"]) for r in rows] == [
        ("mac_firewall", "skipped", "not macOS"), ("mac_wired", "skipped", "not macOS"),
        ("mac_sleep", "skipped", "not macOS")]
    report = doctor.doctor_report_rows(rows)
    assert all(r["ok"] and r["fix"] is None for r in report)
    assert doctor.doctor_table(report).splitlines()[-1] == "0 ok, 0 failed, 0 warnings, 3 skipped"


def test_a_mac_left_as_it_was_is_all_ok():
    rows = mac_rows(mac_inspection())
    assert {c: r["status"] for c, r in rows.items()} == {
        "mac_firewall": "ok", "mac_wired": "ok", "mac_sleep": "ok"}
    assert rows["mac_firewall"]["detail"] == "Application Firewall off"
    assert rows["mac_wired"]["detail"] == ("not requested; iogpu.wired_limit_mb 0 of 36864 MB "
                                           "(macOS' own)")
    assert rows["mac_sleep"]["detail"] == "nothing requested; sleep: Battery Power 1, AC Power 0"


def test_a_firewall_without_rules_for_open_mpi_fails_naming_them_and_the_fix():
    listing = fw.listing_with((fw.PYTHON_BUNDLE, True), (fw.OMPI + "prted", False))
    row = mac_rows(mac_inspection(firewall=fw.ON, listing=listing))["mac_firewall"]
    assert (row["status"], row["reason"]) == ("failed", "blocked")
    assert row["detail"] == "on; no rule allows " + ", ".join(
        fw.OMPI + name for name in ("mpirun", "prterun", "prted"))
    [report] = doctor.doctor_report_rows([row])
    assert "silent mpirun hang" in report["fix"] and "--unblockapp" in report["fix"]


def test_a_firewall_allowing_everything_is_ok_and_block_all_fails():
    every = fw.listing_with(*[(t, True) for t in (fw.PYTHON_BUNDLE, *fw.EXECUTABLES["openmpi"])])
    row = mac_rows(mac_inspection(firewall=fw.ON, listing=every))["mac_firewall"]
    assert row["status"] == "ok"
    assert row["detail"] == "on; allows Python.app, mpirun, prterun, prted"
    blocking = mac_rows(mac_inspection(firewall=fw.BLOCKING_MACOS15, listing=every))
    assert blocking["mac_firewall"]["reason"] == "block_all"


def test_an_unreadable_app_list_warns():
    row = mac_rows(mac_inspection(firewall=fw.ON, listing=fw.NOT_IN_FIREWALL))["mac_firewall"]
    assert row["status"] == "warn" and "cannot be read" in row["detail"]


def test_wired_limit_rows_set_differs_too_high_and_not_persisted():
    ok = mac_rows(mac_inspection(wired_now=24576, limit=24576, daemon=wl.daemon_plist(24576)))
    assert ok["mac_wired"]["status"] == "ok"
    assert ok["mac_wired"]["detail"] == "24576 MB of 36864 MB, set again at boot"
    differs = mac_rows(mac_inspection(wired_now=0, limit=24576))["mac_wired"]
    assert (differs["status"], differs["detail"]) == (
        "failed", "iogpu.wired_limit_mb is 0, requested 24576 of 36864 MB")
    high = mac_rows(mac_inspection(wired_now=0, limit=40000))["mac_wired"]
    assert high["reason"] == "too_high" and "below the memory" in high["detail"]
    lost = mac_rows(mac_inspection(wired_now=24576, limit=24576))["mac_wired"]
    assert (lost["status"], lost["reason"]) == ("warn", "not_persisted")
    assert "LaunchDaemon" in doctor.doctor_report_rows([lost])[0]["fix"]


def test_sleep_rows_as_requested_and_differing():
    done = mac_rows(mac_inspection(custom=pm.CUSTOM_DESKTOP, pmset={"powernap": 0, "womp": 0}))
    assert done["mac_sleep"]["detail"] == "powernap 0, womp 0 on every power source"
    differs = mac_rows(mac_inspection(custom=pm.CUSTOM_AC_AWAKE, pmset={"sleep": 0}))
    assert differs["mac_sleep"]["status"] == "failed"
    assert differs["mac_sleep"]["detail"] == ("sleep: Battery Power 1, AC Power 0 "
                                              "(requested 0)")
    unknown = mac_rows(mac_inspection(custom=pm.CUSTOM_DESKTOP, pmset={"lessbright": 0}))
    assert unknown["mac_sleep"]["reason"] == "unknown"
