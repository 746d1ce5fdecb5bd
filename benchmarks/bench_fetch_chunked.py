"""``python benchmarks/bench_fetch_chunked.py ...`` runs :mod:`robotrl.bench.tasks.fetch_chunked`, the benchmark suite's module (shipped
with robotrl: ``python -m robotrl.bench.tasks.fetch_chunked ...`` is the same command; its docstring tells the options)."""

import sys

from robotrl.bench.tasks import fetch_chunked as _task

if __name__ == "__main__":
    raise SystemExit(_task.main())
sys.modules[__name__] = _task  # `import bench_fetch_chunked` (a study, a test) gets the module itself
