"""The DuckDB run store: file, migrations, runs, rollouts, labels, liveness, export."""
