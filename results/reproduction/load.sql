COPY events FROM 'results/reproduction/events.parquet' (FORMAT 'parquet', compression 'zstd');
COPY "groups" FROM 'results/reproduction/groups.parquet' (FORMAT 'parquet', compression 'zstd');
COPY metrics FROM 'results/reproduction/metrics.parquet' (FORMAT 'parquet', compression 'zstd');
COPY rollouts FROM 'results/reproduction/rollouts.parquet' (FORMAT 'parquet', compression 'zstd');
COPY runs FROM 'results/reproduction/runs.parquet' (FORMAT 'parquet', compression 'zstd');
COPY schema_version FROM 'results/reproduction/schema_version.parquet' (FORMAT 'parquet', compression 'zstd');
