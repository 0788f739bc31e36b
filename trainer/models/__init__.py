"""Models: the built-ins (sage, gat, rgcn), the scorers, and the user-model contract."""
