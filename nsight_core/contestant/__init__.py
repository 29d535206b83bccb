"""The untrusted job process: imports candidates and calls them as the judge says. ``python -m nsight_core.contestant`` runs it."""
