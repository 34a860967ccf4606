"""The RL objects of a run: environment, episode, batch, returns, backend, training seam."""
