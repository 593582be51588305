"""What the macos role records before it changes a Mac, and what reset.yml sets back from it.
The inspections come from the role's own plan filters fed with recorded outputs (the samples of
test_macos_pmset.py, test_macos_socketfilterfw.py and test_macos_wired_limit.py)."""

from tests.unit import test_macos_pmset as pmset_samples
from tests.unit import test_macos_socketfilterfw as fw_samples
from tests.unit import test_macos_wired_limit as wired_samples
from tests.unit.plugins import load

pmset = load("roles/macos/filter_plugins/pmset.py")
fw = load("roles/macos/filter_plugins/socketfilterfw.py")
wired = load("roles/macos/filter_plugins/wired_limit.py")
record = load("roles/macos/filter_plugins/macos_record.py")

ran = pmset_samples.ran


def inspection(custom, requested_pmset, wired_now, limit, firewall_list):
    return {
        "pmset": pmset.pmset_plan(ran(custom), requested_pmset),
        "wired": wired.wired_limit_plan(wired_samples.probe(wired_now), limit,
                                        wired_samples.daemon_plist(limit)),
        "firewall": fw.socketfilterfw_plan(ran(fw_samples.ON), ran(firewall_list),
                                           fw_samples.EXECUTABLES),
    }


def test_the_first_run_records_what_it_is_about_to_change():
    before = inspection(pmset_samples.CUSTOM_AC_AWAKE, {"sleep": 0, "powernap": 0}, 0, 24576,
                        fw_samples.LIST_RECENT)
    assert record.macos_record({}, before) == {
        "pmset": {"sleep": {"Battery Power": 1, "AC Power": 0},
                  "powernap": {"Battery Power": 1, "AC Power": 1}},
        "wired_limit_mb": 0,
        "firewall": [fw_samples.PYTHON_BUNDLE] + [fw_samples.OMPI + name
                                                  for name in ("mpirun", "prterun", "prted")],
    }


def test_later_runs_keep_the_first_values_and_add_only_new_ones():
    earlier = {"pmset": {"sleep": {"Battery Power": 1, "AC Power": 0}}, "wired_limit_mb": 0,
               "firewall": [fw_samples.PYTHON_BUNDLE]}
    # The user asked for another limit and disksleep too; sleep is already 0 everywhere now.
    now = inspection(pmset_samples.CUSTOM_AC_AWAKE.replace("sleep                1",
                                                           "sleep                0"),
                     {"sleep": 0, "disksleep": 0}, 24576, 16384, fw_samples.LIST_RECENT)
    after = record.macos_record(earlier, now)
    assert after["pmset"] == {"sleep": {"Battery Power": 1, "AC Power": 0},
                              "disksleep": {"Battery Power": 10, "AC Power": 0}}
    assert after["wired_limit_mb"] == 0  # the user's own value, not the 24576 setup had set
    assert after["firewall"][0] == fw_samples.PYTHON_BUNDLE and len(after["firewall"]) == 4


def test_a_run_that_changes_nothing_records_nothing_new():
    settled = inspection(pmset_samples.CUSTOM_DESKTOP, {"powernap": 0}, 0, 0,
                         fw_samples.listing_with(*[(t, True) for t in (
                             fw_samples.PYTHON_BUNDLE, *fw_samples.EXECUTABLES["openmpi"])]))
    assert record.macos_record({}, settled) == {"pmset": {}, "wired_limit_mb": None,
                                                "firewall": []}


def test_reset_sets_back_each_power_source_that_differs():
    saved = {"pmset": {"sleep": {"Battery Power": 1, "AC Power": 0},
                       "disksleep": {"Battery Power": 10, "AC Power": 0}},
             "wired_limit_mb": 0}
    # After setup applied sleep 0 and disksleep 0 everywhere (CUSTOM_AC_AWAKE's AC values).
    applied = pmset_samples.CUSTOM_AC_AWAKE.replace("sleep                1",
                                                    "sleep                0").replace(
        "disksleep            10", "disksleep            0")
    now = inspection(applied, {}, 24576, 24576, fw_samples.LIST_RECENT)
    restore = record.macos_restore(saved, now)
    assert restore["pmset"] == [["/usr/bin/pmset", "-b", "sleep", "1"],
                                ["/usr/bin/pmset", "-b", "disksleep", "10"]]
    assert restore["wired_limit_mb"] == 0


def test_reset_after_a_reset_sets_nothing():
    saved = {"pmset": {"sleep": {"Battery Power": 1, "AC Power": 0}}, "wired_limit_mb": 0}
    now = inspection(pmset_samples.CUSTOM_AC_AWAKE, {}, 0, 0, fw_samples.LIST_RECENT)
    assert record.macos_restore(saved, now) == {"pmset": [], "wired_limit_mb": None}
    assert record.macos_restore({}, now) == {"pmset": [], "wired_limit_mb": None}
