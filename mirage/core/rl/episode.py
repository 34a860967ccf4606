"""The turn protocol shared by rollouts and demonstrations (PAPER.md section 6).

Each turn the model sees the context X (instruction, optional history, the state and
"You have N actions left", ending in ``<think>``) and writes
``Z </think> <answer> a1 || a2 </answer>``. Up to ``max_actions_per_turn`` actions are
applied; a malformed answer costs ``format_penalty`` and moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mirage.core.config.run_config import EnvConfig
from mirage.core.rl.env import Environment, parse_response
from mirage.core.rl.image import Image

THINK = "<think>"
ANSWER_FORMAT = "<think> ... </think> <answer> action || action </answer>"


@dataclass
class TurnResult:
    """What applying one response did to the environment."""

    reasoning: str
    answer: str
    actions: list[str]
    format_ok: bool
    reward: float
    done: bool


@dataclass
class EpisodeState:
    """One running episode: the environment, what it has shown, and actions used."""

    env: Environment
    observation: str
    actions_left: int
    history: list[tuple[str, str, float]] = field(default_factory=list)  # (obs, response, reward)
    done: bool = False
    image: Image | None = None
    """The current state's picture (an environment in image mode), else None."""
    history_images: list[Image | None] = field(default_factory=list)
    """The picture of each ``history`` entry's state, in the same order."""


def start_episode(env: Environment, seed: int, config: EnvConfig) -> EpisodeState:
    observation = env.reset(seed)
    budget = config.max_turns * config.max_actions_per_turn
    return EpisodeState(env=env, observation=observation, actions_left=budget, image=env.render_image())


def _shown(state: EpisodeState, config: EnvConfig) -> range:
    """The indices of the history entries the next prompt shows."""
    count = len(state.history)
    if config.history_turns < 0:
        return range(count)
    return range(count - min(config.history_turns, count), count)


def build_context(state: EpisodeState, config: EnvConfig) -> str:
    """The prompt X for the next turn, ending with ``<think>``; in image mode each shown
    state is an ``IMAGE_MARK`` whose picture ``context_images`` gives."""
    lines = []
    if config.show_instruction is not False:
        lines.append(
            f"{state.env.instruction} Answer as {ANSWER_FORMAT} with at most "
            f"{config.max_actions_per_turn} actions ."
        )
    shown = [state.history[index] for index in _shown(state, config)]
    for obs, response, reward in shown:
        lines += ["State :", obs, f"{THINK} {response}", f"Reward : {reward:g}"]
    lines += [
        "State :",
        state.observation,
        f"You have {state.actions_left} actions left .",
        THINK,
    ]
    return "\n".join(lines)


def context_images(state: EpisodeState, config: EnvConfig) -> list[Image]:
    """The pictures of the prompt ``build_context`` gives, in the order of its marks:
    each shown history state's, then the current one's (none for a text environment)."""
    pictures = [state.history_images[index] for index in _shown(state, config)] + [state.image]
    return [picture for picture in pictures if picture is not None]


def apply_response(state: EpisodeState, response: str, config: EnvConfig) -> TurnResult:
    """Parse ``response`` (text after ``<think>``), step the environment, record history."""
    parsed = parse_response(response)
    actions = state.env.parse_actions(parsed.answer) if parsed.ok else None
    reward = 0.0
    applied: list[str] = []
    if actions is None:
        reward += config.format_penalty
    else:
        for action in actions[: min(config.max_actions_per_turn, state.actions_left)]:
            outcome = state.env.step(action)
            applied.append(action)
            reward += outcome.reward
            if outcome.done:
                state.done = True
                break
    state.actions_left -= len(applied)
    state.history.append((state.observation, response.strip(), reward))
    state.history_images.append(state.image)
    if state.actions_left <= 0 or len(state.history) >= config.max_turns:
        state.done = True
    state.observation = state.env.render()
    state.image = state.env.render_image()
    return TurnResult(
        reasoning=parsed.reasoning,
        answer=parsed.answer,
        actions=applied,
        format_ok=actions is not None,
        reward=reward,
        done=state.done,
    )


def format_response(reasoning: str, actions: list[str]) -> str:
    """The canonical response text for a demonstrated turn."""
    return f"{reasoning} </think> <answer> {' || '.join(actions)} </answer>"
