"""A seeded product catalogue and shopping instructions for the WebShop simulator."""

from __future__ import annotations

import random
from dataclasses import dataclass

CATEGORIES: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    # category: (attributes, {option name: values})
    "shirt": (("cotton", "slim", "breathable", "organic"), {"color": ("red", "blue", "black", "white"),
                                                           "size": ("small", "medium", "large")}),
    "sneakers": (("waterproof", "lightweight", "leather", "vegan"), {"color": ("black", "white", "grey"),
                                                                     "size": ("7", "8", "9", "10")}),
    "backpack": (("waterproof", "lightweight", "padded", "recycled"), {"color": ("black", "green", "navy")}),
    "mug": (("ceramic", "insulated", "dishwasher", "large"), {"color": ("white", "black", "red")}),
    "lamp": (("dimmable", "wooden", "cordless", "modern"), {"color": ("white", "brass", "black")}),
    "headphones": (("wireless", "foldable", "noise", "cancelling"), {"color": ("black", "silver", "blue")}),
}
BRANDS = ("acme", "nordik", "veloz", "kumo", "brisa", "tallis")


@dataclass(frozen=True)
class Product:
    id: str
    category: str
    title: str
    attributes: frozenset[str]
    options: dict[str, tuple[str, ...]]
    price: int

    def text(self) -> str:
        """What search ranks: the title and the attributes."""
        return f"{self.title} {' '.join(sorted(self.attributes))}"


@dataclass(frozen=True)
class Goal:
    """What the instruction asks for (WebShop's U: type, attributes, options, price)."""

    category: str
    attributes: frozenset[str]
    options: dict[str, str]
    max_price: int
    text: str


def catalogue(seed: int, size: int) -> tuple[Product, ...]:
    """``size`` products for ``seed`` (a fixed function of both)."""
    rng = random.Random(f"webshop-catalogue:{seed}")
    products = []
    for index in range(size):
        category = rng.choice(sorted(CATEGORIES))
        attributes, option_values = CATEGORIES[category]
        chosen = frozenset(rng.sample(attributes, rng.randint(1, 3)))
        options = {name: tuple(sorted(rng.sample(values, rng.randint(1, len(values)))))
                   for name, values in option_values.items()}
        brand = rng.choice(BRANDS)
        title = f"{brand} {' '.join(sorted(chosen))} {category}"
        products.append(Product(f"item{index}", category, title, chosen, options, rng.randint(5, 95)))
    return tuple(products)


def instruction(rng: random.Random, products: tuple[Product, ...]) -> Goal:
    """A goal that ``products`` can meet fully: built from one product's features."""
    product = rng.choice(products)
    attributes = frozenset(rng.sample(sorted(product.attributes), rng.randint(1, len(product.attributes))))
    options = {name: rng.choice(values) for name, values in product.options.items()}
    max_price = min(100, product.price + rng.randint(1, 20))
    wants = " and ".join(f"{name} {value}" for name, value in options.items())
    text = (f"i want a {' '.join(sorted(attributes))} {product.category} with {wants} , "
            f"price lower than {max_price} dollars")
    return Goal(product.category, attributes, options, max_price, text)
