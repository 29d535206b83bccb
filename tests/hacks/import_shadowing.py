"""Import shadowing: a torch.py dropped in the candidate's directory.

Hack: import shadowing (a module named like a framework beside the candidate, so the
  harness, the reference or the timer import the agent's code instead): shadowing/torch.py
  raises if anything imports it; shadowing/candidate.py is an honest softmax.
Expect: pass
Expect trust: suspicious
Expect reference trust: suspicious
Spec: shadowing/candidate.py:candidate
Runs alone: the shadowing file concerns the whole job.
Defence: the judge and the contestant import the installed frameworks before any user
  code, and user directories go to the end of sys.path, so the look-alike is never
  imported; the file is reported, and every row of the job is made suspicious.
"""
