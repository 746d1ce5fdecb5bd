"""The benchmark suite's tasks as modules (shipped with robotrl, so an installed ``robotrl bench`` runs them).

Each ``robotrl.bench.tasks.x`` has ``main(argv=None)`` and runs as ``python -m robotrl.bench.tasks.x ...``; a
source checkout's ``benchmarks/bench_x.py`` is a shim that runs the same ``main``, and a result records its
command in that form (``python benchmarks/bench_x.py ...``: :func:`robotrl.bench.machine.command_argv`). Relative
``--out`` files go under ``benchmarks/results`` of the suite's root found from the current directory
(:func:`~robotrl.bench.tasks._common.results_dir`). Helpers: :mod:`~robotrl.bench.tasks._common` (threads,
interleaved timing, tables, JSON) and :mod:`~robotrl.bench.tasks._formats` (the throughput scripts' raw figures
converted to the suite's form). These modules may import agents, collectors and the run assembly; the core
(:mod:`robotrl.bench` included) never imports them, it starts them by name.
"""
