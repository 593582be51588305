#!/usr/bin/env python3
"""Supervise one training job on the launch host, so that a long run is never lost.

    supervisor.py start  --run-dir DIR --lock FILE [options]   # daemonizes, prints "started PID"
    supervisor.py stop   --run-dir DIR [--reason user] [--stop-grace S]
    supervisor.py status --runs-dir RUNS [--json] [--run NAME]
    supervisor.py check  [options]   # the job's options settled as JSON, or the first one's error

`start` leaves a keeper (the PID it prints) whose child, the supervisor, owns the job; a
supervisor that dies is replaced at once and adopts the running job (see keep()).
The supervisor runs `sh DIR/command.sh` (in DIR, in its own process group, output appended to
DIR/launch.log) and, on a restart, `sh DIR/command.sh --resume`: command.sh must pass its
arguments ("$@") on to `python -m train`, with `--heartbeat runs/<run>/logs/rank.{rank}.heartbeat`.
It watches every rank's heartbeat (logs/rank.N.heartbeat on its host: {"phase", "step",
"progress", "time", "pid"}, rewritten every second) and:
- a rank whose heartbeat is not rewritten for the stall timeout is frozen, and a job whose ranks
  all go without progress for their phase's limit is stalled (training and evaluation: the
  stall timeout per step or evaluation batch; a model load, a checkpoint and a rank's last
  writes: the startup timeout): it names the suspect rank (stopped or missing process,
  unreachable host, lowest step), stops the job and restarts it from the latest checkpoint; so
  does a launcher that exits non-zero, even after DIR/summary.json;
- DIR/stop (a reason word; written by `stop`, or by the daemon at --time-limit) makes every
  rank stop at one step with a checkpoint (train/ writes DIR/stopped.json); a job that has not
  stopped --stop-grace seconds later is killed;
- a launcher still running --exit-grace seconds after DIR/summary.json is stopped (Open MPI 5
  can hang after every rank finished, openpmix/prrte#1839) and the run counts as finished;
- --notify's command runs at each stall and when the job ends (see notify()), and once when
  `status` finds the job lost (notify_lost()).
State: DIR/job.json (replaced atomically; each process in it named by pid, start time and
the host's boot id: a pid alone may name another process after a restart), DIR/exit_status
when the job ends, and a timestamped account of everything it did in DIR/supervisor.log.
A job's processes on a host are found with `pgrep -u <uid> -f -- '-m trai[n] --out <run dir>( |$)'`:
every rank runs `python -m train --out <the run's absolute path on its host> ...`, that path
belongs to one run of one user, and `trai[n]` keeps the pattern from matching any command line
that contains the pattern itself. Python 3 standard library only.
"""

import argparse
import contextlib
import fcntl
import functools
import json
import os
import pwd
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

TERMINAL = ("finished", "stopped", "failed")
LOCKED = 3  # exit code of `start` when another supervisor holds the lock
KILL_AFTER = 5  # seconds between TERM and KILL of the launcher's process group
BACKOFF_CAP = 300  # seconds: the longest wait before a restart
MAX_RESTARTS = 100  # --max-restarts' bound
DAY, YEAR = 86400, 365 * 86400
STOP_GRACE = 120  # seconds a stop gives the ranks to reach a step and checkpoint there
# The launcher's shell: on Linux the job's processes (mpirun, its daemons, the ranks on this
# host inherit it; each rank then raises its own to 1000) are what the OOM killer takes before
# the supervisor and keeper. A killed rank's memory is freed slowly, and a kernel still short of
# it must take the launcher next, not the supervisor, which restarts the job (unprivileged
# processes may raise their score; macOS has no /proc and jetsam instead).
LAUNCHER_SHELL = ('{ echo 500 >/proc/self/oom_score_adj; } 2>/dev/null; '
                  '"$@"; code=$?; echo $code >launcher.exit; exit $code')
KEEPER_RESTARTS = 5  # supervisors a keeper starts again within KEEPER_WINDOW s before it gives up
KEEPER_WINDOW = 600
NOTIFY_TIMEOUT = 30  # seconds a notifier may run; then its process group is killed
SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
# How Open MPI names a failed rank in the launcher's output (4.x and 5.x, which wraps lines).
MPI_SIGNAL = re.compile(r"process\s+rank\s+(\d+)\s+with\s+PID\s+(\d+)\s+on\s+node\s+(\S+)\s+"
                        r"exited\s+on\s+signal\s+(\d+)")
MPI_EXIT = re.compile(r"Process name:\s*\[[^\n]*,(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
# mlx.launch (ring), which itself exits 0: "Node with rank 1 exited with code 255" / "was killed".
RING_EXIT = re.compile(r"Node with rank (\d+) (?:exited with code (\d+)|was killed)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Who sends SIGKILL unasked: Linux's OOM killer and macOS's memory pressure (jetsam).
KILLED_HINT = " (out of memory? a model or batch too big for the host, or killed by hand)"
METRIC_POINTS = 500  # train records status --run gives at most (a page's curve)
# What status --run reads of each host besides the heartbeats: its memory, GPU and power, and
# the bytes each interface moved, as "--- name" sections of raw output, read by the
# controller's filters (roles/launch/filter_plugins/page.py). Commands macOS ships, no sudo.
FIGURES = """echo '--- figures'
if [ "$(uname)" = Darwin ]; then
  echo '--- memsize'; sysctl -n hw.memsize
  echo '--- vm_stat'; vm_stat
  echo '--- wired_limit_mb'; sysctl -n iogpu.wired_limit_mb
  echo '--- therm'; pmset -g therm
  echo '--- batt'; pmset -g batt
  echo '--- netstat'; netstat -ib
else
  echo '--- meminfo'; cat /proc/meminfo
  echo '--- addresses'; ip -o -4 addr show
  echo '--- net'; cd /sys/class/net && for i in *; do
    echo "$i $(cat "$i/statistics/rx_bytes") $(cat "$i/statistics/tx_bytes")"; done
fi 2>/dev/null
"""
REMOTE_EVERY = 5  # seconds between reads of other hosts' heartbeats (one ssh per host)
# Phases whose work has no steady unit of progress: a model load (or download), a checkpoint
# write and a rank's last writes (its adapters, summary and plots, on a slow disk or a busy host
# longer than a step) get the startup timeout in all; training and evaluation the stall timeout
# per step or evaluation batch. None: no heartbeat yet (the launcher and Python starting).
STARTUP_PHASES = (None, "loading", "checkpointing", "exiting")


def failed_rank(text):
    """(rank, why) of the first rank the launcher's output reports as failed, or None."""
    text = ANSI.sub("", text)
    found = [(m.start(), int(m.group(1)), f"killed by signal {m.group(4)}"
              + (KILLED_HINT if m.group(4) == "9" else "")) for m in MPI_SIGNAL.finditer(text)]
    found += [(m.start(), int(m.group(1)), f"exited with code {m.group(2)}")
              for m in MPI_EXIT.finditer(text)]
    found += [(m.start(), int(m.group(1)), f"exited with code {m.group(2)}" if m.group(2)
               else "was killed by mlx.launch") for m in RING_EXIT.finditer(text)]
    return min(found)[1:] if found else None


def host_of(hosts, rank):
    return next((h["host"] for h in hosts if h["rank"] == rank), "an unknown host")


def launch_suspect(job, run_dir):
    """"rank R on HOST: why" from the launcher's output of the job's last launch, or None."""
    try:
        with open(run_dir / "launch.log", "rb") as f:
            f.seek(job["log_offset"])
            found = failed_rank(f.read().decode(errors="replace"))
    except OSError:  # never launched
        return None
    if found is None:
        return None
    return f"rank {found[0]} on {host_of(job['rank_hosts'], found[0])}: {found[1]}"


def log(message, file=None):
    with contextlib.suppress(OSError):  # a full disk: a gap in the account, the job goes on
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}", file=file, flush=True)


def read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def parse_json(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def write_atomic(path, text):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@functools.cache
def boot_id():
    """This boot of the host: a recorded pid means nothing after a restart."""
    if sys.platform == "linux":
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return subprocess.run(["sysctl", "-n", "kern.bootsessionuuid"], capture_output=True,
                          text=True).stdout.strip()


def stat_start(text):
    """The start time (clock ticks after boot) in a Linux /proc/PID/stat line, None for a zombie
    (state Z: exited, not yet reaped). Fields are counted after the command name, which may hold
    spaces and parentheses."""
    state, *fields = text.rsplit(")", 1)[1].split()
    return None if state == "Z" else fields[18]


def stat_end(text):
    """How a zombie in a Linux /proc/PID/stat line ended ("killed by signal 9", "exited with
    code 3": its wait status, the 52nd field), None for a process that runs."""
    state, *fields = text.rsplit(")", 1)[1].split()
    if state != "Z":
        return None
    status = int(fields[48])
    signalled = status & 0x7F
    return f"killed by signal {signalled}" if signalled else f"exited with code {status >> 8}"


def zombie_end(pid):
    """stat_end of process pid of this host (Linux), None elsewhere or once it is reaped."""
    try:
        return stat_end(Path(f"/proc/{int(pid)}/stat").read_text())
    except OSError:
        return None


def lstart(text):
    """The start time in macOS's `ps -o lstart= -p PID` ("Thu Nov  6 08:45:00 2026"), None when
    ps printed nothing (no such process)."""
    return " ".join(text.split()) or None


def process_start(pid):
    """When process pid started, as this host tells it, or None when there is no such process."""
    if sys.platform == "linux":
        try:
            return stat_start(Path(f"/proc/{int(pid)}/stat").read_text())
        except OSError:
            return None
    return lstart(subprocess.run(["ps", "-o", "lstart=", "-p", str(int(pid))],
                                 capture_output=True, text=True).stdout)


def identity(who, pid):
    """job.json's record of a process: its pid and start time (the boot is the job's boot_id)."""
    return {f"{who}_pid": pid, f"{who}_start": process_start(pid)}


def running(job, who):
    """Whether job.json's keeper, supervisor or launcher still runs: a process of that pid that
    started when the recorded one did, in the same boot. A pid alone may be another process."""
    pid = job.get(f"{who}_pid")
    return (pid is not None and job.get("boot_id") == boot_id()
            and job.get(f"{who}_start") is not None
            and process_start(pid) == job.get(f"{who}_start"))


def ere(text):
    """text as a literal in a POSIX extended regular expression (pgrep's)."""
    return re.sub(r"([.\[\]\\()*+?{}|^$])", r"\\\1", text)


def job_pattern(run_dir):
    """pgrep -f pattern of the job's ranks on a host whose copy of the run is at run_dir."""
    return f"-m trai[n] --out {ere(str(run_dir))}( |$)"


def on_host(address, script, timeout=20):
    """(exit code, stdout) of a shell script run locally or over ssh; (None, "") on a timeout.
    The script travels on stdin, so no pattern in it shows up in a command line."""
    cmd = ["sh", "-s"] if address == "local" else [*SSH, address, "sh -s"]
    try:
        done = subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, done.stdout


def sweep(hosts, exclude=()):
    """KILL every process of the job on every host; the hosts where some are left."""
    skip = " ".join(f"-e {int(pid)}" for pid in (os.getpid(), *exclude))
    left = []
    for address, run_dir in sorted({(h["address"], h["run_dir"]) for h in hosts}):
        script = (f"p={shlex.quote(job_pattern(run_dir))}\n"
                  "for i in 1 2 3 4 5 6; do\n"
                  f'  pids=$(pgrep -u "$(id -u)" -f -- "$p" | grep -v -x {skip})\n'
                  '  [ -z "$pids" ] && exit 0\n'
                  "  kill -KILL $pids 2>/dev/null; sleep 0.5\n"
                  "done\nexit 1\n")
        code, _ = on_host(address, script)
        if code != 0:
            left.append(address)
    return sorted(set(left))


def rank_hosts(text, run_dir):
    """--rank-hosts: [{"rank", "host", "address" ("local" or an ssh address), optional
    "run_dir" (the run's directory on that host; default: DIR)}]."""
    hosts = json.loads(text) if text else [{"rank": 0, "host": "localhost", "address": "local"}]
    for h in hosts:
        h.setdefault("run_dir", str(run_dir))
    return hosts


def descendants(pid):
    """Every process below pid: mpirun's ssh sessions to other hosts can leave its process
    group, and one to a host that is gone would hang on for minutes."""
    out = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid="], capture_output=True,
                         text=True).stdout
    children = {}
    for line in out.splitlines():
        child, parent = map(int, line.split())
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def notify(command, env, run_dir, timeout):
    """Run a notifier, `sh -c command` in run_dir with env added to its environment, in a process
    of its own (a double fork: nothing waits for it, and no zombie is left) that holds none of
    the supervisor's files (the lock: a new job may start at once) and kills the notifier's
    process group after timeout seconds. The job never waits for a notifier, and a failing one
    is only a line of DIR/logs/notify.log, with the notifier's output."""
    try:
        child = os.fork()
    except OSError as error:
        log(f"could not run the notifier: {error}")
        return
    if child:
        os.waitpid(child, 0)
        return
    code = 1
    try:
        os.setsid()  # out of the supervisor's session and process group
        if os.fork() == 0:
            notifier(command, env, run_dir, timeout)
        code = 0
    finally:
        os._exit(code)


def notify_env(job, state, reason):
    """What a notifier is told in its environment: the run, its state, why and its last step."""
    step, steps = job["last_step"] or 0, job["steps"]
    message = f"{job['run']}: {state} ({reason}) at step {step}/{steps or '?'}"
    return {"MLX_CLUSTER_RUN": job["run"], "MLX_CLUSTER_STATE": state,
            "MLX_CLUSTER_REASON": reason, "MLX_CLUSTER_STEP": str(step),
            "MLX_CLUSTER_STEPS": str(steps or ""), "MLX_CLUSTER_MESSAGE": message}


def notify_lost(job, run_dir, reason):
    """Tell the job's notifier (job.json's) that the job is lost: its supervisor and keeper, who
    tell everything else, are dead. Once: the first to find it so (status, for the play's status
    and attach) creates DIR/logs/lost.notified; one who cannot (another user) tells nothing."""
    if not job.get("notify"):
        return
    try:
        os.close(os.open(run_dir / "logs" / "lost.notified", os.O_CREAT | os.O_EXCL))
    except OSError:  # told already, or not ours to tell
        return
    notify(job["notify"], notify_env(job, "lost", reason), run_dir, job["notify_timeout"])


def notifier(command, env, run_dir, timeout):
    """The notifier's life, in notify()'s detached process: none of its caller's files open, nor
    its output (the play reads status's to its end)."""
    os.closerange(3, 1024)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    with open(run_dir / "logs" / "notify.log", "a") as out:
        log(f"{env['MLX_CLUSTER_MESSAGE']}: running {command}", out)
        proc = subprocess.Popen(["sh", "-c", command], cwd=run_dir, env={**os.environ, **env},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log(f"the notifier was still running after {timeout:g} s: killed", out)
        else:
            log(f"the notifier exited with code {code}", out)


def beat_file(host):
    """Where a rank of the rank plan writes its heartbeat, on its host."""
    return Path(host["run_dir"]) / "logs" / f"rank.{host['rank']}.heartbeat"


def by_address(hosts):
    """The rank plan's hosts by ssh address ("local": this host)."""
    found = {}
    for h in hosts:
        found.setdefault(h["address"], []).append(h)
    return found


def read_host(address, files, figures=False):
    """([each heartbeat file's JSON, or None], {pid: ps state}, seconds the host's clock is
    ahead of this one's, {FIGURES' section: its raw text} if figures) from a host, or None when
    ssh cannot reach it."""
    script = "date +%s\n" + "".join(
        f"printf 'hb %s\\n' \"$(cat {shlex.quote(str(f))} 2>/dev/null)\"\n" for f in files
    ) + "ps -A -o pid= -o stat=\n" + (FIGURES if figures else "")
    asked = time.time()
    code, out = on_host(address, script)
    if code is None or (address != "local" and code == 255):
        return None
    out, _, figured = out.partition("--- figures\n")
    clock, *lines = out.splitlines() or [""]
    try:  # whole seconds, read somewhere in the round trip: the 5 s margin of this_launch covers it
        ahead = 0.0 if address == "local" else int(clock) - (asked + time.time()) / 2
    except ValueError:
        ahead = 0.0
    beats = [parse_json(line[3:]) for line in lines[:len(files)]]
    states = dict(line.split(None, 1) for line in lines[len(files):] if line.strip())
    return beats + [None] * (len(files) - len(beats)), states, ahead, sections(figured)


def sections(text):
    """{name: text} of the "--- name" sections of FIGURES' output."""
    found, name = {}, None
    for line in text.splitlines(keepends=True):
        if line.startswith("--- "):
            name = line[4:].strip()
            found[name] = ""
        elif name:
            found[name] += line
    return found


class Watch:
    """One rank's heartbeat as the supervisor saw it, on its own clock (hosts' clocks differ):
    when its time last moved (the process runs) and when its work last moved (phase, step,
    progress: the job advances)."""

    def __init__(self, now):
        self.beat, self.read, self.alive, self.moved = None, None, now, now

    def see(self, beat, now):
        if self.beat is None or beat["time"] != self.beat["time"]:
            self.alive = now
        if self.beat is None or work(beat) != work(self.beat):
            self.moved = now
        self.beat, self.read = beat, now

    def phase(self):
        return self.beat.get("phase") if self.beat else None


def work(beat):
    return beat.get("phase"), beat["step"], beat.get("progress")


def phase_limit(phase, stall, startup):
    """Seconds a rank in phase may go without progress."""
    return startup if phase in STARTUP_PHASES else stall


def judge_watches(watches, now, stall, startup):
    """Why the job must be stopped, or None. A rank is frozen (its process stopped, its host
    hung) when its heartbeat, read again, has not been rewritten for the stall timeout, in any
    phase but exiting (a rank that has ended beats no more); a host that cannot be read is not
    judged frozen. The job is stalled when no rank's work has moved within its phase's limit:
    one rank waiting for another (at a collective, or while rank 0 writes a checkpoint) is no
    stall while the other advances. Once a rank has trained a step of this launch, every rank
    has loaded (a step is a collective): one last read loading, or never read, is judged with
    the stall timeout (its host stopped answering, e.g. powered off, before it was read again)."""
    for rank, w in sorted(watches.items()):
        if w.beat and w.phase() != "exiting" and w.read - w.alive > stall:
            return (f"rank {rank}'s heartbeat not rewritten for {w.read - w.alive:.0f} s "
                    f"({w.phase()}, timeout {stall:g} s)")
    trained = any(w.beat and w.beat.get("start") is not None and w.beat["step"] > w.beat["start"]
                  for w in watches.values())
    limits = {rank: stall if trained and w.phase() in (None, "loading")
              else phase_limit(w.phase(), stall, startup) for rank, w in watches.items()}
    if all(now - w.moved > limits[rank] for rank, w in watches.items()):
        return "no progress on any rank: " + ", ".join(
            f"rank {rank} {w.phase() or 'not started'} for {now - w.moved:.0f} s "
            f"(timeout {limits[rank]:g} s)" for rank, w in sorted(watches.items()))
    return None


def phases_text(phases):
    """" (evaluating)", or each rank's phase where they differ; "" without any."""
    if len(set(phases.values())) > 1:
        return " (" + ", ".join(f"rank {r} {p}" for r, p in phases.items()) + ")"
    return f" ({next(iter(phases.values()))})" if phases else ""


def exit_code(returncode):
    """A shell's exit status for a Popen return code (a signal N is 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def without_hosts(rank_plan, lost):
    """The rank plan on the hosts that are left: ranks fill them in order (mpirun --map-by
    slot), each host keeping its number of slots."""
    kept = [h for h in rank_plan if h["host"] not in lost]
    return [{**h, "rank": rank} for rank, h in enumerate(kept)]


def hostfile_lines(rank_plan):
    """Open MPI hostfile of a rank plan: one `address slots=n` line per host, in rank order."""
    slots = {}
    for h in rank_plan:
        slots[h["mpi_address"]] = slots.get(h["mpi_address"], 0) + 1
    return "".join(f"{address} slots={n}\n" for address, n in slots.items())


def with_option(argv, option, value):
    """argv with the value after `option` replaced (the launcher's --hostfile, -np)."""
    i = argv.index(option)
    return [*argv[: i + 1], str(value), *argv[i + 2:]]


def latest_checkpoint(run_dir):
    """The run's newest checkpoint directory, or None."""
    found = sorted((run_dir / "checkpoints").glob("step_*"))
    return found[-1] if found else None


def checkpoint_step(path):
    return int(path.name[5:]) if path else None


def backoff(restarts, base, cap=BACKOFF_CAP):
    """Seconds to wait before the next restart: base, doubled for each restart in a row after
    which the job did not train past the step it resumed from (progress resets it), at most cap.
    restarts: job.json's, the next one not yet among them."""
    streak = 0
    for restart in reversed(restarts):
        if restart["resumed_at"] is not None:
            break
        streak += 1
    return min(cap, base * 2 ** streak)


class Adopted:
    """The launcher of a supervisor that died, as the next one follows it (Popen's poll and wait).
    It is not that one's child, so it cannot wait() for it: it watches the process (pid and start
    time) and reads the exit code the launcher's sh wrapper wrote to DIR/launcher.exit."""

    def __init__(self, job, exit_file):
        self.job, self.pid, self.exit_file = job, job["launcher_pid"], exit_file

    def poll(self):
        if running(self.job, "launcher"):
            return None
        code = read_json(self.exit_file)
        return code if isinstance(code, int) else -signal.SIGKILL  # killed before it could say

    def wait(self, timeout=None):
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.5)  # on macOS each look runs ps
        return code


class Supervisor:
    def __init__(self, args, run_dir, adopt=False):
        self.args, self.dir = args, run_dir
        self.proc = None
        self.hard_stop = False  # SIGTERM from `stop` past its timeout
        self.unsaved = False  # job.json could not be written: retried at every poll
        # --elastic: {"argv": the launcher's argv, "batch_size": the global batch or null}
        self.elastic = args.elastic
        self.command = ["sh", str(run_dir / "command.sh")]
        me = identity("supervisor", os.getpid())
        if adopt:  # the job a supervisor that died left: as job.json has it
            self.job = {**read_json(run_dir / "job.json"), **me}
            self.hosts = self.job["rank_hosts"]
            if self.job["left_out"]:
                self.command = self.elastic_argv(self.hosts)
            self.t0 = time.monotonic() - (time.time() - self.job["started"])
        else:
            self.hosts = rank_hosts(args.rank_hosts, run_dir)
            self.job = {"run": run_dir.name, "boot_id": boot_id(),
                        **identity("keeper", os.getppid()), **me,
                        "launcher_pid": None, "launcher_start": None, "launched_at": None,
                        "log_offset": 0, "state": "starting", "reason": None, "restarts": [],
                        "last_step": None, "last_step_time": None, "steps": None,
                        "step_seconds": None,
                        "checkpoint_step": None, "started": time.time(), "ended": None,
                        "exit_status": None, "suspect": None, "rank_hosts": self.hosts,
                        "left_out": [], "phases": {}, "hub_model": args.hub_model,
                        # for whoever finds the job lost (notify_lost)
                        "notify": args.notify, "notify_timeout": args.notify_timeout}
            self.t0 = time.monotonic()
        self.update()

    def update(self, **changes):
        """Record the job in job.json. An error there (a full disk) is logged and retried at the
        next poll, never fatal: the job goes on, and job.json is only behind meanwhile."""
        self.job.update(changes)
        try:
            write_atomic(self.dir / "job.json", json.dumps(self.job, indent=1) + "\n")
        except OSError as error:
            if not self.unsaved:
                log(f"could not record the job's state in job.json ({error}); retrying")
            self.unsaved = True
        else:
            if self.unsaved:
                log("recorded the job's state in job.json again")
            self.unsaved = False

    def write(self, name, text):
        """Replace DIR/name; an error there (a full disk) is logged, never fatal."""
        try:
            write_atomic(self.dir / name, text)
        except OSError as error:
            log(f"could not write {name}: {error}")

    # ------------------------------------------------------------------ the whole job

    def run(self, adopt=False):
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "hard_stop", True))
        if adopt:
            log(f"supervising {self.dir} again (pid {os.getpid()}): the supervisor before died "
                f"with the job {self.job['state']}")
            outcome, reason, code = self.adopt()
        else:
            for name in ("stop", "stopped.json", "summary.json", "exit_status"):
                (self.dir / name).unlink(missing_ok=True)  # an earlier launch's
            log(f"supervising {self.dir} (pid {os.getpid()})")
            outcome, reason, code = self.attempt(resume=False)
        while outcome == "restart":
            if len(self.job["restarts"]) >= self.args.max_restarts:
                return self.end("failed", "max_restarts" if self.args.max_restarts else reason,
                                code)
            wait = backoff(self.job["restarts"], self.args.restart_backoff)
            self.record_restart(reason, wait, code)
            outcome, reason, code = self.relaunch(wait, code)
        return self.end(outcome, reason, code)

    def relaunch(self, wait, code):
        """After a back-off of `wait` seconds, the next launch, from the latest checkpoint."""
        log(f"restarting in {wait:g} s from the latest checkpoint")
        if stop := self.wait_or_stop(wait):
            return "stopped", stop, code
        if self.elastic and (refused := self.leave_out_lost_hosts()):
            return "failed", refused, code
        return self.attempt(resume=True)

    def adopt(self):
        """Go on with the job where the supervisor that died left it: follow its launcher if it
        still runs (its exit code is in DIR/launcher.exit if not), or finish the back-off."""
        if self.job["state"] == "restarting":
            restart = self.job["restarts"][-1]
            return self.relaunch(max(0.0, restart["at"] + restart["backoff_s"] - time.time()),
                                 restart["exit_status"])
        if self.job["launcher_pid"] is None:  # it died before the first launch
            return self.attempt(resume=False)
        self.proc = Adopted(self.job, self.dir / "launcher.exit")
        log(f"adopted the launcher (pid {self.proc.pid}), "
            f"{'running' if self.proc.poll() is None else 'ended'}")
        self.watch_launch(self.job["launched_at"])
        return self.follow()

    def leave_out_lost_hosts(self):
        """--elastic: go on without the hosts ssh cannot reach, with the same global batch on
        fewer ranks. Returns the reason to give up instead, or None."""
        remote = {h["host"]: h["address"] for h in self.hosts if h["address"] != "local"}
        lost = [host for host, address in remote.items() if on_host(address, "true", 15)[0] != 0]
        if not lost:
            return None
        plan = without_hosts(self.hosts, lost)
        batch = self.elastic.get("batch_size")
        if not plan or (batch and int(batch) < len(plan)):
            log(f"elastic: cannot go on without {', '.join(lost)}: the global batch {batch} does "
                f"not give each of the {len(plan)} rank(s) left an example")
            return "elastic_batch"
        (self.dir / "hostfile.elastic").write_text(hostfile_lines(plan))
        self.hosts, self.command = plan, self.elastic_argv(plan)
        log(f"elastic: leaving out {', '.join(lost)} (unreachable); going on with {len(plan)} "
            f"rank(s) and the same global batch")
        self.update(rank_hosts=plan, left_out=[*self.job["left_out"], *lost])
        return None

    def elastic_argv(self, plan):
        """The launcher's argv on the hosts of plan (hostfile.elastic)."""
        hostfile = self.dir / "hostfile.elastic"
        return with_option(with_option(self.elastic["argv"], "--hostfile", hostfile), "-np",
                           len(plan))

    def record_restart(self, reason, wait, code):
        latest = latest_checkpoint(self.dir)
        # lost_s: wall time since the work that will be redone was last saved
        saved = latest.stat().st_mtime if latest else self.job["started"]
        self.job["restarts"].append({"at": time.time(), "reason": reason,
                                     "suspect": self.job["suspect"],
                                     "from_step": checkpoint_step(latest) or 0,
                                     "lost_s": round(time.time() - saved, 1),
                                     "backoff_s": wait, "exit_status": code,
                                     "resumed_at": None})
        self.update(state="restarting")

    def wait_or_stop(self, seconds):
        """Sleep, unless a stop is asked for meanwhile: then its reason."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.over_time():
                return "time_limit"
            if self.hard_stop or (self.dir / "stop").exists():
                return self.stop_word()
            time.sleep(min(self.args.poll, 0.5))
        return None

    def stop_word(self):
        words = (self.dir / "stop").read_text().split() if (self.dir / "stop").exists() else []
        return words[0] if words else "user"

    def over_time(self):
        return time.monotonic() - self.t0 > self.args.time_limit

    def end(self, state, reason, code):
        (self.dir / "stop").unlink(missing_ok=True)
        stopped = read_json(self.dir / "stopped.json")
        if state == "stopped" and stopped:  # the step every rank stopped at, checkpoint there
            self.job["last_step"] = stopped["step"]
        self.job["checkpoint_step"] = checkpoint_step(latest_checkpoint(self.dir))
        summary = read_json(self.dir / "summary.json")
        if state == "finished" and summary is not None:  # what rank 0 cannot know
            restarts = self.job["restarts"]
            summary.update(restarts=len(restarts), restart_reasons=[r["reason"] for r in restarts],
                           wall_time_lost_s=round(sum(r["lost_s"] for r in restarts), 1),
                           hosts_left_out=self.job["left_out"])
            self.write("summary.json", json.dumps(summary, indent=1) + "\n")
        self.update(state=state, reason=reason, ended=time.time(), exit_status=code)
        while self.unsaved:  # the next launch judges the cluster by it: wait for space
            time.sleep(5)
            self.update()
        self.write("exit_status", f"{code}\n")  # the launcher's last exit code
        log(f"job {state} ({reason}) at step {self.job['last_step']}; "
            f"{len(self.job['restarts'])} restart(s)")
        self.notify(state, reason)
        return 0 if state != "failed" else 1

    def notify(self, state, reason):
        """Tell --notify's command: the run, its state, why and its last step, in its
        environment; "stalled" is no end state (a restart may follow), the others are."""
        if not self.args.notify:
            return
        log(f"notifying ({state}): output in logs/notify.log")
        notify(self.args.notify, notify_env(self.job, state, reason), self.dir,
               self.args.notify_timeout)

    # ------------------------------------------------------------------ one launch

    def attempt(self, resume):
        """Run command.sh once: ("finished" | "stopped" | "restart", reason, exit code)."""
        for beat in (self.dir / "logs").glob("rank.*.heartbeat"):
            beat.unlink()  # a previous launch's: progress is what this launch writes
        (self.dir / "launcher.exit").unlink(missing_ok=True)
        self.watch_launch(time.time())
        cmd = [*self.command, *(["--resume"] if resume else [])]
        with open(self.dir / "launch.log", "ab") as out:
            offset = out.tell()
            # Through sh, which leaves the exit code in a file: a supervisor that adopts this
            # launcher after this one died cannot wait() for a process that is not its child.
            self.proc = subprocess.Popen(
                ["sh", "-c", LAUNCHER_SHELL, "sh", *cmd],
                cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.update(state="starting", **identity("launcher", self.proc.pid),
                    launched_at=self.launched_wall, log_offset=offset, suspect=None, phases={})
        log(f"launched {shlex.join(cmd)} (pid {self.proc.pid})")
        return self.follow()

    def watch_launch(self, launched_wall):
        """Watch a launch made at launched_wall (time.time()) afresh: no heartbeat seen yet."""
        self.launched, self.launched_wall = time.monotonic(), launched_wall
        self.watches = {h["rank"]: Watch(self.launched) for h in self.hosts}
        self.remote_at = self.read_at = self.launched
        self.beat, self.samples = None, []
        self.done_at, self.stopping = None, None

    def follow(self):
        """Watch the launcher until the job must end or restart: (outcome, reason, exit code)."""
        while True:
            if self.unsaved:
                self.update()
            try:  # returns as soon as the launcher exits: no poll interval added to every job
                code = self.proc.wait(timeout=self.args.poll)
            except subprocess.TimeoutExpired:
                code = None
            self.watch_progress()
            if code is not None:
                return self.judge_exit(exit_code(code))
            if outcome := self.check():
                return outcome

    def check(self):
        """While the launcher runs: an outcome when the job must end, else None."""
        now = time.monotonic()
        if read_json(self.dir / "summary.json") is not None:
            self.done_at = self.done_at or now
            if now - self.done_at > self.args.exit_grace:
                log(f"summary.json was written {self.args.exit_grace:g} s ago but the launcher "
                    "has not exited: stopping it (Open MPI 5 hang after the application "
                    "completes, openpmix/prrte#1839)")
                return "finished", "hung_at_exit", self.kill_job()
            return None
        if self.hard_stop:
            log("asked to stop now (SIGTERM): killing the job")
            return "stopped", self.stop_word(), self.kill_job()
        if self.over_time() and self.stopping is None:
            log(f"time limit of {self.args.time_limit:g} s reached: asking the job to stop")
            self.write("stop", "time_limit\n")
        if self.stopping is None and (self.dir / "stop").exists():
            self.stopping = (self.stop_word(), now)
            log(f"stop requested ({self.stopping[0]}): every rank stops at the next step")
            self.update(state="stopping")
        if self.stopping:
            if now - self.stopping[1] > self.args.stop_grace:
                log(f"the job has not stopped {self.args.stop_grace:g} s after the request: "
                    "killing it")
                return "stopped", self.stopping[0], self.kill_job()
            return None
        # Judged as of the last reading: a supervisor held up after it (a loaded host, a slow
        # disk) would otherwise see the ranks' old work as stalled.
        why = judge_watches(self.watches, self.read_at, self.stall_timeout(),
                            self.args.startup_timeout)
        return self.stalled(why) if why else None

    def watch_progress(self):
        """Every rank's heartbeat: the ranks on this host at every poll, the others' every
        REMOTE_EVERY seconds; rank 0's steps are the job's."""
        now = self.read_at = time.monotonic()
        remote = now >= self.remote_at
        self.remote_at = now + REMOTE_EVERY if remote else self.remote_at
        for address, hosts in by_address(self.hosts).items():
            if address == "local":
                beats, ahead = [read_json(beat_file(h)) for h in hosts], 0.0
            elif not remote or not (read := read_host(address, [beat_file(h) for h in hosts])):
                continue
            else:
                beats, _, ahead, _ = read
            for h, beat in zip(hosts, beats, strict=True):
                if self.this_launch(beat, ahead):
                    self.watches[h["rank"]].see(beat, now)
        beat = self.watches[0].beat
        if beat and beat.get("phase") != "loading" and (
                self.beat is None or beat["step"] != self.beat["step"]):
            self.new_step(beat)
        phases = {str(r): w.phase() for r, w in sorted(self.watches.items()) if w.beat}
        if phases != self.job["phases"]:
            self.update(phases=phases)

    def new_step(self, beat):
        """Rank 0 at another step: the job's step; step times feed the auto stall timeout."""
        previous, self.beat = self.beat, beat
        if previous and beat["step"] > previous["step"]:
            self.samples = [*self.samples[-99:], (beat["time"] - previous["time"])
                            / (beat["step"] - previous["step"])]
        changes = {"last_step": beat["step"], "last_step_time": beat["time"],
                   "steps": beat.get("steps", self.job["steps"]),  # and the ETA of status:
                   "step_seconds": statistics.median(self.samples) if self.samples else None}
        if self.job["state"] == "starting":
            changes["state"] = "running"
        # Past the checkpoint it resumed from: a fast job may finish before a second beat is read.
        restart = self.job["restarts"][-1] if self.job["restarts"] else None
        start = beat.get("start")  # the checkpoint train/ resumed from: the newest intact one
        if restart and restart["resumed_at"] is None and start not in (None, restart["from_step"]):
            log(f"resumed from step {start}, not {restart['from_step']}: newer checkpoints are "
                "broken (rank 0's log says why)")
            restart["from_step"] = start
        if restart and restart["resumed_at"] is None and beat["step"] > restart["from_step"]:
            restart["resumed_at"] = beat["time"]
            log(f"training again at step {beat['step']}")
        self.update(**changes)

    def stall_timeout(self):
        """--stall-timeout, or auto: max(60 s, 20 x the median step time)."""
        if self.args.stall_timeout != "auto":
            return float(self.args.stall_timeout)
        return max(60.0, 20 * statistics.median(self.samples)) if self.samples else 60.0

    def judge_exit(self, code):
        # Complete: exit 0 and a whole summary.json (rank 0 replaces it atomically). A non-zero
        # exit after it (a rank failing at exit) restarts, and that resume has nothing to do.
        if (self.dir / "summary.json").exists() and read_json(self.dir / "summary.json") is None:
            log("summary.json is unreadable: not counted as completed")
            return "failed", "summary_unreadable", code
        if code == 0 and (self.dir / "summary.json").exists():
            return "finished", "completed", code
        stopped = read_json(self.dir / "stopped.json")
        if code == 0 and stopped:
            if self.stopping and self.stopping[0] == "stall":
                return "restart", "stall", code
            return "stopped", stopped.get("reason", "user"), code
        if self.stopping:
            return "stopped", self.stopping[0], code
        suspect = self.failed_rank()
        if code == 0 and suspect is None:  # e.g. resuming a run that had already completed
            return "finished", "completed", code
        if suspect is None:  # a daemon or host lost, not a rank: ask the hosts who is gone
            suspect = self.find_suspect()[0]
        self.sweep()  # the launcher has stopped the ranks it could reach; make sure of the rest
        self.update(suspect=suspect)
        log(f"the launcher exited with code {code} before the job completed: {suspect}")
        return "restart", "rank_failed", code

    def failed_rank(self):
        return launch_suspect(self.job, self.dir)

    # ------------------------------------------------------------------ stalls and stopping

    def stalled(self, why):
        suspect, responsive = self.find_suspect()
        self.update(suspect=suspect)
        log(f"stall: {why} (last step {self.job['last_step']}); suspect: {suspect}")
        self.notify("stalled", f"{why}; suspect: {suspect}")
        code = None
        if responsive:  # every process runs: a stop at the next step may still save a checkpoint
            log("every rank is responsive: asking for a graceful stop first")
            self.write("stop", "stall\n")
            self.stopping = ("stall", time.monotonic())
            deadline = time.monotonic() + min(self.args.stop_grace, 30)
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            (self.dir / "stop").unlink(missing_ok=True)
        code = self.kill_job()
        return "restart", "stall", code

    def find_suspect(self):
        """("rank R on HOST: why", every rank responsive) from each rank's heartbeat and the
        state of its process; evidence, strongest first: host unreachable, process stopped
        (state T) or gone, no heartbeat since this launch, lowest step."""
        evidence = []  # (strength, -step, rank, why)
        for address, hosts in by_address(self.hosts).items():
            read = read_host(address, [beat_file(h) for h in hosts])
            if read is None:
                evidence += [(4, 0, h["rank"], f"host {address} unreachable over ssh")
                             for h in hosts]
                continue
            beats, states, ahead, _ = read
            for h, beat in zip(hosts, beats, strict=True):
                evidence.append(self.judge_rank(h["rank"], beat if self.this_launch(beat, ahead)
                                                else None, states, address == "local"))
        steps = [-e[1] for e in evidence if e[0] == 0]
        if steps and min(steps) < max(steps):
            evidence = [(1, e[1], e[2], f"{e[3]}, behind the others (at step {max(steps)})")
                        if e[0] == 0 and -e[1] == min(steps) else e for e in evidence]
        strength, _, rank, why = max(evidence, key=lambda e: (e[0], e[1], -e[2]))
        return f"rank {rank} on {host_of(self.hosts, rank)}: {why}", strength <= 1

    def this_launch(self, beat, ahead):
        """Whether a heartbeat was written since this launch (not a previous one's, left on a
        host), by the clock of its host, ahead seconds ahead of this one's."""
        return beat is not None and beat["time"] >= self.launched_wall + ahead - 5

    def judge_rank(self, rank, beat, states, local):
        if not beat:
            return 2, 0, rank, "no heartbeat since this launch"
        pid, step = str(beat["pid"]), beat["step"]
        state = states.get(pid)
        if state is None:
            return 3, -step, rank, f"process {pid} is gone (last at step {step})"
        # A zombie here whose launcher died too (the kernel, short of memory, killed both): how
        # it ended is still on record (Linux), where the launcher would have said it.
        ended = state[0] == "Z" and local and zombie_end(pid)
        if ended:
            return 3, -step, rank, (f"{ended} at step {step} (process {pid}, unreaped)"
                                    + (KILLED_HINT if ended == "killed by signal 9" else ""))
        if state[0] in "TZ":
            what = "stopped" if state[0] == "T" else "a zombie"
            return 3, -step, rank, f"process {pid} is {what} (state {state.strip()}, step {step})"
        return 0, -step, rank, f"at step {step}"

    def kill_job(self):
        """TERM the launcher's process group, KILL it after KILL_AFTER s, then KILL whatever of
        the job is left on any host. Returns the launcher's exit code."""
        tree = descendants(self.proc.pid)
        if self.proc.poll() is None:
            log(f"terminating the launcher's process group {self.proc.pid}")
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(KILL_AFTER)
            except subprocess.TimeoutExpired:
                log("still running: KILL")
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        code = exit_code(self.proc.wait())
        for pid in tree:  # what left the group (see descendants)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.sweep()
        return code

    def sweep(self):
        left = sweep(self.hosts)
        if left:
            log(f"WARNING: processes of the job may be left on {', '.join(left)}")


# ---------------------------------------------------------------------- the commands


def start(args):
    run_dir = args.run_dir.resolve()
    for private in (run_dir.parent, run_dir, run_dir / "logs"):  # runs/, the run, its logs
        private.mkdir(mode=0o700, exist_ok=True)
    if args.write_command:
        write_atomic(run_dir / "command.sh", sys.stdin.read())
        (run_dir / "command.sh").chmod(0o755)
    if not (run_dir / "command.sh").is_file():
        print(f"supervisor: error: {run_dir}/command.sh does not exist", file=sys.stderr)
        return 2
    lock = os.open(args.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held = read_json(args.lock) or {}
        other = Path(held.get("run_dir", "?"))
        me = shlex.quote(sys.argv[0])
        print(f"supervisor: run {held.get('run', '?')} is already running (keeper pid "
              f"{held.get('pid', '?')}, {other}); follow it: {me} status --runs-dir "
              f"{shlex.quote(str(other.parent))}; stop it: {me} stop --run-dir "
              f"{shlex.quote(str(other))}", file=sys.stderr)
        return LOCKED
    ready_r, ready_w = os.pipe()
    if child := os.fork():  # the caller: wait for the daemon's pid, print it, return
        os.close(ready_w)
        os.waitpid(child, 0)
        pid = os.read(ready_r, 32).decode().strip()
        if not pid:
            print(f"supervisor: error: the daemon did not start; see {run_dir}/supervisor.log",
                  file=sys.stderr)
            return 1
        print(f"started {pid}", flush=True)
        return 0
    os.setsid()  # no controlling terminal; survives the caller's session (ssh) ending
    if os.fork():
        os._exit(0)
    os.close(ready_r)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(run_dir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd, target in ((0, null), (1, out), (2, out)):
        os.dup2(target, fd)
    low, high = sorted((lock, ready_w))  # nothing else of the caller's (Ansible's pipes) stays
    os.closerange(3, low)
    os.closerange(low + 1, high)
    os.closerange(high + 1, 1024)
    # The lock belongs to the open file both processes share: held while this daemon lives.
    os.ftruncate(lock, 0)
    os.write(lock, json.dumps({"run": run_dir.name, "run_dir": str(run_dir),
                               "pid": os.getpid()}).encode())
    os._exit(keep(args, run_dir, ready_w))


def keep(args, run_dir, ready_w):
    """The keeper: the daemon `start` leaves, parent of the job's supervisor, holding the lock
    with it (one open file: it holds while either lives). A supervisor that dies without
    recording the job's end (kill -9, a crash) is started again at once and adopts the job that
    runs on (Supervisor.adopt), so no process of the launch host loses a run by dying. Adopting
    the running job, rather than ending it with its supervisor and resuming it from its latest
    checkpoint, redoes no steps and no model load, and needs nothing macOS lacks (a rank cannot
    be made to die with its supervisor there: no prctl). Returns the last supervisor's exit code."""
    adopt, deaths = False, []
    while True:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = supervise(args, run_dir, adopt, ready_w)
            except BaseException as error:
                log(f"supervisor crashed: {error!r}")
                traceback.print_exc()
            finally:
                os._exit(code)
        if ready_w is not None:
            os.close(ready_w)
            ready_w = None  # told once, by the first supervisor
        status = os.waitpid(pid, 0)[1]
        job = read_json(run_dir / "job.json")
        if job is None or job["state"] in TERMINAL:
            return os.waitstatus_to_exitcode(status) if job else 1
        deaths = [t for t in deaths if time.monotonic() - t < KEEPER_WINDOW] + [time.monotonic()]
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit code {os.waitstatus_to_exitcode(status)}")
        if len(deaths) > KEEPER_RESTARTS:
            log(f"the supervisor (pid {pid}) died ({how}), the {len(deaths)}th time in "
                f"{KEEPER_WINDOW} s: giving up; the job is lost (stop it with supervisor.py stop)")
            return 1
        log(f"the supervisor (pid {pid}) died ({how}) with the job {job['state']}: starting "
            "another, which adopts the job")
        adopt = True
        time.sleep(1)


def supervise(args, run_dir, adopt, ready_w):
    """A supervisor's life, in the keeper's child: the job's, or what is left of it."""
    supervisor = Supervisor(args, run_dir, adopt)
    if ready_w is not None:
        os.write(ready_w, str(os.getppid()).encode())  # the keeper's pid: `start` prints it
        os.close(ready_w)
    return supervisor.run(adopt)


def owner_error(run_dir):
    """Why this user cannot act on run_dir's job (another user's), or None."""
    uid = run_dir.stat().st_uid
    if os.geteuid() in (0, uid):
        return None
    with contextlib.suppress(KeyError):
        uid = f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    return f"{run_dir} belongs to {uid}, not to you: run this as that user"


def stop(args):
    run_dir = args.run_dir.resolve()
    if run_dir.is_dir() and (error := owner_error(run_dir)):
        print(f"supervisor: error: {error}", file=sys.stderr)
        return 2
    job = read_json(run_dir / "job.json")
    if not job:
        print(f"supervisor: error: no supervised job in {run_dir} (no job.json)", file=sys.stderr)
        return 2
    if job["state"] not in TERMINAL:
        write_atomic(run_dir / "stop", f"{args.reason}\n")
        print(f"asked {job['run']} to stop ({args.reason}) at its next step, with a checkpoint; "
              f"killed if it has not stopped {args.stop_grace:g} s from now", flush=True)
        job = wait_ended(run_dir, args.stop_grace)
        if job["state"] not in TERMINAL and running(job, "supervisor"):
            os.kill(job["supervisor_pid"], signal.SIGTERM)  # the supervisor kills the job now
            job = wait_ended(run_dir, 30)
        if job["state"] not in TERMINAL:  # no supervisor: kill the job from here
            for who, kill in (("keeper", os.kill), ("supervisor", os.kill),
                              ("launcher", os.killpg)):
                if running(job, who):  # never a pid that now names another process
                    with contextlib.suppress(ProcessLookupError):
                        kill(job[f"{who}_pid"], signal.SIGKILL)
            stopped = read_json(run_dir / "stopped.json")
            job.update(state="stopped", reason=args.reason, ended=time.time(),
                       last_step=stopped["step"] if stopped else job["last_step"],
                       checkpoint_step=checkpoint_step(latest_checkpoint(run_dir)))
            write_atomic(run_dir / "job.json", json.dumps(job, indent=1) + "\n")
        (run_dir / "stop").unlink(missing_ok=True)  # else command.sh run by hand stops at once
    left = sweep(job["rank_hosts"], exclude=[job["supervisor_pid"]])
    print(f"{job['run']}: {job['state']} ({job['reason']}) at step {job['last_step']}; "
          f"{checkpoint_words(job)}"
          + (f"; processes may be left on {', '.join(left)}" if left else ""))
    return 1 if left else 0


def checkpoint_words(job):
    """Where a resume of the ended job starts."""
    step = job.get("checkpoint_step")
    if step is None:
        return "no checkpoint: a resume starts from step 0"
    return "checkpoint there" if step == job["last_step"] else f"latest checkpoint at step {step}"


def wait_ended(run_dir, seconds):
    """job.json once it records the job's end, no process of the job runs any more, or seconds
    have passed."""
    deadline = time.monotonic() + seconds
    while True:
        job = read_json(run_dir / "job.json")
        if (job["state"] in TERMINAL or time.monotonic() > deadline
                or not any(running(job, who) for who in ("keeper", "supervisor", "launcher"))):
            return job
        time.sleep(0.2)


def state_of(job, run_dir):
    """(state, reason) of a job: job.json's, or lost when neither its supervisor nor its keeper
    runs any more (the host restarted, or both were killed: under memory pressure Linux's OOM
    killer goes on killing while a killed rank's memory is still being freed). What the
    launcher's output said of a failed rank is part of the reason: it outlived them."""
    if job["state"] in TERMINAL or running(job, "supervisor") or running(job, "keeper"):
        return job["state"], job["reason"]
    if job.get("boot_id") != boot_id():
        return "lost", "the launch host restarted since (another boot id)"
    suspect = None if running(job, "launcher") else launch_suspect(job, run_dir)
    return "lost", "its supervisor is gone" + (f"; the launcher said: {suspect}" if suspect else "")


def rank_beats(rank_plan):
    """(ranks, hosts): each rank's heartbeat as its host has it, [{"rank", "host", "reached"
    (false: ssh could not reach the host), "phase", "step", "age" (seconds since it was written,
    by its host's clock)}], phase, step and age None without one; and each host's figures,
    [{"host", "mpi_address", "reached", "figures": {FIGURES' section: raw text}}]."""
    ranks, figures = [], []
    for address, hosts in by_address(rank_plan).items():
        read = read_host(address, [beat_file(h) for h in hosts], figures=True)
        beats, _, ahead, found = read or ([None] * len(hosts), {}, 0.0, {})
        figures.append({"host": hosts[0]["host"], "mpi_address": hosts[0].get("mpi_address"),
                        "reached": read is not None, "figures": found})
        for h, beat in zip(hosts, beats, strict=True):
            beat = beat or {}
            age = time.time() + ahead - beat["time"] if "time" in beat else None
            ranks.append({"rank": h["rank"], "host": h["host"], "reached": read is not None,
                          "phase": beat.get("phase"), "step": beat.get("step"),
                          "age": None if age is None else round(max(age, 0.0), 1)})
    return sorted(ranks, key=lambda r: r["rank"]), figures


def metric_points(path, most=METRIC_POINTS):
    """metrics.jsonl's records, the train ones thinned evenly to at most `most` (the last kept):
    what a page draws, in one read of the launch host, however long the run."""
    records = [parse_json(line) for line in read_lines(path)]
    records = [r for r in records if isinstance(r, dict)]
    train = [r for r in records if r.get("kind") == "train"]
    every = -(-len(train) // most)
    kept = {id(r) for r in train[::every][:most - 1] + train[-1:]} if train else set()
    return [r for r in records if r.get("kind") != "train" or id(r) in kept]


def read_lines(path):
    try:
        return Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []


def details(job, run_dir):
    """What status --run adds to a run's row: its ranks, its hosts (rank_beats) and metrics."""
    ranks, hosts = rank_beats(job["rank_hosts"])
    return {"ranks": ranks, "hosts": hosts, "metrics": metric_points(run_dir / "metrics.jsonl")}


def status(args):
    rows = []
    found = args.runs_dir.iterdir() if args.runs_dir.is_dir() else []  # no run yet
    for run_dir in sorted(p for p in found if p.is_dir() and (args.run is None
                                                              or p.name in args.run)):
        job = read_json(run_dir / "job.json")
        if job:
            state, reason = state_of(job, run_dir)
            if state == "lost":
                notify_lost(job, run_dir, reason)
            # A lost job whose launcher runs on still holds its hosts: no other job starts.
            rows.append({**job, "state": state, "reason": reason,
                         "launcher_running": running(job, "launcher")}
                        | (details(job, run_dir) if args.run and args.json else {}))
    if args.json:
        print(json.dumps(rows, indent=1))
    for job in [] if args.json else rows:
        phases = "" if job["state"] in (*TERMINAL, "lost") else phases_text(job.get("phases", {}))
        print(f"{job['run']}  {job['state']}  step {job['last_step'] or 0}/{job['steps'] or '?'}"
              f"{phases}  restarts {len(job['restarts'])}  {job['reason'] or ''}".rstrip())
    return 0


def seconds(text):
    value = float(text)
    if value < 0:
        raise ValueError
    return value


def shown(value, limit=40):
    """A value as a message quotes it: cut short, so the message stays one line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


def whole(flag, least, most, auto=False):
    """argparse type of a job option: an integer from least to most (or auto), else an error
    that says so and how to fix it. The job's options are train.yml's (its request table passes
    them on): the bounds are far beyond a real run, low enough to catch a slip."""
    def parse(text):
        if auto and text == "auto":
            return text
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not least <= value <= most:
            what = "auto or a number of seconds" if auto else "an integer"
            fix = f"e.g. {flag}={max(least, 1)}0" + (", or leave it out (auto)" if auto else "")
            raise argparse.ArgumentTypeError(
                f"{shown(text)} is not {what} from {least} to {most} — {fix}")
        return value
    return parse


def command(flag):
    """argparse type of a shell command: one a shell can split into words, else an error that
    says so and how to fix it."""
    def parse(text):
        try:
            words, why = shlex.split(text), "is an empty command"
        except ValueError as error:
            words, why = None, f"cannot be split like a shell would ({error})"
        if not words:
            raise argparse.ArgumentTypeError(
                f"{shown(text)} {why} — e.g. {flag}='ntfy publish my-runs "
                "\"$MLX_CLUSTER_MESSAGE\"', or leave it out")
        return text
    return parse


def add_job_options(p):
    """The options of a job that train.yml's request sets, each with its one check and default."""
    p.add_argument("--time-limit", type=whole("--time-limit", 1, YEAR), default=DAY, metavar="S",
                   help="stop the job (reason time_limit) after S seconds in all "
                   "(default: %(default)s)")
    p.add_argument("--stall-timeout", type=whole("--stall-timeout", 10, DAY, auto=True),
                   default="auto", metavar="S|auto",
                   help="no new step or evaluation batch for S seconds on any rank is a stall, "
                   "and a rank whose heartbeat is not rewritten for S seconds is frozen; auto: "
                   "max(60, 20 x the median step time) (default: %(default)s)")
    p.add_argument("--startup-timeout", type=whole("--startup-timeout", 10, DAY), default=1800,
                   metavar="S", help="the stall timeout of a model load (or download) and of a "
                   "checkpoint write (default: %(default)s)")
    p.add_argument("--max-restarts", type=whole("--max-restarts", 0, MAX_RESTARTS), default=2,
                   metavar="N", help=f"automatic restarts, 0 to {MAX_RESTARTS} "
                   "(default: %(default)s)")
    p.add_argument("--restart-backoff", type=whole("--restart-backoff", 0, BACKOFF_CAP),
                   default=10, metavar="S", help="wait before a restart, doubling after each "
                   f"restart that trained no step, at most {BACKOFF_CAP} s "
                   "(default: %(default)s)")
    p.add_argument("--stop-grace", type=whole("--stop-grace", 10, DAY), default=STOP_GRACE,
                   metavar="S", help="kill a job that has not stopped S seconds after DIR/stop "
                   "(default: %(default)s)")
    p.add_argument("--elastic", type=json.loads, metavar="JSON",
                   help='{"argv": the launcher\'s argv, '
                   '"batch_size": N or null}: on a restart, leave out hosts ssh cannot reach and '
                   "go on with the same global batch on the ranks left (mpirun only)")
    p.add_argument("--notify", type=command("--notify"), metavar="COMMAND",
                   help="at each stall and when the job ends, run `sh -c COMMAND` in DIR "
                   "(output: DIR/logs/notify.log; killed after --notify-timeout s) with "
                   "MLX_CLUSTER_RUN, _STATE (stalled, finished, stopped, failed; lost, once, "
                   "from the first status that finds the supervisor and its keeper dead), "
                   "_REASON, _STEP, _STEPS and _MESSAGE in its environment; the job never waits "
                   "for it")


def settle(argv):
    """The job's options in argv (start's flags) with the defaults of those not given, as
    `check` prints them; the first invalid one raises argparse.ArgumentError, naming its flag
    and the fix (train.yml's preflight calls this with the request's options)."""
    p = argparse.ArgumentParser(prog="supervisor.py check", add_help=False, exit_on_error=False)
    add_job_options(p)
    return vars(p.parse_args(argv))


def check(args):
    print(json.dumps({name: getattr(args, name) for name in settle([])}))
    return 0


def parser():
    p = argparse.ArgumentParser(prog="supervisor.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("start", help="start and supervise the job in the background")
    s.add_argument("--run-dir", type=Path, required=True, help="the run's directory, with "
                   "command.sh; DIR/logs/rank.0.heartbeat is rank 0's heartbeat")
    s.add_argument("--lock", type=Path, required=True, help="one job at a time per lock file")
    add_job_options(s)
    s.add_argument("--exit-grace", type=seconds, default=60, metavar="S", help="stop a launcher "
                   "still running S seconds after summary.json (default: 60)")
    s.add_argument("--rank-hosts", metavar="JSON", help='[{"rank": 0, "host": NAME, "address": '
                   '"local" or an ssh address, "run_dir": optional}, ...] (default: rank 0, local)')
    s.add_argument("--write-command", action="store_true", help="first write command.sh into "
                   "DIR from stdin (one step for train.yml: directories, command and start)")
    s.add_argument("--hub-model", type=json.loads, metavar="JSON", help='{"repo": the Hugging '
                   'Face model, "revision": the commit train.yml staged}, kept in job.json: a '
                   "resume stages the same weights")
    s.add_argument("--poll", type=seconds, default=1, metavar="S", help=argparse.SUPPRESS)
    s.add_argument("--notify-timeout", type=seconds, default=NOTIFY_TIMEOUT, metavar="S",
                   help="kill a notifier still running after S seconds (default: %(default)s)")
    s.set_defaults(func=start)
    s = sub.add_parser("stop", help="stop the job at a step with a checkpoint; exit 0 when "
                       "nothing of it is left")
    s.add_argument("--run-dir", type=Path, required=True)
    s.add_argument("--reason", default="user", help="a word recorded as the reason (default: user)")
    # Any grace: train.yml's was checked with the job's options (check) before the job started.
    s.add_argument("--stop-grace", type=seconds, default=STOP_GRACE, metavar="S",
                   help="kill the job if it has not stopped after S seconds (default: %(default)s)")
    s.set_defaults(func=stop)
    s = sub.add_parser("status", help="one line per run: name, state, step/steps, restarts, reason")
    s.add_argument("--runs-dir", type=Path, required=True)
    s.add_argument("--json", action="store_true")
    s.add_argument("--run", metavar="NAME", action="append", help="only this run (repeated: "
                   "these runs); with --json, each rank's heartbeat (its host, phase, step and "
                   "age; other hosts' over ssh), each host's figures and the metrics too")
    s.set_defaults(func=status)
    s = sub.add_parser("check", help="the job's options (start's) settled with their defaults, "
                       "as JSON; starts nothing")
    add_job_options(s)
    s.set_defaults(func=check)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
