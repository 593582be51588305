"""Print each requirement (argv) the running environment does not satisfy, one per line.

Run with the environment's own Python before pip: when it prints nothing, pip need not
start at all (pip takes seconds of CPU just to list what is installed). A requirement is
satisfied when its distribution is installed in a matching version, and so are the
packages its extras add (mlx[cpu] needs mlx-cpu on Linux). Exits 1 when the environment has
no packaging (the lock installs it): then nothing of the lock is there yet.
"""

import sys
from importlib.metadata import PackageNotFoundError, distribution

try:
    from packaging.requirements import Requirement
except ImportError:
    sys.exit("no packaging in this environment: install every locked package")


def satisfied(requirement):
    if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
        return True  # not meant for this platform
    try:
        dist = distribution(requirement.name)
    except PackageNotFoundError:
        return False
    if not requirement.specifier.contains(dist.version, prereleases=True):
        return False
    return all(
        satisfied(Requirement(dependency.split(";")[0]))
        for dependency in dist.requires or []
        for extra in requirement.extras
        if _added_by(Requirement(dependency), extra)
    )


def _added_by(dependency, extra):
    """Whether the dependency comes with the extra here, not with the package itself."""
    marker = dependency.marker
    return bool(marker) and marker.evaluate({"extra": extra}) and not marker.evaluate({"extra": ""})


if __name__ == "__main__":
    for spec in sys.argv[1:]:
        if not satisfied(Requirement(spec)):
            print(spec)
