"""``python benchmarks/bench_reinflow.py ...`` runs :mod:`robotrl.bench.tasks.reinflow`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.reinflow ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import reinflow as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_reinflow` (a study, a test) gets the module itself
