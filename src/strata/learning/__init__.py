"""Learning the model from observations: resource functions (cost per record, selectivity) per operator.

The planner (L0) is only as good as its resource functions. ``resource``
fits each operator's cost per record and selectivity from what an engine
measured, and writes them back into a :class:`~strata.model.Scenario` so the
next epoch plans with observed numbers instead of the spec's priors.
"""

from strata.learning.resource import Estimate, ResourceLearner, attribute, mean_offered_rates

__all__ = ["Estimate", "ResourceLearner", "attribute", "mean_offered_rates"]
