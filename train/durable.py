"""Files that survive a crash, a full disk or a power cut: on the disk itself, and whole or not
at all."""

import fcntl
import os


def full_fsync(fd):
    """fd's data on the disk itself. On macOS fsync only hands it to the drive, whose cache a
    power cut loses; F_FULLFSYNC flushes that too (fsync(2) on macOS). A file system without it
    (some network ones) gets fsync."""
    if hasattr(fcntl, "F_FULLFSYNC"):
        try:
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
            return
        except OSError:
            pass
    os.fsync(fd)


def fsync(path):
    """A file or directory (its entries: a rename in it) on the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        full_fsync(fd)
    finally:
        os.close(fd)


def write(path, text):
    """path holds text, on the disk."""
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        full_fsync(f.fileno())


def write_atomic(path, text):
    """path holds text, or what it held before (a crash, a full disk): never a part of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp, text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync(path.parent)
