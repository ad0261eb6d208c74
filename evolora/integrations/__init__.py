"""Bridges from evolora to other evolutionary-computation libraries, in their own idioms.

* :mod:`evolora.integrations.deap`: a ``deap.base.Toolbox`` whose ``mate``/``mutate``/``select``
  are evolora operators, so ``deap.algorithms.eaSimple`` and ``eaMuPlusLambda`` run on LoRA
  individuals unchanged.
* :mod:`evolora.integrations.evotorch`: an EvoTorch ``Problem`` over flattened LoRA vectors, so
  ``SNES``, ``PGPE``, ``CEM`` and ``GeneticAlgorithm`` run on adapters (``pip install 'evolora[evotorch]'``).
* :mod:`evolora.integrations.sweep`: run one configuration under several operator settings and
  seeds and plot the outcome of each (used by ``notebooks/selection_sweep.ipynb``).

Each submodule is imported on demand, so DEAP's and EvoTorch's import cost is only paid by users.
"""
