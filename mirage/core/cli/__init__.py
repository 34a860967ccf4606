"""The core program: its own commands, the commands on stored runs, what they share."""
