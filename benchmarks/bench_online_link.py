"""``python benchmarks/bench_online_link.py ...`` runs :mod:`robotrl.bench.tasks.online_link`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.online_link ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import online_link as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_online_link` (a study, a test) gets the module itself
