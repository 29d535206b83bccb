"""A canary job of its own: a check that cannot discriminate needs its own reference.

The main job's softmax at 16 x 64 is checked tightly enough that no answer that ignores
its inputs passes; this folder's reference is a loss whose check cannot tell (see its
header), run as a second, small job (`nspy_mcp.canaries`).
"""
