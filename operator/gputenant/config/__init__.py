"""Operator configuration: GPU pools, trust mapping, chart location."""
