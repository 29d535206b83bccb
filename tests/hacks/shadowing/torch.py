"""A look-alike of torch dropped beside a candidate; if it were ever imported it would say so."""

raise ImportError("the shadowing torch.py was imported: the harness let it shadow torch")
