"""Contracts, data model, run loop, store and CLI."""
