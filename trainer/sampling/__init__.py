"""Sampling: a part in memory, the one-hop kernel, the RPC part server, multi-hop blocks."""
