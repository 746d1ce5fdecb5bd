"""``python benchmarks/bench_qlearning_precision.py ...`` runs :mod:`robotrl.bench.tasks.qlearning_precision`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.qlearning_precision ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import qlearning_precision as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_qlearning_precision` (a study, a test) gets the module itself
