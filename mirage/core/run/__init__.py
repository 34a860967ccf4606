"""One run, from validating its config to storing its steps; preflight and experiments."""
