"""``python benchmarks/bench_online_robot.py ...`` runs :mod:`robotrl.bench.tasks.online_robot`, the benchmark suite's
module (shipped with robotrl: ``python -m robotrl.bench.tasks.online_robot ...`` is the same command; its docstring
tells the options)."""

import sys

from robotrl.bench.tasks import online_robot as _task

if __name__ == "__main__":
    _task.main()
    raise SystemExit(0)
sys.modules[__name__] = _task  # `import bench_online_robot` (a study, a test) gets the module itself
