"""Decision-level rewards (performance, cost, completeness) and advantage estimators."""
