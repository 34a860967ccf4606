"""core report: the reproduction study's results, findings, figures and docs/reproduction.md."""
