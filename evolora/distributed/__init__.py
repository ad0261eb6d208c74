"""The population on a Ray cluster: the driver's sharded bank, the worker actor, recovery."""
