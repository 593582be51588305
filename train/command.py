"""`python -m train --command CMD`: any program as a rank, under the same launch and supervision.

The rank keeps its `python -m train --out DIR` command line (the supervisor finds and stops a
job's processes by it) and runs CMD in DIR, in a process group of its own, with the Python
environment's bin/ first on PATH. {model} and {data} in CMD become the absolute paths of
--model / --data. Every chunk of CMD's output is progress: it goes to this rank's log and moves
the heartbeat on (phase "loading" until the first output, then "training", a step per line: a
program silent for the stall timeout after its first output is stalled). A signal to this process
goes on to CMD's group; if this process dies, even by SIGKILL, a guard process ends the group,
so nothing of the job outlives its rank. A stop (DIR/stop) sends CMD's group TERM. Rank 0
writes summary.json when CMD succeeds.
"""

import contextlib
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import durable, report

PLACEHOLDERS = ("model", "data")
# What mpirun / mlx.launch tell each process about its place in the world.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "MLX_RANK")
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MLX_WORLD_SIZE")
TERM_GRACE = 3  # seconds between TERM and KILL of the program's group
# Runs in its own session: when the rank's end of the pipe closes, however the rank died, the
# program's group gets TERM, then KILL.
GUARD = f"""
import os, signal, sys, time
line = sys.stdin.readline()  # the program's group, once it has started
if not line:
    sys.exit()
group = int(line)
sys.stdin.read()
for sig in (signal.SIGTERM, signal.SIGKILL):
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        break
    time.sleep({TERM_GRACE})
"""


def argv(command, paths):
    """CMD split like a shell would, with {model} / {data} replaced in each word."""
    words = shlex.split(command)
    for name, value in paths.items():
        words = [w.replace("{" + name + "}", str(value)) for w in words]
    return words


def missing_placeholders(command, paths):
    """The placeholders CMD uses that have no value (their option was not given)."""
    return [n for n in PLACEHOLDERS if "{" + n + "}" in command and paths.get(n) is None]


def _env_int(names, default):
    return next((int(os.environ[n]) for n in names if n in os.environ), default)


def run(args):
    rank, size = _env_int(RANK_VARIABLES, 0), _env_int(SIZE_VARIABLES, 1)
    model = Path(args.model) if args.model else None  # a directory, or a repo id as given
    paths = {"model": model.resolve() if model and model.exists() else args.model,
             "data": args.data and args.data.resolve()}
    words = argv(args.command, paths)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
               f"{os.environ.get('PATH', '')}")
    heartbeat = report.Heartbeat(args.heartbeat, rank, None)
    report.say(f"rank {rank} of {size}: {shlex.join(words)}")
    # The guard and the handlers are in place before the program starts: a signal or a death
    # of this process at any moment after it started still reaches the program's group.
    alive_r, alive_w = os.pipe()
    subprocess.Popen([sys.executable, "-c", GUARD], stdin=alive_r, start_new_session=True)
    os.close(alive_r)  # alive_w stays open in this process only: EOF when it ends
    program, pending = None, []

    def forward(signum, _frame):
        if program is None:  # still starting: forwarded as soon as it has started
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(program.pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    start = time.monotonic()
    try:
        program = subprocess.Popen(words, cwd=out, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    except OSError as e:
        report.say(f"rank {rank}: cannot run {words[0]}: {e}")
        return 127
    os.write(alive_w, f"{program.pid}\n".encode())
    for signum in pending:
        forward(signum, None)

    progress, stopping = 0, False
    while True:
        # DIR/stop (the supervisor's stop or time limit): the program cannot stop at a step of
        # ours, so it is asked to end (TERM) as a user's Ctrl-C would.
        if not stopping and (out / "stop").exists():
            stopping = True
            report.say(f"rank {rank}: stop requested, sending TERM to the program")
            forward(signal.SIGTERM, None)
        if not select.select([program.stdout], [], [], 1)[0]:
            continue
        if not (chunk := os.read(program.stdout.fileno(), 65536)):
            break
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        progress += chunk.count(b"\n") + chunk.count(b"\r")
        heartbeat.at("training", progress)
    code = program.wait()
    code = 128 - code if code < 0 else code  # killed by a signal: the shell's convention
    seconds = time.monotonic() - start
    heartbeat.at("exiting", progress)
    heartbeat.beat()
    report.say(f"rank {rank}: exited with code {code} after {seconds:.1f} s")
    if code == 0 and rank == 0:
        summary = {"command": args.command, "argv": words, "world_size": size,
                   "output_lines": progress, "wall_time_s": seconds}
        # Last: train.yml takes summary.json as the sign that the job is complete.
        durable.write_atomic(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    os.close(alive_w)
    return code
