"""A job resolved once: the engine's configuration (`config`) and a request's plan
(`job_plan`), read by every later stage and process."""
