"""The processes of a job, seen from the server: the sandbox that starts, limits and kills them, the contestant's launch, the judge's seat, and pre-started judges."""
