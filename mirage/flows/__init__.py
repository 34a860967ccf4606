"""Prefect flows that run registry.yaml experiments as grids (docs/flows.md).

``cells`` expands an experiment into cells; ``task`` runs one cell into its own files;
``load`` brings finished cells into the main DuckDB store (the only writer);
``summary`` builds and prints the per-cell table and progress lines; ``progress`` reads
a running sweep's progress (for ``core sweeps`` and the app); ``runners`` picks the task
runner (process pool or Ray); ``sweep`` is the flow; ``serve`` serves one deployment per
experiment; ``commands`` adds ``core sweep``, ``sweeps`` and ``serve`` to the ``core``
program (a command plugin). Prefect is imported only by ``task``, ``runners``, ``sweep``
and ``serve``.
"""
