"""Pre-started judges, the server's alone: the pool per GPU (`pool`), one judge as the server
holds it (`prestarted`), the memory it may take (`memory`) and which judges a GPU keeps
(`policy`). The job processes never load it (tests/test_imports.py)."""
