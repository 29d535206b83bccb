"""What this host offers: the environment probe, the metric catalog, ncu's install, and the thermal guard."""
