"""Offline data sources: real data shipped in packages, procedural generators, real-format loaders.

Nothing here touches the network; a missing optional source raises MissingSourceError naming
the package or file that provides it.
"""
