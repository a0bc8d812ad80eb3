"""Learning the model from observations: resource functions (cost per record, selectivity) per operator.

The planner (L0) is only as good as its resource functions. ``resource``
fits each operator's cost per record and selectivity from what an engine
measured, and writes them back into a :class:`~strata.model.Scenario` so the
next epoch plans with observed numbers instead of the spec's priors.
``pacing`` turns a plan and the resource functions into the source rates the
plan admits, and rate caps where the offered load exceeds them.
"""

from strata.learning.pacing import admitted_ingest, rate_caps
from strata.learning.resource import Estimate, ResourceLearner, attribute, mean_offered_rates

__all__ = ["Estimate", "ResourceLearner", "admitted_ingest", "attribute", "mean_offered_rates", "rate_caps"]
