"""A seeded synthetic knowledge base for SearchQA: people, companies, cities, countries,
one document per entity, and one- or two-hop questions with verifiable answers.

Names are made of syllables, so no fact can be known without searching. A one-hop
question needs one document ("Where was Kalo Ruven born ?"); a two-hop question needs
the document of an entity named in the first ("In which country was Kalo Ruven born ?").
"""

from __future__ import annotations

import random
from dataclasses import dataclass

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")
PROFESSIONS = ("teacher", "engineer", "painter", "doctor", "farmer", "pilot", "chef", "writer")
PRODUCTS = ("bicycles", "lamps", "tea", "shoes", "radios", "maps", "clocks", "paper")


@dataclass(frozen=True)
class Question:
    """A question, its answer, and the (query, answer-bearing entity) hops that solve it."""

    text: str
    answer: str
    hops: tuple[str, ...]  # the search queries, in order
    bridge: str | None  # two-hop: the entity found by the first search (the careless answer)


@dataclass(frozen=True)
class KnowledgeBase:
    documents: tuple[str, ...]
    questions: tuple[Question, ...]


def build(seed: int, people: int) -> KnowledgeBase:
    """The knowledge base for ``seed`` with ``people`` people (a fixed function of both)."""
    rng = random.Random(f"searchqa-kb:{seed}")
    names = _Names(rng)
    countries = [names.word(3) for _ in range(max(3, people // 12))]
    cities = {names.word(2): rng.choice(countries) for _ in range(max(6, people // 4))}
    city_names = sorted(cities)
    companies = {f"{names.word(2)} {rng.choice(('Labs', 'Works', 'Group'))}": rng.choice(city_names)
                 for _ in range(max(4, people // 5))}
    capitals = {country: rng.choice([c for c in city_names if cities[c] == country] or city_names)
                for country in countries}
    docs = [f"{country} : {country} is a country . Its capital is {capitals[country]} ."
            for country in countries]
    docs += [f"{city} : {city} is a city in {cities[city]} ." for city in city_names]
    products = {company: rng.choice(PRODUCTS) for company in companies}
    docs += [f"{company} : {company} is a company based in {city} . It makes {products[company]} ."
             for company, city in companies.items()]
    questions = []
    for _ in range(people):
        person = f"{names.word(2)} {names.word(2)}"
        city, company = rng.choice(city_names), rng.choice(sorted(companies))
        job = rng.choice(PROFESSIONS)
        docs.append(f"{person} : {person} is a {job} . {person} was born in {city} and works for {company} .")
        questions += [
            Question(f"Where was {person} born ?", city, (person,), None),
            Question(f"Which company does {person} work for ?", company, (person,), None),
            Question(f"In which country was {person} born ?", cities[city], (person, f"{city} city"), city),
            Question(f"In which city is the company that {person} works for based ?",
                     companies[company], (person, f"{company} company"), company),
        ]
    for country in countries:
        questions.append(Question(f"What is the capital of {country} ?", capitals[country],
                                  (f"{country} country",), None))
    return KnowledgeBase(tuple(docs), tuple(questions))


class _Names:
    """Unique capitalised syllable words."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def word(self, syllables: int) -> str:
        while True:
            word = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(syllables))
            if word not in self.used:
                self.used.add(word)
                return word.capitalize()
