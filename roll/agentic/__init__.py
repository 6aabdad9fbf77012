"""Agentic RL: multi-turn environments, env managers and the agentic pipeline."""
