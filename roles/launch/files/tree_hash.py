"""Print one SHA-256 over the .py files of a package directory (paths and contents).

Run on every host and on the controller to show they all have the same train/ package.
"""

import hashlib
import sys
from pathlib import Path

root = Path(sys.argv[1])
if not root.is_dir():
    sys.exit(f"{root} is not a directory: run setup.yml to copy the train package")
digest = hashlib.sha256()
for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
    digest.update(path.relative_to(root).as_posix().encode() + b"\0")
    digest.update(path.read_bytes() + b"\0")
print(digest.hexdigest())
