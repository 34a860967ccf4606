"""Text environments (grid puzzles) implementing ``mirage.core.rl.env.Environment``."""
