"""``python benchmarks/bench_qlearning_learning.py ...`` runs :mod:`robotrl.bench.tasks.qlearning_learning`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.qlearning_learning ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import qlearning_learning as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_qlearning_learning` (a study, a test) gets the module itself
