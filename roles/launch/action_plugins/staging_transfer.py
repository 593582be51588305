"""Send the staged inputs (tasks/stage_inputs.yml) and show how far the transfers are.

Ansible prints a task's result only when the task ends: gigabytes over a laptop's Wi-Fi would be
minutes of silence. This action runs on the launch host's turn. It first shows, for each host, the
copies that differ there and why (`names`: {host: lines}); in check mode, that is all. Then the
controller's rsyncs to the launch host (`sends`, one after another, here on the controller), while
the launch host passes each file on to the others as it arrives (`relay`: the command that runs
files/staging.py relay there, started with the sends, told "done" when they succeeded), then runs
its rsyncs to the others of what the relay did not deliver whole (all at once; not after a failed
send). The relay's stdin is a pipe this process holds open until it ends: when the play is
interrupted (Ctrl-C, a killed controller), the pipe closes and the launch host kills its transfers.
While they run, every `interval` seconds it reads what arrived on each receiving host (`watch`:
filter_plugins/staging.py staging_watch_commands) and prints a line per host and input: the bytes
there of the input's size, the rate since the last reading and the time left. A stage shorter than
the interval reads nothing. The results are concurrent_commands' (item, rc, stdout, stderr), one
per transfer; a failed transfer fails the action, naming it (transfer_errors). Then each host with
a copy the relay did not record whole as the controller's (an rsync wrote it: the usual launch has
none) hashes its copies and records their manifests (`watch`'s record command), all at once; a copy
that is not the controller's fails the action, naming it (record_errors). `verified`: {host: the
inputs the relay recorded there}; `recorded`: the hosts hashed after.
"""

import contextlib
import json
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

display = Display()
staging = load("roles/launch/files/staging.py")

MIB = 1 << 20
# Seconds a reading may take (an ssh login and a Python start on a busy host).
READ_TIMEOUT = 20
# Python runs a signal's handler in the main thread only, once that thread runs Python code again,
# and the kernel may hand a Ctrl-C to a thread that reads a host's progress: a main thread blocked
# in the relay's read would run Ansible's handler (which ends the worker and its transfers) only
# when every transfer had ended. The main thread waits in slices of this many seconds instead.
SLICE = 0.2


def _duration(seconds):
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def progress_line(host, rel, source, done, total, rate=None):
    """A line of a transfer's progress (rate: bytes a second since the last reading; None on
    the first reading)."""
    line = f"[{host}] {rel} from {source}: {done / MIB:.1f} of {total / MIB:.1f} MiB"
    if rate is not None:
        line += f", {rate / MIB:.1f} MiB/s"
        if rate > 0:
            line += f", {_duration(max(0, total - done) / rate)} left"
    return line


def transfer_errors(results):
    """A message per failed transfer of the results."""
    return [f"{r['item']['host']}: sending {r['item']['rel']} from {r['item']['from']} failed "
            f"(rsync exit {r['rc']}): {(r.get('stderr') or r.get('msg') or '').strip()[-500:]}"
            for r in results if r["rc"] != 0]


def record_errors(recorded, manifests, host, skipped=None):
    """A message per input whose copy, hashed on host after the transfer, is not the
    controller's (recorded: what files/staging.py record printed there; skipped: {rel: its files
    that host is not sent})."""
    errors = []
    for rel, got in sorted(recorded.items()):
        expected = manifests[rel]
        left = set((skipped or {}).get(rel, ()))
        differ = sorted(name for name in set(expected) | set(got)
                        if name not in left and expected.get(name) != got.get(name))
        if differ:
            errors.append(f"{host}: {rel} differs from the controller's after the transfer: "
                          f"{', '.join(differ)} — check the disk and the link, then run "
                          "train.yml again")
    return errors


def record(watch, verified, manifests):
    """(the hosts that hashed their copies, the errors) of running `record` at once on each
    host of watch with an input the relay did not record there (verified)."""
    hosts = sorted(h for h, w in watch.items() if set(w["totals"]) - set(verified.get(h, ())))

    def run(host):
        done = subprocess.run(watch[host]["record"], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            return [f"{host}: hashing the copies sent failed (exit {done.returncode}): "
                    f"{done.stderr.strip()[-500:]}"]
        return record_errors(json.loads(done.stdout), manifests, host, watch[host]["skipped"])

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return hosts, [error for errors in pool.map(run, hosts) for error in errors]


def _run(command):
    """command's result on the controller, in concurrent_commands' shape; the private directory
    it writes into made first (prepare: [work dir, rel], to a launch host Ansible runs on
    locally)."""
    if command.get("prepare"):
        staging.prepare(*command["prepare"])
    done = subprocess.run(command["argv"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, check=False)
    return {"item": command["item"], "cmd": command["argv"], "rc": done.returncode,
            "stdout": done.stdout.rstrip("\n"), "stderr": done.stderr.rstrip("\n")}


@contextlib.contextmanager
def _relaying(argv, host):
    """Runs the launch host's relay (files/staging.py relay, by argv; none when argv is empty)
    while the block sends; the block's value: a function that tells it the sends succeeded and
    returns what it printed once it ended ({results, verified}). Left otherwise, its stdin
    closes: it ends at once."""
    with tempfile.TemporaryFile() as errors:
        relay = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=errors) if argv else None

        def finish():
            if not relay:
                return {"results": [], "verified": {}}
            with contextlib.suppress(BrokenPipeError):
                relay.stdin.write(b"done\n")
                relay.stdin.flush()
            out = relay.stdout.read()
            if relay.wait() != 0:
                errors.seek(0)
                raise AnsibleActionFail(f"the transfers from {host} did not run: "
                                        f"{errors.read().decode(errors='replace').strip()[-2000:]}")
            return json.loads(out)

        try:
            yield finish
        finally:
            if relay:
                with contextlib.suppress(BrokenPipeError):
                    relay.stdin.close()
                relay.wait()


class Progress:
    """Reads the receiving hosts every interval seconds in a thread until stopped. A reading
    still under way when the stage ends is ended, not waited for: the stage takes no longer than
    its transfers."""

    def __init__(self, watch, source, interval):
        self.watch, self.source, self.interval = watch, source, interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.reading, self.lock = set(), threading.Lock()

    def __enter__(self):
        if self.watch:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        with self.lock:
            self.stopped.set()
            for reader in self.reading:
                reader.kill()
        if self.thread.is_alive():
            self.thread.join()

    def read(self, argv):
        """{rel: bytes there} as the host's `staging.py received` printed it; None if it did not
        (or the stage ended first)."""
        with self.lock:
            if self.stopped.is_set():
                return None
            reader = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
            self.reading.add(reader)
        try:
            out, _ = reader.communicate(timeout=READ_TIMEOUT)
            return json.loads(out) if reader.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError):
            return None
        finally:
            reader.kill()
            reader.wait()
            with self.lock:
                self.reading.discard(reader)

    def _loop(self):
        before = {}
        with ThreadPoolExecutor(max_workers=len(self.watch)) as pool:
            while not self.stopped.wait(self.interval):
                hosts = sorted(self.watch)
                found = list(pool.map(lambda h: self.read(self.watch[h]["argv"]), hosts))
                now = time.monotonic()
                for host, received in zip(hosts, found, strict=True):
                    for rel, total in self.watch[host]["totals"].items() if received else ():
                        done = received.get(rel, 0)
                        then = before.get((host, rel))
                        rate = (done - then[1]) / (now - then[0]) if then else None
                        before[host, rel] = (now, done)
                        if not self.stopped.is_set():
                            display.display(progress_line(host, rel, self.source, done, total,
                                                          rate))


def interruptible(call):
    """call()'s value, called in a thread of its own while this, the main thread, waits for it in
    slices: a Ctrl-C's handler runs within one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(call)
        while True:
            with contextlib.suppress(TimeoutError):
                return future.result(timeout=SLICE)


def transfer(args, host):
    """(the results of the sends and the relay's transfers, what the relay verified) for the
    launch host (args: the action's), with their progress."""
    watch = args.get("watch") or {}
    interval = float(args.get("interval", 5))
    results, relayed = [], {"results": [], "verified": {}}
    mine = {h: w for h, w in watch.items() if h == host}
    others = {h: w for h, w in watch.items() if h != host}
    # The others receive from the launch host from the start: the relay passes on each file.
    with Progress(others, host, interval), _relaying(args.get("relay") or [], host) as finish:
        with Progress(mine, "the controller", interval):
            results += [_run(command) for command in args.get("sends") or []]
        if all(r["rc"] == 0 for r in results):
            relayed = finish()
    return results + relayed["results"], relayed["verified"]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True  # it names what differs, and sends nothing
    _VALID_ARGS = frozenset(("names", "sends", "relay", "watch", "interval", "manifests"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        names = args.get("names") or {}
        for host in sorted(names):
            for line in names[host]:
                display.display(f"[{host}] {line}")
        if self._task.check_mode:
            result.update(changed=bool(names))
            return result
        sends = args.get("sends") or []
        if sends and shutil.which(sends[0]["argv"][0]) is None:
            raise AnsibleActionFail(
                f"{sends[0]['argv'][0]} is missing on the controller, which sends -e data and "
                "-e model to the hosts — macOS ships it (/usr/bin/rsync); on Linux: apt "
                "install rsync")
        results, verified = interruptible(lambda: transfer(args, task_vars["inventory_hostname"]))
        recorded, errors = [], transfer_errors(results)
        if not errors:
            recorded, errors = interruptible(lambda: record(args.get("watch") or {}, verified,
                                                            args.get("manifests") or {}))
        result.update(changed=bool(results), results=results, verified=verified,
                      recorded=recorded, failed=bool(errors), msg="\n".join(errors))
        return result
