"""roles/cluster/filter_plugins/rdma.py against recorded real outputs of `ibv_devices`,
`rdma_ctl status` and `sw_vers -buildVersion` (tests/unit/data/rdma_outputs.yml says where each
comes from), and against what MLX's own mlx.distributed_config reads from `ibv_devices`."""

from pathlib import Path

import pytest
import yaml

from tests.unit.plugins import load

rdma = load("roles/cluster/filter_plugins/rdma.py")
OUTPUTS = yaml.safe_load((Path(__file__).parent / "data/rdma_outputs.yml").read_text())


def output(name):
    return OUTPUTS[name]["output"]


def test_every_sample_says_where_it_comes_from():
    for name, sample in OUTPUTS.items():
        assert sample["source"] and sample["command"] and "output" in sample, name


@pytest.mark.parametrize(("name", "devices"), [
    ("ibv_devices_m3_ultra", ["rdma_en2", "rdma_en3", "rdma_en5", "rdma_en4", "rdma_en6",
                              "rdma_en7"]),
    ("ibv_devices_m4_pro_mac_mini", ["rdma_en2", "rdma_en3", "rdma_en4"]),
    ("ibv_devices_none", []),
])
def test_ibv_devices_lists_the_rdma_devices_in_its_order(name, devices):
    assert rdma.ibv_device_names(output(name)) == devices


@pytest.mark.parametrize("name", ["ibv_devices_m3_ultra", "ibv_devices_m4_pro_mac_mini",
                                  "ibv_devices_none"])
def test_ibv_devices_agrees_with_mlx(name):
    # mlx.distributed_config's check_rdma: every word of the output that starts with rdma_
    mlx = [d for d in output(name).strip().split() if d.startswith("rdma_")]
    assert rdma.ibv_device_names(output(name)) == mlx


def test_ibv_devices_of_nothing():
    assert rdma.ibv_device_names("") == [] and rdma.ibv_device_names(None) == []


@pytest.mark.parametrize(("name", "state"), [("rdma_ctl_enabled", "enabled"),
                                             ("rdma_ctl_disabled", "disabled")])
def test_rdma_ctl_status(name, state):
    assert rdma.rdma_ctl_state(output(name)) == state


@pytest.mark.parametrize("text", ["", "zsh: command not found: rdma_ctl", None])
def test_rdma_ctl_anything_else_is_unknown(text):
    assert rdma.rdma_ctl_state(text) is None


def test_macos_build():
    assert rdma.macos_build(output("sw_vers_build_26_5")) == "25F71"
    assert rdma.macos_build(output("sw_vers_build_26_3")) == "25D125"
    assert rdma.macos_build("") is None


def test_missing_devices_name_each_cable_port_without_one():
    devices = rdma.ibv_device_names(output("ibv_devices_m4_pro_mac_mini"))
    assert rdma.rdma_missing_devices(devices, ["en2", "en4"]) == []
    assert rdma.rdma_missing_devices(devices, ["en2", "en5"]) == ["rdma_en5"]
    assert rdma.rdma_missing_devices([], ["en2"]) == ["rdma_en2"]


def test_filter_names():
    assert set(rdma.FilterModule().filters()) == {
        "ibv_device_names", "macos_build", "rdma_ctl_state", "rdma_missing_devices"}
