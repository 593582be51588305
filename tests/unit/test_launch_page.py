"""roles/launch/filter_plugins/page.py: a run's page and its data, and each host's figures as
the commands on it print them.

macOS samples (cannot run here), recorded real outputs:
- VM_STAT: `vm_stat` of a 2 GB MacBook Pro (Mac OS X 10.6.8) in the question "Why does free +
  active + inactive + speculative + wired not equal total RAM?" (apple.stackexchange.com,
  mirrored on newbetuts.com); spacing as the page shows it.
- THERM: `pmset -g therm` in the README of fmorrisey/mac_sys_utils (mac_therm_logger, macOS,
  April 2025, 12 CPUs): no warning recorded, every limit 100.
- BATT_AC, BATT_BATTERY: `pmset -g batt` in powerline-shell's battery segment (its docstring's
  example outputs), a laptop on AC and on battery.
- NETSTAT: `netstat -bI en0` and `netstat -bI en1` (OS X) on support.moonpoint.com (2015/04/02),
  one row a line under one header; en1's IPv4 address replaced by one of 198.18.0.0/15 (test
  addresses are from there only).
Linux's: this machine's own /proc/meminfo, `ip -o -4 addr show` and /sys/class/net.
"""

import subprocess
import time
from pathlib import Path

from tests.unit.plugins import load

page = load("roles/launch/filter_plugins/page.py")
supervisor = load("roles/launch/files/supervisor.py")

VM_STAT = """Mach Virtual Memory Statistics: (page size of 4096 bytes)
Pages free: 90518.
Pages active: 205479.
Pages inactive: 32417.
Pages speculative: 134461.
Pages wired down: 61009.
"Translation faults": 26323651.
Pages copy-on-write: 177180.
Pages zero filled: 15230394.
Pages reactivated: 3.
Pageins: 388108.
Pageouts: 0.
Object cache: 14 hits of 797355 lookups (0% hit rate)
"""

THERM = """Note: No thermal warning level has been recorded
Note: No performance warning level has been recorded
2025-04-06 20:50:47 -0500 CPU Power notify
\tCPU_Scheduler_Limit \t= 100
\tCPU_Available_CPUs \t= 12
\tCPU_Speed_Limit \t= 100
"""

BATT_AC = ("Now drawing from 'AC Power'\n -InternalBattery-0 (id=3866723)\t84%; charging; "
           "1:04 remaining present: true\n")
BATT_BATTERY = ("Now drawing from 'Battery Power'\n -InternalBattery-0 (id=3866723)\t85%; "
                "discharging; (no estimate) present: true\n")

NETSTAT = """Name Mtu Network Address Ipkts Ierrs Ibytes Opkts Oerrs Obytes Coll
en0 1500 <Link#4> d4:9a:20:0d:e6:ec 0 0 0 0 0 836 0
en1 1500 <Link#5> f8:1e:df:d9:2b:64 22184840 0 13047081883 29605843 0 6652036717 0
en1 1500 gsod0009627 fe80:5::fa1e:dfff 22184840 - 13047081883 29605843 - 6652036717 -
en1 1500 198.18.3 198.18.3.4 22184840 - 13047081883 29605843 - 6652036717 -
"""


def test_macos_memory_gpu_power_and_interfaces_from_real_outputs():
    host = {"host": "mac1", "reached": True, "mpi_address": "198.18.3.4", "figures": {
        "memsize": "2147483648\n", "vm_stat": VM_STAT, "wired_limit_mb": "0\n", "therm": THERM,
        "batt": BATT_BATTERY, "netstat": NETSTAT}}
    assert page.host_figures(host) == {
        "host": "mac1", "reached": True,
        "memory": {"total": 2147483648, "available": (90518 + 32417 + 134461) * 4096,
                   "wired": 61009 * 4096},
        "gpu_wired_limit_mb": 0, "thermal": "nominal", "power": "Battery Power 85%",
        "interfaces": [{"name": "en0", "rx": 0, "tx": 836, "job": False},
                       {"name": "en1", "rx": 13047081883, "tx": 6652036717, "job": True}]}
    assert page.pmset_batt(BATT_AC) == "AC Power"
    assert [page._size(n) for n in (836, 13047081883, None)] == ["836 B", "13.0 GB", "-"]
    # the same sample throttled (a limit under 100): its words are shown
    assert page.pmset_therm(THERM.replace("Speed_Limit \t= 100", "Speed_Limit \t= 60")) == (
        "CPU_Speed_Limit 60")
    # a Mac before Sonoma (no iogpu.wired_limit_mb), output missing: said as unknown
    assert page.pmset_therm("") is None and page.vm_stat("") is None
    bare = page.host_figures({**host, "figures": {"vm_stat": VM_STAT}})
    assert bare["gpu_wired_limit_mb"] is None and bare["memory"]["total"] is None


def test_linux_memory_and_interfaces_from_this_machine():
    raw = supervisor.read_host("local", [], figures=True)[3]
    addresses = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                               text=True).stdout
    name, address = next((line.split()[1], line.split()[3].split("/")[0])
                         for line in addresses.splitlines() if " lo " not in line)
    shown = page.host_figures({"host": "h", "reached": True, "mpi_address": address,
                               "figures": raw})
    total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    assert shown["memory"]["total"] == total and 0 < shown["memory"]["available"] < total
    mine = [i for i in shown["interfaces"] if i["job"]]
    assert [i["name"] for i in mine] == [name] and "lo" not in [
        i["name"] for i in shown["interfaces"]]
    rx = int(Path(f"/sys/class/net/{name}/statistics/rx_bytes").read_text())
    assert 0 < mine[0]["rx"] <= rx
    assert shown["thermal"] is shown["power"] is shown["gpu_wired_limit_mb"] is None


def row(**changes):
    now = time.time()
    return {"run": "r", "state": "running", "reason": None, "last_step": 40, "steps": 100,
            "step_seconds": 0.5, "started": now - 60, "ended": None, "suspect": None,
            "restarts": [], "ranks": [
                {"rank": 0, "host": "h0", "reached": True, "phase": "training", "step": 40,
                 "age": 0.5},
                {"rank": 1, "host": "h1", "reached": True, "phase": "training", "step": 40,
                 "age": 7.0}],
            "hosts": [], "metrics": [{"kind": "train", "step": 10, "loss": 2.0,
                                      "samples_per_s": 90.0},
                                     {"kind": "train", "step": 20, "loss": 1.0,
                                      "samples_per_s": 110.0},
                                     {"kind": "eval", "step": 20, "eval_loss": 1.2}],
            **changes}


def test_the_view_says_eta_stalled_ranks_and_the_timeline():
    view = page.launch_page_view(row(), now=1000.0)
    assert view["live"] and view["eta_s"] == 30 and view["updated"] == 1000.0
    assert [(r["stalled"], r["suspect"]) for r in view["ranks"]] == [(False, False), (True, False)]
    restart = {"at": 900.0, "reason": "rank_failed", "suspect": "rank 1 on h1: exited with code 1",
               "from_step": 20, "lost_s": 4.0, "backoff_s": 10, "resumed_at": 920.0}
    ended = page.launch_page_view(row(state="finished", reason="completed", started=800.0,
                                      ended=950.0, restarts=[restart],
                                      suspect="rank 1 on h1: exited with code 1"))
    assert not ended["live"] and ended["eta_s"] is None
    # an ended job's ranks are not stalled: their heartbeats just stopped
    assert [(r["stalled"], r["suspect"]) for r in ended["ranks"]] == [(False, False), (False, True)]
    assert [(e["at"], e["what"]) for e in ended["events"]] == [
        (800.0, "started"), (900.0, "rank failed"), (900.0, "restart"),
        (920.0, "training again"), (950.0, "finished")]
    assert ended["events"][1]["detail"] == "suspect: rank 1 on h1: exited with code 1"


def test_the_page_refreshes_while_the_run_lives_and_draws_its_curves():
    live = page.launch_page_html(page.launch_page_view(row()))
    assert '<meta http-equiv="refresh" content="5">' in live
    assert live.count('<polyline class="train"') == live.count('<polyline class="speed"') == 1
    assert live.count('<circle class="eval"') == 1 and '<tr class="stalled"><td>1</td>' in live
    ended = page.launch_page_html(page.launch_page_view(row(state="stopped", reason="user",
                                                           metrics=[])))
    assert "http-equiv" not in ended and ended.count("no points yet") == 2
    # a name is text, never markup; the data's "</script>" cannot end its script element
    odd = page.launch_page_html(page.launch_page_view(row(run="<b>x</script>")))
    assert "<b>x" not in odd and odd.count("</script>") == 2


def test_status_true_rewrites_the_pages_of_live_runs_and_of_pages_that_say_live(tmp_path):
    page.write_page(tmp_path / "was-live", row(run="was-live"))
    page.write_page(tmp_path / "ended", row(run="ended", state="failed"))
    rows = [{"run": n, "state": s} for n, s in [("live", "running"), ("was-live", "finished"),
                                                ("ended", "failed"), ("never", "stopped")]]
    assert page.launch_paged_runs(rows, tmp_path) == ["live", "was-live"]
    assert oct((tmp_path / "ended" / "index.html").stat().st_mode & 0o777) == "0o600"
    assert not list(tmp_path.glob("*/.*.tmp"))


def test_metric_points_keeps_every_evaluation_and_thins_the_train_records(tmp_path):
    lines = [f'{{"kind": "train", "step": {s}, "loss": 1}}' for s in range(1, 1201)]
    lines += ['{"kind": "eval", "step": 600, "eval_loss": 1}', "cut sho"]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    points = supervisor.metric_points(tmp_path / "metrics.jsonl", most=500)
    train = [p["step"] for p in points if p["kind"] == "train"]
    assert len(train) <= 500 and train[0] == 1 and train[-1] == 1200
    assert [p["step"] for p in points if p["kind"] == "eval"] == [600]
    assert supervisor.metric_points(tmp_path / "none") == []
