"""The local torch + transformers backend: tiny warm-started policy or any HF causal LM."""
