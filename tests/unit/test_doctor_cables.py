"""roles/doctor/filter_plugins/doctor.py, the rows of thunderbolt_topology cables: what the cables
form and carry, the Thunderbolt Bridge off (macOS `ifconfig bridge0` against recorded real
outputs, Linux facts), cable ports, the ping-pong per cable, RDMA readiness and macOS builds
(tests/unit/data/rdma_outputs.yml says where each recorded output comes from)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.plugins import load

doctor = load("roles/doctor/filter_plugins/doctor.py")
read = load("roles/cluster/filter_plugins/command_result.py").command_result
cables = load("roles/cluster/filter_plugins/cables.py")
topology = load("roles/cluster/filter_plugins/topology.py")
rdma = load("roles/cluster/filter_plugins/rdma.py")
OUTPUTS = yaml.safe_load((Path(__file__).parent / "data/rdma_outputs.yml").read_text())

NAMES = ["m1", "m2", "m3"]
RING = [["m1", "en2", "m2", "en2"], ["m2", "en3", "m3", "en2"], ["m3", "en3", "m1", "en3"]]
CHAIN = RING[:2]
POOL = "198.18.0.0/24"


def hosts(slots=(1, 1, 1)):
    return [{"name": n, "slots": s} for n, s in zip(NAMES, slots, strict=True)]


def cabled(cable_list, slots=(1, 1, 1)):
    return topology.cable_topology(hosts(slots), cables.cable_plan(cable_list, NAMES, POOL))


def output(name):
    return OUTPUTS[name]["output"]


# --- what the cables form and carry ------------------------------------------------------------


def test_three_hosts_in_a_ring_are_a_full_mesh_that_carries_every_backend():
    topo = cabled(RING)
    shape, backend = doctor.doctor_topology_rows(topo, "ring", [])
    assert (shape["check"], shape["target"], shape["status"]) == ("topology", "cluster", "ok")
    assert shape["detail"].startswith("mesh: 3 hosts, 3 cable(s): m1 en2 - m2 en2")
    assert shape["detail"].endswith("ring order (ranks of ring, jaccl-ring): m1, m2, m3")
    assert (backend["check"], backend["target"], backend["status"]) == ("backend", "ring", "ok")
    assert "allow ring, jaccl, jaccl-ring" in backend["detail"]
    assert "mpi runs over the management network (198.18.0.0/24 excluded)" in backend["detail"]


def test_a_chain_refuses_ring_with_the_cable_to_add():
    topo = cabled(CHAIN)
    errors = topology.cable_backend_errors(topo, "ring")
    shape, backend = doctor.doctor_topology_rows(topo, "ring", errors)
    assert shape["status"] == "ok" and shape["detail"].startswith("chain: 3 hosts")
    assert (backend["status"], backend["reason"]) == ("failed", "refused")
    assert "add a cable m1 - m3" in backend["detail"]
    report = doctor.doctor_report_rows([backend])
    assert report[0]["title"] == "backend over the cables" and "train.yml -e backend" in \
        report[0]["fix"]


def test_mpi_is_always_carried_and_says_the_cables_allow_none():
    shape, backend = doctor.doctor_topology_rows(cabled(CHAIN), "mpi", [])
    assert backend["status"] == "ok"
    assert backend["detail"].startswith("they allow none of ring, jaccl, jaccl-ring")


def test_a_host_without_cable_is_a_warning():
    shape, _ = doctor.doctor_topology_rows(cabled(RING[:1]), "mpi", [])
    assert (shape["status"], shape["reason"]) == ("warn", "disconnected")
    assert "not cabled to the others: m3" in shape["detail"]


# --- the Thunderbolt Bridge off ----------------------------------------------------------------


def ifconfig(name):
    return read({"rc": 0, "stdout": output(name), "stderr": ""})


def test_macos_bridge_up_with_its_ports_is_parsed():
    assert doctor.doctor_bridge_state(ifconfig("ifconfig_bridge0_active")) == {
        "exists": True, "up": True, "members": ["en2", "en3", "en4"], "addresses": []}


def test_macos_bridge_down_is_parsed():
    assert doctor.doctor_bridge_state(ifconfig("ifconfig_bridge0_inactive")) == {
        "exists": True, "up": False, "members": ["en1", "en2", "en3", "en4"], "addresses": []}


def test_macos_without_bridge0():
    result = read({"rc": 1, "stdout": "",
                   "stderr": "ifconfig: interface bridge0 does not exist"})
    assert doctor.doctor_bridge_state(result)["exists"] is False


@pytest.mark.parametrize(("name", "ports", "status", "reason"), [
    ("ifconfig_bridge0_active", ["en2", "en3"], "failed", "member"),
    ("ifconfig_bridge0_active", ["en5"], "ok", None),   # its cables are on other ports
    ("ifconfig_bridge0_inactive", ["en2", "en3"], "ok", None),   # down: it forwards nothing
])
def test_bridge_row_fails_when_an_up_bridge_holds_a_cable_port(name, ports, status, reason):
    row = doctor.doctor_bridge_row(doctor.doctor_bridge_state(ifconfig(name)), "m1", ports)
    assert (row["check"], row["target"], row["status"], row["reason"]) == (
        "bridge_off", "m1", status, reason)


def test_bridge_row_names_the_bridged_ports_and_the_fix():
    row = doctor.doctor_bridge_row(doctor.doctor_bridge_state(ifconfig("ifconfig_bridge0_active")),
                                   "m1", ["en3", "en2"])
    assert row["detail"] == "bridge0 is up with the cable port(s) en2, en3"
    assert "Make Inactive" in doctor.doctor_report_rows([row])[0]["fix"]


# What Ansible gathers on Linux (ansible.builtin.setup, network subset): a bridge lists its ports.
LINUX_FACTS = {"interfaces": ["lo", "en0", "en2", "bridge0"],
               "bridge0": {"device": "bridge0", "type": "bridge", "active": True,
                           "interfaces": ["en2"], "ipv4": {"address": "198.19.1.11",
                                                           "netmask": "255.255.255.0"}},
               "en2": {"device": "en2", "active": True,
                       "ipv4": {"address": "198.18.0.1", "netmask": "255.255.255.252"}}}


def test_linux_facts_give_the_same_state():
    assert doctor.doctor_bridge_facts(LINUX_FACTS) == {
        "exists": True, "up": True, "members": ["en2"], "addresses": ["198.19.1.11"]}
    assert doctor.doctor_bridge_facts({"interfaces": ["en2"]})["exists"] is False


def test_an_address_left_on_bridge0_fails():
    facts = {**LINUX_FACTS, "bridge0": {**LINUX_FACTS["bridge0"], "interfaces": []}}
    row = doctor.doctor_bridge_row(doctor.doctor_bridge_facts(facts), "m1", ["en2"])
    assert (row["status"], row["reason"]) == ("failed", "address")
    assert "reset.yml --tags thunderbolt" in doctor.doctor_report_rows([row])[0]["fix"]


def test_no_bridge_is_off():
    row = doctor.doctor_bridge_row(doctor.doctor_bridge_facts({}), "m1", ["en2"])
    assert (row["status"], row["detail"]) == ("ok", "no bridge0")


# --- cable ports and the ping-pong per cable ---------------------------------------------------


def test_cable_port_rows_name_the_port_and_want_its_address():
    plan = cables.cable_plan(RING, NAMES, POOL)
    rows = doctor.doctor_cable_port_rows(LINUX_FACTS, "m1", plan["hosts"]["m1"])
    assert [(r["check"], r["target"], r["status"], r["reason"]) for r in rows] == [
        ("cable_port", "m1 en2", "ok", None), ("cable_port", "m1 en3", "failed", "missing")]
    assert rows[0]["detail"] == "en2 up, 198.18.0.1"


def pingpong(cable, gbps, rc=0):
    stdout = json.dumps({"hosts": cable["hosts"], "size": 1048576,
                         "pairs": [{"a": 0, "b": 1, "latency_us": 40.0, "gbps": gbps}]})
    return read({"item": cable, "rc": rc, "stdout": stdout if rc == 0 else "",
                 "stderr": "" if rc == 0 else "mpirun noticed that process rank 1 exited"})


def test_cable_link_rows_name_a_slow_cable_by_both_ends():
    plan = cables.cable_plan(RING, NAMES, POOL)
    a, c, b = plan["cables"]  # m1-m2, m1-m3, m2-m3: m3's cables come last, m1's first of them
    rows = doctor.doctor_cable_link_rows([pingpong(a, 9.5), pingpong(b, 9.0), pingpong(c, 0.8)],
                                         0.25, 120)
    by_target = {r["target"]: r for r in rows}
    assert set(by_target) == {"m1 en2 - m2 en2", "m2 en3 - m3 en2", "m1 en3 - m3 en3"}
    assert by_target["m1 en2 - m2 en2"]["status"] == "ok"
    slow = by_target["m1 en3 - m3 en3"]
    assert (slow["check"], slow["status"], slow["reason"]) == ("cable_link", "failed", "slow")
    assert slow["detail"] == "40 us, 0.80 Gbit/s (< 0.25 x best 9.50 Gbit/s)"


def test_a_cable_measured_slow_is_measured_again_and_its_faster_run_counts():
    plan = cables.cable_plan(RING, NAMES, POOL)
    a, c, b = plan["cables"]
    first = [pingpong(a, 9.5), pingpong(b, 9.0), pingpong(c, 0.8)]
    assert doctor.doctor_slow_cables(first, 0.25) == [c]
    # Its host was busy the first time: fast again, not slow.
    rows = doctor.doctor_cable_link_rows(first + [pingpong(c, 8.7)], 0.25, 120)
    assert [(r["target"], r["status"], r["detail"]) for r in rows if r["target"] == c["label"]] \
        == [(c["label"], "ok", "40 us, 8.70 Gbit/s")]
    # Slow both times: slow, at its better figures; a run that failed the second time: failed.
    rows = doctor.doctor_cable_link_rows(first + [pingpong(c, 1.1)], 0.25, 120)
    [slow] = [r for r in rows if r["status"] == "failed"]
    assert (slow["target"], slow["reason"]) == (c["label"], "slow")
    assert slow["detail"].startswith("40 us, 1.10 Gbit/s")
    rows = doctor.doctor_cable_link_rows(first + [pingpong(c, 0, rc=1)], 0.25, 120)
    assert [(r["target"], r["reason"]) for r in rows if r["status"] == "failed"] == [
        (c["label"], "error")]
    assert doctor.doctor_slow_cables(first[:2], 0.25) == []


def test_a_cable_whose_ping_pong_failed_is_a_failed_row():
    plan = cables.cable_plan(RING, NAMES, POOL)
    a, _, b = plan["cables"]
    rows = doctor.doctor_cable_link_rows([pingpong(a, 9.5), pingpong(b, 0, rc=1)], 0.25, 120)
    failed = [r for r in rows if r["status"] == "failed"]
    assert [(r["target"], r["reason"]) for r in failed] == [("m2 en3 - m3 en2", "error")]
    hung = read({"item": a, "rc": None, "failed": True, "stdout": "",
                 "msg": "async task did not complete within the requested time - 120s"})
    [row] = doctor.doctor_cable_link_rows([hung], 0.25, 120)
    assert (row["reason"], row["detail"]) == ("timeout", "hung, stopped after 120s")
    printed_nothing = read({"item": a, "rc": 0, "stdout": "", "stderr": ""})
    [row] = doctor.doctor_cable_link_rows([printed_nothing], 0.25, 120)
    assert (row["status"], row["reason"]) == ("failed", "error")


# --- RDMA readiness and macOS builds -----------------------------------------------------------


def rdma_row(ctl_output, ibv_output, ports, required=True, system="Darwin"):
    devices = rdma.ibv_device_names(ibv_output)
    return doctor.doctor_rdma_row("m1", system, rdma.rdma_ctl_state(ctl_output) if ctl_output
                                  is not None else None, devices,
                                  rdma.rdma_missing_devices(devices, ports), required)


def test_rdma_enabled_with_a_device_per_cable_port():
    row = rdma_row(output("rdma_ctl_enabled"), output("ibv_devices_m4_pro_mac_mini"),
                   ["en2", "en3"])
    assert (row["check"], row["status"]) == ("rdma", "ok")
    assert row["detail"] == "enabled; ibv_devices: rdma_en2, rdma_en3, rdma_en4"


def test_rdma_disabled_tells_the_recovery_step_plainly():
    row = rdma_row(output("rdma_ctl_disabled"), output("ibv_devices_none"), ["en2"])
    assert (row["status"], row["reason"]) == ("failed", "disabled")
    fix = doctor.doctor_report_rows([row])[0]["fix"]
    assert "macOS Recovery" in fix and "Utilities > Terminal: `rdma_ctl enable`" in fix
    assert "restart" in fix and "not remotely" in fix


def test_rdma_without_a_device_for_a_cable_port_names_it():
    row = rdma_row(output("rdma_ctl_enabled"), output("ibv_devices_m4_pro_mac_mini"),
                   ["en2", "en6"])
    assert (row["status"], row["reason"]) == ("failed", "devices")
    assert row["detail"].startswith("enabled, but no rdma_en6 for its cables")


def test_no_rdma_ctl_means_macos_too_old():
    row = rdma_row(None, "", ["en2"])
    assert (row["status"], row["reason"]) == ("failed", "no_rdma_ctl")
    assert "macOS 26.2" in doctor.doctor_report_rows([row])[0]["fix"]


def test_rdma_not_needed_by_the_backend_only_warns():
    row = rdma_row(output("rdma_ctl_disabled"), "", ["en2"], required=False)
    assert (row["status"], row["reason"]) == ("warn", "disabled")
    assert doctor.doctor_report_rows([row])[0]["ok"] is True


def test_rdma_on_linux_is_skipped():
    row = rdma_row(None, "", ["en2"], system="Linux")
    assert (row["status"], row["detail"]) == (
        "skipped", "not macOS (Linux): RDMA over Thunderbolt is a macOS feature")


def test_macos_builds_must_be_identical_for_rdma():
    build = rdma.macos_build
    same = doctor.doctor_build_row("m2", "Darwin", build(output("sw_vers_build_26_5")), "25F71",
                                   True)
    assert (same["check"], same["status"], same["detail"]) == ("macos_build", "ok", "25F71")
    other = doctor.doctor_build_row("m2", "Darwin", build(output("sw_vers_build_26_3")), "25F71",
                                    True)
    assert (other["status"], other["detail"]) == ("failed", "25D125 (launch host: 25F71)")
    assert "same macOS build" in doctor.doctor_report_rows([other])[0]["fix"]
    assert doctor.doctor_build_row("m2", "Darwin", "25D125", "25F71", False)["status"] == "warn"
    assert doctor.doctor_build_row("m2", "Linux", None, "25F71", True)["status"] == "skipped"


# --- the cable graph (report.yml: cables.dot, cables.json -> cables.png) -----------------------


def test_cable_graph_is_drawn_with_the_failed_cable_marked(tmp_path):
    graph = load("roles/doctor/files/cable_graph.py")
    plan = cables.cable_plan(RING + [["m1", "en4", "m2", "en4"]], NAMES, POOL)
    ring = cabled(RING)["ring"]
    failed = ["m2 en3 -> m3 en2", "m1 en2 - m2 en2"]
    assert [graph.failed(c, failed) for c in plan["cables"]] == [True, False, False, True]
    data = tmp_path / "cables.json"
    data.write_text(json.dumps({"plan": plan, "ring": ring, "summary": "mesh", "failed": failed}))
    subprocess.run([sys.executable, str(graph.__file__), str(data), str(tmp_path / "c.png")],
                   check=True)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
