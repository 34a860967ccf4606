"""Registers the built-in environments."""

from mirage.core.hookspecs import hookimpl


@hookimpl
def mirage_register_envs(register):
    from mirage.envs.frozenlake import FrozenLake
    from mirage.envs.sokoban import Sokoban

    register("sokoban", Sokoban)
    register("frozenlake", FrozenLake)
