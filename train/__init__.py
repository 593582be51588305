"""Data-parallel MLX training: `python -m train`, or under `mpirun -np N python -m train`."""
