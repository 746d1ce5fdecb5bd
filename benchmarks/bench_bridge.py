"""``python benchmarks/bench_bridge.py ...`` runs :mod:`robotrl.bench.tasks.bridge`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.bridge ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import bridge as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_bridge` (a study, a test) gets the module itself
