"""Contracts, data model, run loop, store and CLI, a folder each; errors.py is the ground floor."""
