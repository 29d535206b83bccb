"""How a job's processes are started, limited and ended, run by the server (the judge it
starts) and by the judge (the contestant it starts): the sandbox that starts, limits and
kills them, the contestant's launch, the judge's seat, and the call a limit killed. What
only the server runs on top of this, its pre-started judges, is `nsight_core.standby`."""
