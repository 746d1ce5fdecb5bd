"""``python benchmarks/bench_residual.py ...`` runs :mod:`robotrl.bench.tasks.residual`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.residual ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import residual as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_residual` (a study, a test) gets the module itself
