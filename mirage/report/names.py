"""The stored metric names the report reads (the MI proxies at the first turn)."""

SUCCESS = "val/success"  # temperature 0.5, as the paper evaluates
GREEDY = "val_greedy/success"
RETRIEVAL = "mi/first_turn/retrieval_acc"
CHANCE = "mi/first_turn/retrieval_chance"
ENTROPY = "mi/first_turn/policy_entropy"
H_COND = "mi/first_turn/h_cond"
LENGTH = "mi/first_turn/reasoning_tokens"
FORMAT = "mi/first_turn/format_valid"
