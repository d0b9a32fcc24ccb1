"""Clusters: reading TF_CONFIG, watching a cluster come together, and a launcher that runs
one on this machine."""
