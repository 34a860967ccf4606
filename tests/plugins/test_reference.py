"""A KL reference fine-tuned on other demonstrations (model.options.reference_env_options,
backend_local/reference.py): built once and cached, different from the policy, fitted to
its own demonstrations, refused where no KL term reads it or its words are unknown."""

from __future__ import annotations

import pytest
import torch

from mirage.core.errors import ConfigError
from mirage.core.rl.demos import collect_demonstrations
from mirage.core.run.validate import build_config
from mirage.envs.frozenlake import FrozenLake
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.backend_local.options import LocalOptions

GENERIC = {"generic_share": 1.0}


def grammar_config(tiny_config, **reference):
    data = tiny_config()
    data["env"]["options"] = {"generic_style": "grammar", "generic_share": 0.5}  # every grammar word seen
    data["model"]["options"] |= {"warmstart_episodes": 400, "warmstart_steps": 60, **reference}
    data["algorithm"] = {"kl_coef": 0.5}
    return build_config(data)


def prepared(config, cache):
    backend = LocalBackend(config, LocalOptions(**config.model.options))
    facts = backend.prepare(FrozenLake, cache, progress=False)
    return backend, facts


def response_loss(model, tokenizer, pairs) -> float:
    """Mean next-token loss of ``model`` on the responses of ``pairs``."""
    total = 0.0
    for context, response in pairs:
        c = tokenizer.encode(context, add_special_tokens=False)
        r = tokenizer.encode(response, add_special_tokens=False) + [tokenizer.eos_token_id]
        ids = torch.tensor([c + r])
        labels = torch.tensor([[-100] * len(c) + r])
        with torch.no_grad():
            total += float(model(input_ids=ids, labels=labels).loss)
    return total / len(pairs)


def test_the_reference_fits_its_own_demonstrations_and_is_cached(tiny_config, tmp_path):
    config = grammar_config(tiny_config, reference_env_options=GENERIC, reference_steps=60)
    backend, facts = prepared(config, tmp_path)
    assert facts["reference_source"] == "built" and backend.has_reference()
    policy, reference = backend.model.state_dict(), backend._reference.state_dict()
    assert any(not torch.equal(policy[k], reference[k]) for k in policy)
    assert not any(p.requires_grad for p in backend._reference.parameters())
    # the reference predicts generic turns better than the policy, state turns worse
    generic = collect_demonstrations(FrozenLake, FrozenLake.Options(generic_style="grammar", **GENERIC),
                                     config.env, 8, 99).pairs[:16]
    state = collect_demonstrations(FrozenLake, FrozenLake.Options(generic_style="grammar", generic_share=0.0),
                                   config.env, 8, 99).pairs[:16]
    tokenizer = backend.tokenizer
    assert response_loss(backend._reference, tokenizer, generic) < response_loss(backend.model, tokenizer, generic)
    assert response_loss(backend._reference, tokenizer, state) > response_loss(backend.model, tokenizer, state)
    again, facts = prepared(config, tmp_path)
    assert facts["reference_source"] == "cache"
    assert all(torch.equal(reference[k], again._reference.state_dict()[k]) for k in reference)
    other, facts = prepared(grammar_config(tiny_config, reference_env_options=GENERIC, reference_steps=61),
                            tmp_path)
    assert facts["reference_source"] == "built"  # its settings are part of the key


def test_a_reference_with_unknown_words_is_refused(tiny_config, tmp_path):
    data = tiny_config()  # the default few generic sentences: no grammar words in the vocabulary
    data["model"]["options"] |= {"reference_env_options": {"generic_share": 1.0, "generic_style": "grammar"}}
    data["algorithm"] = {"kl_coef": 0.5}
    config = build_config(data)
    with pytest.raises(ConfigError, match="words the policy's tokenizer does not know"):
        prepared(config, tmp_path)


def test_a_reference_without_a_kl_term_is_refused(tiny_config):
    data = tiny_config()
    data["model"]["options"] |= {"reference_env_options": GENERIC}
    problem = LocalBackend.config_problem(build_config(data))
    assert problem is not None and "algorithm.kl_coef is 0" in problem
