"""Data-parallel runs: the processes of one run and their collectives."""
