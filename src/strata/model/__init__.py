"""Strata's one domain model: clusters, jobs, templates, operators, streams,
resource and value functions, and spec loading (SODA's vocabulary, DESIGN.md)."""

from strata.model.cluster import Cluster, Node, NodeGroup, Rack
from strata.model.functions import (
    IdentityValue,
    LinearCapacity,
    LinearValue,
    PiecewiseLinearCapacity,
    PiecewiseLinearValue,
    StepValue,
)
from strata.model.graph import chosen_templates, job_maps, joined_graph, topological_order
from strata.model.importance import importance, offered_rates, propagate, scenario_importance
from strata.model.job import (
    KEYED_KINDS,
    AggregateSpec,
    Constraints,
    Job,
    JoinSpec,
    KeyDistribution,
    Operator,
    OperatorKind,
    SourceSpec,
    Stream,
    Template,
    WindowSpec,
)
from strata.model.scenario import Problem, Scenario, critical_jobs, pe_id, resolve
from strata.model.spec import Located, SpecError, load_scenario, locate_problems, scenario_schema

__all__ = [
    "KEYED_KINDS",
    "AggregateSpec",
    "Cluster",
    "Constraints",
    "IdentityValue",
    "Job",
    "JoinSpec",
    "KeyDistribution",
    "LinearCapacity",
    "LinearValue",
    "Located",
    "Node",
    "NodeGroup",
    "Operator",
    "OperatorKind",
    "PiecewiseLinearCapacity",
    "PiecewiseLinearValue",
    "Problem",
    "Rack",
    "Scenario",
    "SourceSpec",
    "SpecError",
    "StepValue",
    "Stream",
    "Template",
    "WindowSpec",
    "chosen_templates",
    "critical_jobs",
    "importance",
    "job_maps",
    "joined_graph",
    "load_scenario",
    "locate_problems",
    "offered_rates",
    "pe_id",
    "propagate",
    "resolve",
    "scenario_importance",
    "scenario_schema",
    "topological_order",
]
