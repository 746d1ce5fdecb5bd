"""``python benchmarks/_formats.py FILE ...`` converts older result files in place: :mod:`robotrl.bench.tasks._formats`
(shipped with robotrl; ``python -m robotrl.bench.tasks._formats FILE ...`` is the same command)."""

import sys

from robotrl.bench.tasks._formats import as_result, detect, main  # noqa: F401  (re-exported)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
