"""MIRAGE: an experiment platform for multi-turn LLM-agent RL that diagnoses template collapse."""
