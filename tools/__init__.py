"""Tools shared by tests, benchmarks and Molecule: virtual cluster, wheelhouse, playbook runner."""
