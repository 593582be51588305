"""The manifest of a staged input (a data file, or a data or model directory): each file's size,
mtime (whole seconds, what every rsync keeps) and sha256, {relative path: [size, mtime, sha256]}.

train.yml keeps one beside each input it staged on a host (<work dir>/data/.<name>.manifest.json)
and compares it with the controller's (lookup_plugins/staging_manifest.py runs this same code on
the controller). Standard library only but for fetch (huggingface_hub, which mlx-lm brings); on a
host, with the environment's Python:

    staging.py report WORK_DIR '["data/corpus.txt", ...]'   each input's manifest and its files'
                                                            size and mtime now (a stat, no read)
    staging.py record WORK_DIR '["data/corpus.txt", ...]'  after a transfer: make the copy
                                                            private, hash what changed, write the
                                                            manifest and print it
    staging.py received WORK_DIR '["data/corpus.txt", ...]' during a transfer: the bytes of each
                                                            input there (its progress)
    staging.py relay WORK_DIR '{"script": ..., "manifests": ..., "paths": ..., "hosts": [...],
                               "commands": [{"item": ..., "argv": ["rsync", ...]}, ...]}'
                                                            on the launch host, while the controller
                                                            sends it the inputs: each file on to
                                                            the other hosts as it arrives, then
                                                            its rsyncs, at once in WORK_DIR, of
                                                            what did not arrive whole; stdin:
                                                            "done" once the controller's sends
                                                            succeeded, closed to end it
    staging.py take WORK_DIR null                           on another host: what relay sends it;
                                                            prints what it kept
    staging.py fetch CACHE_DIR '{"repo": "owner/name", "revision": "", "work_dir": ..., "rel": ...}'
                                                            a Hugging Face model: download it into
                                                            this machine's Hugging Face cache (and
                                                            stage it at rel, with work_dir) and
                                                            print its revision, snapshot path and
                                                            manifest (CACHE_DIR: cached manifests);
                                                            stdin: {"token": HF_TOKEN or ""}
"""

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

CHUNK = 1 << 20
# Seconds the relay waits before looking again for a file rsync is writing, or for more of it,
# and after which a temporary nothing writes into is an old one (an rsync killed long ago).
POLL = 0.05
STALE = 30
# The file rsync writes while it receives <name>: .<name>.XXXXXX beside it, renamed at the end
# (six random characters from rsync, ten from openrsync, macOS 15's rsync: its mktemplate()).
RECEIVING = re.compile(r"^\.(.+)\.(?:[A-Za-z0-9]{6}|[A-Za-z0-9]{10})$")


def files(path):
    """{relative path: stat} of the files at path (a file: its own name), symlinks followed as
    `rsync -L` follows them; {} when path is missing."""
    if os.path.isfile(path):
        return {os.path.basename(path): os.stat(path)}
    found = {}
    for parent, _, names in os.walk(path, followlinks=True):
        for name in names:
            full = os.path.join(parent, name)
            found[os.path.relpath(full, path)] = os.stat(full)
    return found


def quick(stat):
    """What rsync's quick check compares: the size and the mtime in whole seconds."""
    return [stat.st_size, int(stat.st_mtime)]


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def trusted(path, known, since):
    """The entries of `known` (an earlier manifest of path, written at `since`) that still hold:
    the file's size and mtime are the recorded ones and it has not changed since (its ctime: a
    rewrite or a restored mtime moves it)."""
    known = known or {}
    return {rel: known[rel] for rel, stat in files(path).items()
            if known.get(rel, [None])[:2] == quick(stat) and stat.st_ctime < since}


def manifest(path, known=None, since=0.0):
    """The manifest of path. A file `known` records and that has not changed since (trusted)
    keeps its recorded sha256 without being read again; the others are read at once, one per
    core (hashlib lets go of the GIL): a model's shards take the time of the largest."""
    kept = trusted(path, known, since)
    found = sorted(files(path).items())
    unknown = [rel for rel, _ in found if rel not in kept]
    with ThreadPoolExecutor(max_workers=max(1, min(len(unknown), os.cpu_count() or 1))) as pool:
        digests = dict(zip(unknown, pool.map(
            lambda rel: sha256(path if os.path.isfile(path) else os.path.join(path, rel)),
            unknown), strict=True))
    return {rel: kept.get(rel) or quick(stat) + [digests[rel]] for rel, stat in found}


def manifest_path(work_dir, rel):
    """data/corpus.txt -> <work dir>/data/.corpus.txt.manifest.json: beside the input, not in it
    (rsync --delete would remove it, and the job would read it)."""
    parent, name = os.path.split(rel)
    return os.path.join(work_dir, parent, f".{name}.manifest.json")


def read(path):
    """(manifest, its mtime), (None, 0.0) when there is none or it is unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), os.fstat(f.fileno()).st_mtime
    except (OSError, ValueError):
        return None, 0.0


def cached(path, cache):
    """The manifest of path, kept in directory cache (0700, one file per path): the next call
    reads again only the files that changed since. Calls at once (Ansible's workers, one per
    host) take turns: the first reads what changed, the others then find it recorded."""
    cache = os.path.expanduser(cache)
    os.makedirs(cache, mode=0o700, exist_ok=True)
    path = os.path.abspath(os.path.expanduser(str(path)).rstrip("/") or "/")
    target = os.path.join(cache, hashlib.sha256(path.encode()).hexdigest()[:32] + ".json")
    with open(f"{target}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return update(path, target)


def fetch(cache, hub):
    """Download hub["repo"] at hub["revision"] (a commit, branch or tag; "" for the default branch)
    with huggingface_hub's own snapshot_download, which honours HF_ENDPOINT, HF_HOME and
    HF_HUB_OFFLINE and fetches only what its cache lacks (nothing for a commit it holds), with the
    token stdin gives (the controller's HF_TOKEN: never on a command line), else the one this
    machine is logged in with: {revision: the commit, path: the snapshot (symlinks into the
    cache's blobs), manifest}. With hub["rel"] (the launch host), the snapshot is also staged
    there under hub["work_dir"] as hard links to the cache's files, and recorded: the manifest is
    that copy's, and staged what `report` prints of it."""
    from huggingface_hub import constants, snapshot_download

    token = json.loads(sys.stdin.readline())["token"] or None
    try:
        path = snapshot_download(hub["repo"], revision=hub["revision"] or None, token=token)
    except Exception as error:  # the hub's own words: offline, no such repo or revision, ...
        sys.exit(f"cannot fetch {hub['repo']} at {hub['revision'] or 'its default branch'} from "
                 f"{constants.ENDPOINT}: {type(error).__name__}: {error} — check the repo id, the "
                 "revision and this machine's network (train.yml's model_source picks the "
                 "machine)")
    fetched = {"revision": os.path.basename(path), "path": path}
    if not hub.get("rel"):
        return {**fetched, "manifest": cached(path, cache)}
    work_dir, rel = hub["work_dir"], hub["rel"]
    prepare(work_dir, [rel])
    link(path, os.path.join(work_dir, rel))
    return {**fetched, "manifest": record(work_dir, [rel])[rel],
            "staged": report(work_dir, [rel])[rel]}


def _same(blob, copy):
    """Whether copy already is blob: the same file, or across file systems a copy that rsync's
    quick check passes."""
    try:
        there = os.stat(copy)
    except FileNotFoundError:
        return False
    here = os.stat(blob)
    if here.st_dev == there.st_dev:
        return os.path.samestat(here, there)
    return quick(here) == quick(there)


def link(snapshot, path):
    """Make directory path the snapshot's files as hard links to its blobs, so the model is on
    this disk once (a copy where path is on another file system); files the snapshot lacks go."""
    wanted = files(snapshot)
    for name in wanted:
        blob, copy = os.path.realpath(os.path.join(snapshot, name)), os.path.join(path, name)
        if _same(blob, copy):
            continue
        os.makedirs(os.path.dirname(copy), mode=0o700, exist_ok=True)
        temporary = f"{copy}.linking"
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        try:
            os.link(blob, temporary)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            shutil.copy2(blob, temporary)
        os.replace(temporary, copy)  # never written into: it may be another blob's link
    for name in set(files(path)) - set(wanted):
        os.remove(os.path.join(path, name))


def report(work_dir, rels):
    """{rel: {manifest: the recorded one or None, files: {file: [size, mtime]} now}}."""
    return {rel: {"manifest": read(manifest_path(work_dir, rel))[0],
                  "files": {name: quick(stat)
                            for name, stat in files(os.path.join(work_dir, rel)).items()}}
            for rel in rels}


def private(path):
    """0700 directories, 0600 files (0700 when executable): the user's alone, as on the
    controller. rsync runs without -p (the controller's modes) and without --chmod (not every
    macOS openrsync has it). Only modes that differ are set: a chmod moves the ctime."""
    def set_mode(full, mode):
        if os.stat(full).st_mode & 0o7777 != mode:
            os.chmod(full, mode)

    if os.path.isfile(path):
        set_mode(path, private_mode(os.stat(path)))
        return
    for parent, _, names in os.walk(path, followlinks=True):
        set_mode(parent, 0o700)
        for name in names:
            full = os.path.join(parent, name)
            set_mode(full, private_mode(os.stat(full)))


def private_mode(stat):
    """A staged file's mode: 0600, 0700 when executable."""
    return 0o700 if stat.st_mode & 0o111 else 0o600


def prepare(work_dir, rels):
    """Create the directories the inputs go into (data/, models/), private (0700)."""
    for parent in sorted({os.path.join(work_dir, os.path.dirname(rel)) for rel in rels}):
        os.makedirs(parent, mode=0o700, exist_ok=True)
        os.chmod(parent, 0o700)
    return sorted(rels)


def update(path, target):
    """Write the manifest of path to target (atomically, 0600), reading only the files that
    changed since the manifest there was written, and return it."""
    result = manifest(path, *read(target))
    write(target, result)
    return result


def write(target, result):
    """Write a manifest to target, atomically, 0600."""
    temporary = f"{target}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(temporary, target)


def record(work_dir, rels):
    """Make each staged input private and record its manifest beside it; return them."""
    recorded = {}
    for rel in rels:
        path = os.path.join(work_dir, rel)
        private(path)
        recorded[rel] = update(path, manifest_path(work_dir, rel))
    return recorded


def receiving(name):
    """The file that name (a path) is rsync's temporary of, or None."""
    parent, base = os.path.split(name)
    match = RECEIVING.match(base)
    return os.path.join(parent, match[1]) if match else None


def _sizes(directory, recursive=True):
    """{path under directory: size} of its files; a file rsync renames meanwhile is left out."""
    found = {}
    walk = os.walk(directory)
    for parent, _, names in walk if recursive else [next(walk, (directory, [], []))]:
        for name in names:
            full = os.path.join(parent, name)
            try:
                found[os.path.relpath(full, directory)] = os.stat(full).st_size
            except OSError:
                continue
    return found


def received(work_dir, rels):
    """{rel: its bytes on this host}, a file that rsync is receiving counted at the size of what
    it wrote so far (its .<name>.XXXXXX) instead of its own (an older or partial copy)."""
    totals = {}
    for rel in rels:
        path = os.path.join(work_dir, rel)
        if os.path.isdir(path):
            sizes = _sizes(path)
        else:  # a file input: its temporary lies beside it
            parent, name = os.path.split(path)
            sizes = {n: size for n, size in _sizes(parent, recursive=False).items()
                     if name in (n, receiving(n))}
        counted = {}
        for name in sorted(sizes, key=lambda n: receiving(n) is not None):
            counted[receiving(name) or name] = sizes[name]  # a temporary replaces its file
        totals[rel] = sum(counted.values())
    return totals


# The relay's receivers and transfers (each in a process group of its own): all killed when the
# controller goes.
_children = []


def _start(argv, **options):
    child = subprocess.Popen(argv, start_new_session=True, **options)
    _children.append(child)
    return child


def _kill_all():
    for child in _children:
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)


def transfers(work_dir, commands):
    """Run the transfers (concurrent_commands' commands: item, argv) at once, in work_dir, and
    return their results in concurrent_commands' shape."""
    running = [_start(command["argv"], cwd=work_dir, stdin=subprocess.DEVNULL,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for command in commands]

    def wait(command, transfer):
        out, err = transfer.communicate()
        return {"item": command["item"], "cmd": command["argv"], "rc": transfer.returncode,
                "stdout": out.rstrip("\n"), "stderr": err.rstrip("\n")}

    with ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
        return list(pool.map(wait, commands, running))


def _temporaries(work_dir, pending, seen):
    """{(rel, name): the file rsync is writing it to} among pending ({(rel, name): its path under
    work_dir}), but the ones in seen (relayed already) and any untouched for STALE seconds (left
    by an rsync killed long ago)."""
    found = {}
    wanted = {os.path.join(work_dir, path): key for key, path in pending.items()}
    for parent in {os.path.dirname(full) for full in wanted}:
        with contextlib.suppress(OSError):
            for name in os.listdir(parent):
                temporary = os.path.join(parent, name)
                key = wanted.get(receiving(temporary))
                with contextlib.suppress(OSError):
                    if key and temporary not in seen and (
                            os.stat(temporary).st_mtime > time.time() - STALE):
                        found[key] = temporary
    return found


def _forward(sinks, hosts, data):
    """Write data to each of hosts whose receiver is still there (sinks: {host: its ssh}); one
    gone is dropped (the rsyncs after the relay send it what it lacks)."""
    for host in hosts:
        try:
            if host in sinks:
                sinks[host].stdin.write(data)
        except OSError:
            del sinks[host]


def _growing(source, size, finished, digest):
    """The chunks of the file rsync writes (source: it, open), its first `size` bytes read as
    they are written and hashed into digest; fewer when it ends short (`finished`: the
    controller's sends ended, so nothing more comes: take then finds it short and drops it)."""
    sent = 0
    while sent < size:
        ended = finished.is_set()
        chunk = source.read(min(CHUNK, size - sent))
        if chunk:
            digest.update(chunk)
            sent += len(chunk)
            yield chunk
        elif ended:
            return
        else:
            time.sleep(POLL)


def add_to_manifests(work_dir, taken):
    """Record files known to be the controller's (taken: {rel: {name: entry}}) in the manifests
    beside their inputs, with the entries there that still hold (trusted), so record does not
    read them again."""
    for rel, entries in taken.items():
        target = manifest_path(work_dir, rel)
        write(target, {**trusted(os.path.join(work_dir, rel), *read(target)), **entries})


def _record_read(work_dir, spec, read_whole, verified):
    """Record on the launch host the files the relay read whole with the controller's sha256
    (read_whole: {(rel, name): the inode read}) once rsync has put them in place: the same inode,
    with the controller's size and mtime, made private first (a chmod moves the ctime). Returns
    the inputs whose every file is now recorded as the controller's (verified: {rel: the files
    it held as such before}), made private: record has nothing left to do there."""
    taken = {}
    for (rel, name), inode in read_whole.items():
        full = os.path.join(work_dir, spec["paths"][rel][name])
        with contextlib.suppress(OSError):
            stat = os.stat(full)
            entry = spec["manifests"][rel][name]
            if stat.st_ino == inode and quick(stat) == entry[:2]:
                os.chmod(full, private_mode(stat))
                taken.setdefault(rel, {})[name] = entry
    whole = sorted(rel for rel, expected in spec["manifests"].items()
                   if set(expected) <= verified[rel] | set(taken.get(rel, ())))
    for rel in whole:
        private(os.path.join(work_dir, rel))
    add_to_manifests(work_dir, taken)
    return whole


def _in_place(work_dir, pending, manifests):
    """{(rel, name): its path} among pending whose file is in place with the controller's size
    and mtime: one rsync put in place before the relay saw its temporary (a small file). Read
    whole and passed on: a receiver keeps it only with the controller's sha256."""
    found = {}
    for (rel, name), path in pending.items():
        with contextlib.suppress(OSError):
            if quick(os.stat(os.path.join(work_dir, path))) == manifests[rel][name][:2]:
                found[rel, name] = os.path.join(work_dir, path)
    return found


def _verified(work_dir, rel, spec):
    """The files of input rel the launch host holds already as the controller's (its manifest
    records them, unchanged since): the controller's rsync sends them not, the relay neither."""
    expected = spec["manifests"][rel]
    kept = trusted(os.path.join(work_dir, rel), *read(manifest_path(work_dir, rel)))
    return {name for name, entry in kept.items() if expected.get(name) == entry}


def _delivered(sinks, spec):
    """{host: the inputs whose every file (but those it is not sent) its receiver kept}, once
    the receivers ended (each prints what it kept)."""
    delivered = {}
    skipped = {host["host"]: host["skipped"] for host in spec["hosts"]}
    for host, sink in sinks.items():
        out = sink.stdout.read()
        sink.wait()
        with contextlib.suppress(ValueError):
            taken = json.loads(out) or {}
            delivered[host] = {rel for rel, entries in taken.items() if entries and set(entries)
                               == set(spec["manifests"][rel]) - set(skipped[host].get(rel, ()))}
    return delivered


def relay(work_dir, spec):
    """On the launch host, while the controller's rsync sends it the inputs: each file as rsync
    writes it (its temporary .<name>.XXXXXX, read as it grows; or in place, a small file rsync
    renamed before the relay saw it) goes on at once to the other hosts whose copy of that input
    differs (spec["hosts"]: {host, argv: the ssh to it over the job's network, python, work_dir,
    rels, skipped: {rel: its files that host is not sent}}), to `staging.py take` there, so the
    fan-out overlaps the controller's send instead of following it; the receivers' ssh start
    with the relay, as the controller's send does. Then the launch host's rsyncs
    (spec["commands"]: concurrent_commands' commands, item {host, rel, from}, whole: whether a
    copy whose every file the relay delivered is the controller's, no file there that it lacks),
    at once, of each input a host's receiver did not keep whole (its sha256 checked there):
    {results: theirs, in concurrent_commands' shape, verified: {host: the inputs there recorded
    whole as the controller's, private: record's work done}}. spec["paths"]: {rel: {name: its
    path under the work dir}} of the files of spec["manifests"]. What it read whole with the
    controller's sha256 is recorded on the launch host (spec["launch_host"]) too (record reads it
    no more). stdin: "done" when the controller's sends succeeded (each file is then read to its
    end), held open until the relay ends; closed before (the play interrupted, a send failed),
    the relay, its ssh and its rsyncs are killed at once."""
    sinks = {}
    for host in spec["hosts"]:
        take_argv = [host["python"], "-c", spec["script"], "take", host["work_dir"], "null"]
        sinks[host["host"]] = _start([*host["argv"], shlex.join(take_argv)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    receivers = dict(sinks)
    needed = {(rel, name): [h["host"] for h in spec["hosts"]
                            if rel in h["rels"] and name not in h["skipped"].get(rel, ())]
              for rel, paths in spec["paths"].items() for name in paths}
    finished = threading.Event()

    def end():
        if sys.stdin.readline().strip() == "done":
            finished.set()
            sys.stdin.read()  # still ended when the controller goes
        _kill_all()
        os._exit(1)

    threading.Thread(target=end, daemon=True).start()
    verified = {rel: _verified(work_dir, rel, spec) for rel in spec["paths"]}
    pending = {(rel, name): path for rel, paths in spec["paths"].items()
               for name, path in paths.items() if name not in verified[rel]}
    seen, read_whole = set(), {}
    while pending and sinks:
        ended = finished.is_set()
        found = _temporaries(work_dir, pending, seen) or _in_place(work_dir, pending,
                                                                   spec["manifests"])
        if not found:
            if ended:
                break
            time.sleep(POLL)
            continue
        (rel, name), temporary = next(iter(found.items()))
        seen.add(temporary)
        try:
            source = open(temporary, "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:  # put in place meanwhile: found there next
            continue
        size, mtime, digest = spec["manifests"][rel][name]
        header = {"rel": rel, "name": name, "path": pending.pop((rel, name)), "size": size,
                  "mtime": mtime, "sha256": digest}
        _forward(sinks, needed[rel, name], json.dumps(header).encode() + b"\n")
        sha = hashlib.sha256()
        with source:
            for chunk in _growing(source, size, finished, sha):
                _forward(sinks, needed[rel, name], struct.pack(">I", len(chunk)) + chunk)
            if sha.hexdigest() == digest:
                read_whole[rel, name] = os.fstat(source.fileno()).st_ino
        _forward(sinks, needed[rel, name], struct.pack(">I", 0))  # its end: take checks it
        for host in needed[rel, name]:
            with contextlib.suppress(KeyError, OSError):
                sinks[host].stdin.flush()
    for sink in receivers.values():
        with contextlib.suppress(OSError):
            sink.stdin.close()
    delivered = _delivered(receivers, spec)
    finished.wait()  # rsync has put every file in place
    verified_here = _record_read(work_dir, spec, read_whole, verified)
    needless = [c for c in spec["commands"]
                if c["whole"] and c["item"]["rel"] in delivered.get(c["item"]["host"], ())]
    whole_on = {spec["launch_host"]: verified_here} if verified_here else {}
    for command in needless:
        whole_on.setdefault(command["item"]["host"], []).append(command["item"]["rel"])
    return {"results": transfers(work_dir, [c for c in spec["commands"] if c not in needless]),
            "verified": whole_on}


def _chunks(stream):
    """A relayed file's chunks, then None at its end (none when the stream was cut)."""
    while len(head := stream.read(4)) == 4:
        length = struct.unpack(">I", head)[0]
        if not length:
            yield None
            return
        yield stream.read(length)


class _Cut(Exception):
    """The relay's ssh ended (a signal)."""


def _cut(*_):
    raise _Cut


def take(work_dir, _):
    """On another host, what relay sends (each file: a line {rel, name, path, size, mtime,
    sha256}, then its bytes in chunks): each file is written beside its place as rsync writes it
    (.<name>.XXXXXX, 0600), hashed as it arrives, and put in place with its mtime only when its
    sha256 is the controller's (else removed: the rsync after sends it); the manifests record
    what came, so `record` does not read it again, and prints it ({rel: {name: entry}}). The
    stream cut (the play interrupted): what arrived of a file is kept in its place, like rsync
    --partial. The inputs it wrote into are made private, as record makes them."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _cut)
    stream = sys.stdin.buffer
    taken = {}
    while header := stream.readline():
        file = json.loads(header)
        full = os.path.join(work_dir, file["path"])
        prepare(work_dir, [file["rel"]])  # its data/ or models/, private
        os.makedirs(os.path.dirname(full), mode=0o700, exist_ok=True)
        temporary = os.path.join(os.path.dirname(full),
                                 f".{os.path.basename(full)}.{secrets.token_hex(3)}")
        digest, ended = hashlib.sha256(), False
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with contextlib.suppress(_Cut), open(fd, "wb") as out:
            for chunk in _chunks(stream):
                if chunk is None:
                    ended = True
                    break
                out.write(chunk)
                digest.update(chunk)
        size = os.stat(temporary).st_size
        if not ended:  # the stream cut
            if size:
                os.replace(temporary, full)
            else:
                os.remove(temporary)
            break
        if [size, digest.hexdigest()] != [file["size"], file["sha256"]]:
            os.remove(temporary)
            continue
        os.utime(temporary, (file["mtime"], file["mtime"]))
        os.replace(temporary, full)
        taken.setdefault(file["rel"], {})[file["name"]] = [size, file["mtime"], file["sha256"]]
    for rel in taken:
        private(os.path.join(work_dir, rel))
    add_to_manifests(work_dir, taken)
    return taken


if __name__ == "__main__":
    action, work_dir, rels = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    actions = {"report": report, "record": record, "received": received,
               "relay": relay, "take": take, "fetch": fetch}
    print(json.dumps(actions[action](work_dir, rels)))
