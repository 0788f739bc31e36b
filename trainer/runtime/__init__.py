"""Processes: launch, rendezvous, interfaces, checkpoints, health, outputs."""
