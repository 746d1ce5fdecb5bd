"""``python benchmarks/bench_qlearning.py ...`` runs :mod:`robotrl.bench.tasks.qlearning`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.qlearning ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import qlearning as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_qlearning` (a study, a test) gets the module itself
