"""roll: reinforcement-learning post-training of language models (RLVR and agentic RL)."""

__version__ = "0.1.0"
