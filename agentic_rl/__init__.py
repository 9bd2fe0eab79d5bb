"""agentic_rl: multi-turn agentic RL of language-model policies in JAX."""
