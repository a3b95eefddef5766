"""Runners: local (in-process), train (Ray Train V2), tune (Ray Tune), and the results tables they write."""
