"""A run's page: runs/<run>/index.html on the controller, one self-contained file (inline CSS
and SVG, no server, nothing fetched: it opens from disk offline), and the same data beside it
as runs/<run>/status.json for scripts. Both are made from one row of `supervisor.py status
--run <run> --json` (job.json, each rank's heartbeat, each host's raw figures, the metrics);
launch_follow rewrites them while it follows the job, -e status=... when it lists the runs.

Each host's figures arrive as the raw output of the commands supervisor.py's FIGURES runs
there; the parsers here read them: Linux's /proc/meminfo, `ip -o -4 addr show` and
/sys/class/net/*/statistics; macOS's `sysctl -n hw.memsize`, `vm_stat`,
`sysctl -n iogpu.wired_limit_mb`, `pmset -g therm`, `pmset -g batt` and `netstat -ib`.
"""

import contextlib
import html
import json
import math
import os
import re
import time
from pathlib import Path
from string import Template

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

launch = load("roles/launch/filter_plugins/launch.py")

ENDED = ("finished", "stopped", "failed", "lost")  # no refresh: nothing on the page changes
REFRESH = 5  # seconds between two loads of a live page (launch_follow rewrites it as often)
# A heartbeat is rewritten every second: one 5 s old says its process is stopped or its host
# hung, before the supervisor's stall timeout (at least 10 s) names a suspect.
STALE_BEAT = 5


def meminfo(text):
    """/proc/meminfo's MemTotal and MemAvailable in bytes: {"total", "available"}."""
    found = {m[1]: int(m[2]) * 1024 for m in re.finditer(r"^(\w+):\s+(\d+) kB", text, re.M)}
    return {"total": found.get("MemTotal"), "available": found.get("MemAvailable")}


def linux_interfaces(addresses, counters, address):
    """[{"name", "rx", "tx" (bytes since boot), "job"}] of every interface but the loopback, from
    `ip -o -4 addr show` and "NAME RX TX" lines of /sys/class/net; job: the one holding the
    job's address (the rank plan's mpi_address)."""
    owner = {m[2]: m[1] for m in re.finditer(r"^\d+:\s+(\S+)\s+inet\s+([\d.]+)/", addresses, re.M)}
    found = []
    for line in counters.splitlines():
        name, *numbers = line.split()
        if name != "lo" and len(numbers) == 2 and all(n.isdigit() for n in numbers):
            found.append({"name": name, "rx": int(numbers[0]), "tx": int(numbers[1]),
                          "job": owner.get(address) == name})
    return found


def vm_stat(text):
    """`vm_stat`'s page counts in bytes: {"available" (free, inactive and speculative pages:
    what macOS gives a program without swapping), "wired" (wired down: the GPU's buffers
    among them)}; None without its header."""
    page = re.search(r"page size of (\d+) bytes", text)
    if not page:
        return None
    pages = {m[1]: int(m[2]) * int(page[1])
             for m in re.finditer(r"^Pages ([\w -]+):\s+(\d+)\.", text, re.M)}
    return {"available": sum(pages.get(k, 0) for k in ("free", "inactive", "speculative")),
            "wired": pages.get("wired down")}


def pmset_therm(text):
    """Thermal pressure in `pmset -g therm`: "nominal" when no warning was recorded, else each
    warning's or limit's words ("CPU_Speed_Limit 60")."""
    if not text.strip():
        return None
    limits = [f"{m[1]} {m[2]}" for m in re.finditer(r"(\w+_Limit)\s*=\s*(\d+)", text)
              if m[2] != "100"]
    levels = [line.strip() for line in text.splitlines()
              if "warning level" in line and "No " not in line]
    return ", ".join(levels + limits) or "nominal"


def pmset_batt(text):
    """The power source in `pmset -g batt` ("AC Power", "Battery Power 85%"), None without."""
    source = re.search(r"drawing from '([^']+)'", text)
    charge = re.search(r"\t(\d+)%", text)
    if not source:
        return None
    return source[1] + (f" {charge[1]}%" if charge and source[1] != "AC Power" else "")


def netstat_ib(text, address):
    """[{"name", "rx", "tx", "job"}] of `netstat -ib`'s link rows (<Link#N>: the interface's
    counters; its address rows repeat them) but the loopback; job: the interface with a row
    of the job's address. Ierrs..Coll are the last 7 columns; Address may be empty."""
    rows = [line.split() for line in text.splitlines()[1:]]
    rows = [r for r in rows if len(r) >= 10 and r[-5].isdigit() and r[-2].isdigit()]
    job = {r[0] for r in rows if len(r) == 11 and r[3] == address}
    return [{"name": r[0], "rx": int(r[-5]), "tx": int(r[-2]), "job": r[0] in job}
            for r in rows if r[2].startswith("<Link#") and not r[0].startswith("lo")]


def host_figures(host):
    """A host of status --run's "hosts" as the page shows it: {"host", "reached", "memory"
    ({"total", "available", "wired"} bytes), "gpu_wired_limit_mb", "thermal", "power",
    "interfaces"}, each None where the host's system does not say."""
    raw, address = host.get("figures") or {}, host.get("mpi_address")
    shown = {"host": host["host"], "reached": host["reached"], "memory": None,
             "gpu_wired_limit_mb": None, "thermal": None, "power": None, "interfaces": []}
    if "meminfo" in raw:
        shown.update(memory={**meminfo(raw["meminfo"]), "wired": None},
                     interfaces=linux_interfaces(raw.get("addresses", ""), raw.get("net", ""),
                                                 address))
    elif "vm_stat" in raw:
        total = raw.get("memsize", "").strip()
        limit = raw.get("wired_limit_mb", "").strip()
        shown.update(memory={"total": int(total) if total.isdigit() else None,
                             **(vm_stat(raw["vm_stat"]) or {"available": None, "wired": None})},
                     gpu_wired_limit_mb=int(limit) if limit.isdigit() else None,
                     thermal=pmset_therm(raw.get("therm", "")),
                     power=pmset_batt(raw.get("batt", "")),
                     interfaces=netstat_ib(raw.get("netstat", ""), address))
    return shown


def suspect_rank(suspect):
    """The rank a supervisor's suspect ("rank 1 on h1: ...") names, or None."""
    found = re.match(r"rank (\d+) on ", suspect or "")
    return int(found[1]) if found else None


def events(job):
    """The job's timeline from job.json: [{"at", "what", "detail"}] in time order."""
    found = [{"at": job.get("started"), "what": "started", "detail": ""}]
    for r in job.get("restarts") or []:
        found.append({"at": r["at"], "what": "stall" if r["reason"] == "stall"
                      else r["reason"].replace("_", " "),
                      "detail": f"suspect: {r['suspect']}" if r.get("suspect") else ""})
        found.append({"at": r["at"], "what": "restart", "detail":
                      f"from the checkpoint at step {r['from_step']} in {r['backoff_s']:g} s "
                      f"({r['lost_s']:g} s of work redone)"})
        if r.get("resumed_at"):
            found.append({"at": r["resumed_at"], "what": "training again", "detail": ""})
    if job.get("ended"):
        found.append({"at": job["ended"], "what": job["state"], "detail": job.get("reason") or ""})
    return sorted((e for e in found if e["at"]), key=lambda e: e["at"])


def launch_page_view(row, now=None):
    """The page's data (status.json) from a row of status --run: the run's state, step, ETA,
    each rank (stalled: its heartbeat STALE_BEAT s old while the job lives; suspect: the
    supervisor names it), each host's figures, the metrics and the timeline."""
    now = time.time() if now is None else now
    live = row["state"] not in ENDED
    suspect = suspect_rank(row.get("suspect"))
    eta = launch.eta_seconds(row)
    return {
        "run": row["run"], "state": row["state"], "reason": row.get("reason"), "live": live,
        "updated": now, "step": row.get("last_step"), "steps": row.get("steps"),
        "eta_s": None if eta is None else round(eta), "step_seconds": row.get("step_seconds"),
        "restarts": len(row.get("restarts") or []), "suspect": row.get("suspect"),
        "ranks": [{**r, "suspect": r["rank"] == suspect,
                   "stalled": live and r["phase"] != "exiting" and (r["age"] or 0) >= STALE_BEAT}
                  for r in row.get("ranks") or []],
        "hosts": [host_figures(h) for h in row.get("hosts") or []],
        "metrics": row.get("metrics") or [], "events": events(row)}


def _size(n):
    """Bytes as people read them: 512 B, 3.2 MB, 64.0 GB."""
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _number(value):
    """12,345 or 0.0254: an axis label without an exponent."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _clock(at):
    return time.strftime("%H:%M:%S", time.localtime(at))


def chart(name, series, log=False):
    """An SVG line chart: series [(label, css class, [(x, y)], dots: each point a dot too)]; y
    on a log scale if log (points at y <= 0 left out); "no points yet" without any."""
    keep = [(label, cls, [(x, y) for x, y in points if y is not None and (y > 0 or not log)], dots)
            for label, cls, points, dots in series]
    every = [p for _, _, points, _ in keep for p in points]
    if not every:
        return (f'<figure class="chart" data-name="{name}"><figcaption>{name}</figcaption>'
                '<p class="none">no points yet</p></figure>')
    fy = math.log10 if log else float
    x0, x1 = min(x for x, _ in every), max(x for x, _ in every)
    y0, y1 = min(fy(y) for _, y in every), max(fy(y) for _, y in every)
    w, h, pad = 560, 200, 44
    sx = (w - pad - 10) / ((x1 - x0) or 1)
    sy = (h - 30) / ((y1 - y0) or 1)

    def at(x, y):
        return pad + (x - x0) * sx, h - 20 - (fy(y) - y0) * sy

    parts = []
    for label, cls, points, dots in keep:
        if dots or len(points) == 1:  # a line needs two points
            parts += ['<circle class="{}" cx="{:.1f}" cy="{:.1f}" r="3">'.format(cls, *at(x, y))
                      + f"<title>{label} {y:.4g} at step {x}</title></circle>" for x, y in points]
        if len(points) > 1:
            line = " ".join("{:.1f},{:.1f}".format(*at(x, y)) for x, y in points)
            parts.append(f'<polyline class="{cls}" points="{line}"><title>{label}</title>'
                         "</polyline>")
    legend = " ".join(f'<tspan class="{cls}">&#9632; {label}</tspan>'
                      for label, cls, points, _ in keep if points)
    top, bottom = (10 ** y1, 10 ** y0) if log else (y1, y0)
    return (f'<figure class="chart" data-name="{name}"><figcaption>{name}'
            f'{" (log scale)" if log else ""}</figcaption><svg viewBox="0 0 {w} {h}" width="{w}" '
            f'height="{h}" role="img"><text x="{pad}" y="12">{legend}</text>'
            f'<text x="2" y="24">{_number(top)}</text>'
            f'<text x="2" y="{h - 20}">{_number(bottom)}</text>'
            f'<text x="{pad}" y="{h - 4}">step {x0}</text>'
            f'<text x="{w - 10}" y="{h - 4}" text-anchor="end">step {x1}</text>'
            f'<line x1="{pad}" y1="{h - 20}" x2="{w - 10}" y2="{h - 20}"/>'
            f'<line x1="{pad}" y1="16" x2="{pad}" y2="{h - 20}"/>{"".join(parts)}</svg></figure>')


def _rows(cells_list):
    return "".join("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
                   for cells in cells_list)


PAGE = Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">$refresh
<title>$run: $state</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}
h1{font-size:1.4em;margin:0 0 .3em} h2{font-size:1.1em;margin:1.2em 0 .4em}
.state{padding:.1em .5em;border-radius:.3em;background:#ddd}
.state.running,.state.starting{background:#cfe9cf} .state.failed,.state.lost{background:#f4c7c3}
.state.restarting,.state.stopping{background:#fde7b0}
table{border-collapse:collapse}
td,th{padding:.2em .8em;border-bottom:1px solid #eee;text-align:left}
tr.stalled td{background:#f4c7c3} .none{color:#888}
.charts{display:flex;flex-wrap:wrap;gap:1em} figure{margin:0}
svg text{font-size:11px;fill:#555;stroke:none} svg line{stroke:#bbb}
polyline{fill:none;stroke-width:1.5} .train{stroke:#1f77b4;fill:#1f77b4}
.eval{stroke:#d62728;fill:#d62728} .speed{stroke:#2ca02c;fill:#2ca02c}
polyline.train,polyline.eval,polyline.speed{fill:none}
</style></head><body>
<h1>$run <span class="state $state">$state</span></h1>
<p id="summary">step $step/$steps &middot; ETA $eta &middot; restarts $restarts$reason<br>
updated $updated<span id="age"></span>$suspect</p>
<h2>Curves</h2><div class="charts">$loss $speed</div>
<h2>Ranks</h2>
<table id="ranks"><tr><th>rank</th><th>host</th><th>phase</th><th>step</th><th>heartbeat</th>
<th></th></tr>$ranks</table>
<h2>Hosts</h2>
<table id="hosts"><tr><th>host</th><th>memory available / total</th><th>wired</th>
<th>GPU wired limit</th><th>thermal</th><th>power</th><th>interfaces (received / sent)</th></tr>
$hosts</table>
<h2>Timeline</h2>
<table id="events">$events</table>
<script id="data" type="application/json">$data</script>
<script>
// How old this page is, while it is open: a page whose play stopped following says so.
const updated = JSON.parse(document.getElementById("data").textContent).updated;
const show = () => { document.getElementById("age").textContent =
  " (" + Math.round(Date.now() / 1000 - updated) + " s ago)"; };
show(); setInterval(show, 1000);
</script>
</body></html>
""")


def _rank_cells(r):
    beat = (f"{r['age']:.0f} s ago" if r["age"] is not None
            else "no heartbeat" if r["reached"] else "host unreachable")
    flags = [w for w, on in (("stalled", r["stalled"]), ("suspect", r["suspect"])) if on]
    return [r["rank"], html.escape(r["host"]), r["phase"] or "-",
            "-" if r["step"] is None else r["step"], beat, " ".join(flags)]


def _host_cells(h):
    memory = h["memory"] or {}
    interfaces = ", ".join(f"{'<b>' if i['job'] else ''}{html.escape(i['name'])}: "
                           f"{_size(i['rx'])} / {_size(i['tx'])}{'</b>' if i['job'] else ''}"
                           for i in h["interfaces"])
    limit = h["gpu_wired_limit_mb"]
    return [html.escape(h["host"]) + ("" if h["reached"] else " (unreachable)"),
            f"{_size(memory.get('available'))} / {_size(memory.get('total'))}",
            _size(memory.get("wired")),
            "-" if limit is None else "macOS default" if limit == 0 else f"{limit} MB",
            html.escape(h["thermal"] or "-"), html.escape(h["power"] or "-"), interfaces or "-"]


def launch_page_html(view):
    """The page of launch_page_view's data: a meta refresh while the run lives."""
    metrics = view["metrics"]
    train = [r for r in metrics if r.get("kind") == "train"]
    evals = [r for r in metrics if r.get("kind") == "eval"]
    row = ' class="stalled"'
    ranks = "".join(f"<tr{row if r['stalled'] else ''}>" + "".join(
        f"<td>{c}</td>" for c in _rank_cells(r)) + "</tr>" for r in view["ranks"])
    data = json.dumps(view).replace("<", "\\u003c")  # no "</script>" in its script element
    return PAGE.substitute(
        refresh=f'\n<meta http-equiv="refresh" content="{REFRESH}">' if view["live"] else "",
        run=html.escape(view["run"]), state=view["state"],
        step=view["step"] or 0, steps=view["steps"] or "?",
        eta="-" if view["eta_s"] is None else launch.duration(view["eta_s"]),
        restarts=view["restarts"],
        reason=f" &middot; {html.escape(view['reason'])}" if view["reason"] else "",
        updated=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(view["updated"])),
        suspect=f'<br><span id="suspect">suspect: {html.escape(view["suspect"])}</span>'
        if view["suspect"] else "",
        loss=chart("loss", [("train loss", "train", [(r["step"], r.get("loss")) for r in train],
                             False),
                            ("eval loss", "eval", [(r["step"], r.get("eval_loss")) for r in evals],
                             True)], log=True),
        speed=chart("throughput", [("samples/s", "speed",
                                    [(r["step"], r.get("samples_per_s")) for r in train], False)]),
        ranks=ranks or '<tr><td colspan="6" class="none">no ranks read</td></tr>',
        hosts=_rows(_host_cells(h) for h in view["hosts"]) or
        '<tr><td colspan="7" class="none">no hosts read</td></tr>',
        events=_rows([_clock(e["at"]), html.escape(e["what"]), html.escape(e["detail"])]
                     for e in view["events"]),
        data=data)


def write_page(run_dir, row, now=None):
    """Write run_dir/index.html and run_dir/status.json (the user's alone, as the run's other
    files), each replaced whole: a browser or script never reads half of one. The view."""
    view = launch_page_view(row, now)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name, text in (("status.json", json.dumps(view, indent=1) + "\n"),
                       ("index.html", launch_page_html(view))):
        tmp = run_dir / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, run_dir / name)
    return view


def launch_paged_runs(rows, runs_dir):
    """The runs of `status --json`'s rows whose pages -e status=true rewrites: those that have
    not ended, and those whose page in runs_dir still shows them live (they ended unfollowed)."""
    def shown_live(run):
        with contextlib.suppress(OSError, ValueError):
            return json.loads((Path(runs_dir) / run / "status.json").read_text())["live"]
        return False
    return [r["run"] for r in rows if r["state"] not in ENDED or shown_live(r["run"])]


class FilterModule:
    def filters(self):
        return {"launch_page_view": launch_page_view, "launch_page_html": launch_page_html,
                "launch_paged_runs": launch_paged_runs}
