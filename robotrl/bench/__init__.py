"""robotrl's benchmark suite behind ``robotrl bench`` (quick and full tiers).

Modules (the statistics, IQM, bootstrap CI, regret, onset dip, are the core's :mod:`robotrl.stats`):
:mod:`~robotrl.bench.schema` (the one result form the scripts write),
:mod:`~robotrl.bench.suite` (tasks and tiers), :mod:`~robotrl.bench.runner` (subprocesses,
resume), :mod:`~robotrl.bench.sweep` (Hydra multirun sweeps of ``robotrl train``),
:mod:`~robotrl.bench.peers` (d3rlpy's side venv), :mod:`~robotrl.bench.tables`,
:mod:`~robotrl.bench.plots`, :mod:`~robotrl.bench.report`, :mod:`~robotrl.bench.readme`,
:mod:`~robotrl.bench.regression` and :mod:`~robotrl.bench.cli`. The suite's benchmarks are the modules of
:mod:`robotrl.bench.tasks` (shipped, run by name with ``python -m``; the checkout's ``benchmarks/bench_*.py`` are
shims for them); the studies live in the source checkout's ``benchmarks/`` folder.
"""
