"""Trust-based GPU-sharing policy: a pure function from (tenant, config) to a decision."""
