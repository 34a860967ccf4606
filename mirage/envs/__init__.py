"""Text environments (grid puzzles) implementing ``mirage.core.env.Environment``."""
