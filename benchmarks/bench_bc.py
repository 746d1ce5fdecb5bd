"""``python benchmarks/bench_bc.py ...`` runs :mod:`robotrl.bench.tasks.bc`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.bc ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import bc as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_bc` (a study, a test) gets the module itself
