"""Integrations: MIRAGE's diagnostics and filters inside other trainers.

Each integration is an optional extra and imports its library only when it is imported
itself, so the default install never needs it (``mirage.integrations.trl``: TRL's
GRPOTrainer, ``pip install 'mirage-rl[trl]'``; docs/integrations.md).
"""
