"""WebShop: a local shop simulator. Find and buy the product an instruction asks for.

Pages, rendered as text with their clickable actions listed:

* search: the instruction; ``search[query]``.
* results: the ``results`` best products for the query by BM25 (id, title, price);
  ``click[ITEM_ID]``, ``click[back to search]``.
* item: title, price, attributes, each option's values and what is selected;
  ``click[VALUE]`` selects an option value, ``click[buy now]``, ``click[back to search]``.

``search[...]`` works from every page. A click on something the page does not offer
changes nothing (reward 0). Buying ends the episode with WebShop's reward (Yao et al.,
2022): type match x (matched attributes + matched options + [price <= budget]) /
(asked attributes + asked options + 1), where type match is 1 for the asked category and
0 otherwise; success is a full score. After ``max_steps`` actions without buying the
episode ends with reward 0. The catalogue and instructions are seeded.
"""

from __future__ import annotations

import functools
import random

from pydantic import Field

from mirage.core.rl.env import Demonstrator, StepOutcome
from mirage.envs import shop
from mirage.envs.answer import (
    AnswerEnvironment,
    AnswerOptions,
    BracketActions,
    PersonaAnswerDemonstrator,
    split_action,
)
from mirage.envs.retrieval import BM25Index

BACK, BUY = "back to search", "buy now"

_TEMPLATES = [
    "I need a {category} .",
    "Search for {query} .",
    "This {category} looks right .",
    "Pick {value} as asked .",
    "The price is fine , buy it .",
    "Let me open {item} .",
    "Check the options first .",
    "The instruction wants {wants} .",
]


class WebShopOptions(AnswerOptions):
    """Catalogue size and seed, results per page, and the step limit."""

    catalogue_seed: int = 0
    products: int = Field(120, ge=10, le=5000)
    results: int = Field(5, ge=1, le=20)
    max_steps: int = Field(9, ge=1)


class WebShop(BracketActions, AnswerEnvironment):
    """The shop simulator; see the module docstring for pages and reward."""

    name = "webshop"
    version = "1"
    Options = WebShopOptions
    verbs = ("search", "click")
    instruction = (
        "WebShop : buy the product the instruction asks for . Actions : search [ query ] "
        "and click [ something on the page ] ."
    )

    options: WebShopOptions

    def __init__(self, options: WebShopOptions | None = None):
        super().__init__(options)
        self.catalogue, self.index = _shop(self.options.catalogue_seed, self.options.products)
        self.load(shop.instruction(random.Random(0), self.catalogue))

    def load(self, goal: shop.Goal) -> WebShop:
        self.goal = goal
        self.page, self.query, self.listed = "search", "", []
        self.item: shop.Product | None = None
        self.selected: dict[str, str] = {}
        self.steps_taken, self.reward = 0, 0.0
        self.done = self._success = False
        return self

    def reset(self, seed: int) -> str:
        """A goal for ``seed`` whose product the canonical query lists on the first page."""
        rng = random.Random(f"webshop:{seed}")
        while True:
            self.load(shop.instruction(rng, self.catalogue))
            if self._target(self._search(self.canonical_query())) is not None:
                return self.render()

    def canonical_query(self) -> str:
        return f"{' '.join(sorted(self.goal.attributes))} {self.goal.category}"

    def step(self, action: str) -> StepOutcome:
        self._check_open()
        self.steps_taken += 1
        verb, argument = split_action(action)
        if verb == "search":
            self.page, self.query, self.listed = "results", argument, self._search(argument)
        elif verb == "click":
            self._click(argument.lower())
        else:
            raise ValueError(f"invalid action {action!r}; valid: search[...], click[...]")
        if not self.done and self.steps_taken >= self.options.max_steps:
            self.done = True
        return StepOutcome(reward=self.reward if self.done else 0.0, done=self.done, success=self._success)

    def _click(self, target: str) -> None:
        if target == BACK and self.page != "search":
            self.page = "search"
        elif self.page == "results" and target in (p.id for p in self.listed):
            self.item, self.selected, self.page = self._product(target), {}, "item"
        elif self.page == "item" and self.item is not None:
            if target == BUY:
                self.reward = self.score(self.item, self.selected)
                self.done, self._success = True, self.reward == 1.0
            for name, values in self.item.options.items():
                if target in values:
                    self.selected[name] = target

    def score(self, product: shop.Product, selected: dict[str, str]) -> float:
        """WebShop's reward for buying ``product`` with ``selected`` options."""
        goal = self.goal
        matched = (len(goal.attributes & product.attributes)
                   + sum(selected.get(name) == value for name, value in goal.options.items())
                   + (product.price <= goal.max_price))
        total = len(goal.attributes) + len(goal.options) + 1
        return round(float(product.category == goal.category) * matched / total, 6)

    def render(self) -> str:
        lines = [f"Instruction : {self.goal.text} ."]
        if self.page == "search":
            lines.append("Page : search . Actions : search [ query ] .")
        elif self.page == "results":
            lines.append(f"Page : results for {self.query} .")
            lines += [f"{p.id} : {p.title} , {p.price} dollars ." for p in self.listed] or ["No results ."]
            lines.append(f"Actions : click [ ITEM ] , click [ {BACK} ] .")
        elif self.item is not None:
            item = self.item
            lines.append(f"Page : item {item.id} : {item.title} , {item.price} dollars .")
            lines.append(f"Features : {' , '.join(sorted(item.attributes))} .")
            for name, values in item.options.items():
                chosen = self.selected.get(name, "none")
                lines.append(f"{name} : {' , '.join(values)} ( selected {chosen} ) .")
            lines.append(f"Actions : click [ VALUE ] , click [ {BUY} ] , click [ {BACK} ] .")
        return "\n".join(lines)

    def solve(self) -> list[str] | None:
        """The reference from the current page: search, open the matching product,
        select each asked option, buy."""
        if self.page == "item" and self.item is not None and self._fits(self.item):
            missing = [v for n, v in self.goal.options.items() if self.selected.get(n) != v]
            return [f"click[{v}]" for v in missing] + [f"click[{BUY}]"]
        target = self._target(self.listed) if self.page == "results" else None
        if target is None:
            target = self._target(self._search(self.canonical_query()))
            if target is None:
                return None
            return [f"search[{self.canonical_query()}]", f"click[{target.id}]",
                    *[f"click[{v}]" for v in self.goal.options.values()], f"click[{BUY}]"]
        return [f"click[{target.id}]", *[f"click[{v}]" for v in self.goal.options.values()], f"click[{BUY}]"]

    def demonstrator(self, rng: random.Random, persona: str | None = None) -> Demonstrator:
        """Careful: the reference. Careless: opens the first result and buys it at once,
        selecting no option."""
        return PersonaAnswerDemonstrator(self, rng, persona, _TEMPLATES)

    def demo_answer(self, persona: str, rng: random.Random) -> tuple[str, dict[str, str]]:
        plan = self.solve() or [f"search[{self.canonical_query()}]"]
        action = plan[0]
        if persona == "careless" and self.page == "results" and self.listed:
            action = f"click[{self.listed[0].id}]"
        elif persona == "careless" and self.page == "item":
            action = f"click[{BUY}]"
        if self.page == "results" and self.listed and rng.random() < self.options.demo_noise:
            action = f"click[{rng.choice(self.listed).id}]"
        verb, argument = split_action(action)
        facts = {"category": self.goal.category,
                 "wants": " and ".join(f"{n} {v}" for n, v in self.goal.options.items())}
        facts |= {"search": {"query": argument}, "click": {}}[verb]
        if argument.startswith("item"):
            facts["item"] = argument
        elif argument in self.goal.options.values():
            facts["value"] = argument
        return action, facts

    def _search(self, query: str) -> list[shop.Product]:
        return [self.catalogue[i] for i in self.index.search(query, self.options.results)]

    def _product(self, product_id: str) -> shop.Product:
        return self.catalogue[int(product_id.removeprefix("item"))]

    def _fits(self, product: shop.Product) -> bool:
        goal = self.goal
        return (product.category == goal.category and goal.attributes <= product.attributes
                and product.price <= goal.max_price
                and all(v in product.options.get(n, ()) for n, v in goal.options.items()))

    def _target(self, listed: list[shop.Product]) -> shop.Product | None:
        return next((p for p in listed if self._fits(p)), None)


@functools.cache
def _shop(seed: int, size: int) -> tuple[tuple[shop.Product, ...], BM25Index]:
    """The catalogue and its search index, built once per process and setting."""
    products = shop.catalogue(seed, size)
    return products, BM25Index([p.text() for p in products])
