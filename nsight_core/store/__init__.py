"""Results that survive restarts: the result store and each result's manifest."""
