"""robotrl's benchmark suite behind ``robotrl bench`` (quick and full tiers).

Modules (the statistics, IQM, bootstrap CI, regret, onset dip, are the core's :mod:`robotrl.stats`):
:mod:`~robotrl.bench.schema` (the one result form the scripts write),
:mod:`~robotrl.bench.suite` (tasks and tiers), :mod:`~robotrl.bench.runner` (subprocesses,
resume), :mod:`~robotrl.bench.sweep` (Hydra multirun sweeps of ``robotrl train``),
:mod:`~robotrl.bench.peers` (d3rlpy's side venv), :mod:`~robotrl.bench.tables`,
:mod:`~robotrl.bench.plots`, :mod:`~robotrl.bench.report`, :mod:`~robotrl.bench.readme`,
:mod:`~robotrl.bench.regression` and :mod:`~robotrl.bench.cli`. The scripts themselves live
in the source checkout's ``benchmarks/`` folder.
"""
