"""evolora: population-based self-play for LLMs, with LoRA adapters as genomes.

Implements PopuLoRA (Castanyer et al., "Co-Evolving LLM Populations for Reasoning
Self-Play", arXiv 2605.16727): many LoRA adapters on one frozen base model play the
roles of teachers and students, improve by gradient RL, and evolve in LoRA weight space.
"""

__version__ = "0.1.0"
