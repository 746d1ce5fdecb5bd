"""``python benchmarks/bench_replay.py ...`` runs :mod:`robotrl.bench.tasks.replay`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.replay ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import replay as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_replay` (a study, a test) gets the module itself
