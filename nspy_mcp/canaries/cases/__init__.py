"""The canary candidates and their reference: copied into a job's workdir and run there.

Nothing imports these modules in the server or the CLI: the runner (`nspy_mcp.canaries`)
reads each file's header with `ast` and copies the files into a temporary folder, where
only the job's processes import them (the reference in the judge, each candidate in the
contestant). They ship inside the package so that a plain install can run them.
"""
