"""The generation engine: batched, multi-adapter rollouts and their log-probs."""
