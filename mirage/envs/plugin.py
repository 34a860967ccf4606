"""Registers the built-in environments."""

from mirage.core.plugin_api.hookspecs import hookimpl


@hookimpl
def mirage_register_envs(register):
    from mirage.envs.countdown import Countdown
    from mirage.envs.deepcoder import DeepCoder
    from mirage.envs.frozenlake import FrozenLake
    from mirage.envs.metamathqa import MetaMathQA
    from mirage.envs.searchqa import SearchQA
    from mirage.envs.sokoban import Sokoban
    from mirage.envs.webshop import WebShop

    register("sokoban", Sokoban)
    register("frozenlake", FrozenLake)
    for env_cls in (Countdown, MetaMathQA, SearchQA, WebShop, DeepCoder):
        register(env_cls.name, env_cls)
