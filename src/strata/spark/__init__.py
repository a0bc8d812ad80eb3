"""The Spark data plane: Strata's pipelines on PySpark Structured Streaming."""

from strata.spark.java import JavaError, check_java
from strata.spark.session import build_session, fair_allocation_xml

__all__ = ["JavaError", "build_session", "check_java", "fair_allocation_xml"]
