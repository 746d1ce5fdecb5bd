"""``python benchmarks/bench_dppo.py ...`` runs :mod:`robotrl.bench.tasks.dppo`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.dppo ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import dppo as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_dppo` (a study, a test) gets the module itself
