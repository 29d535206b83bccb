"""What both job processes (judge and contestant) run on: their socket messages, the slot exchange, output comparison and checks, the early CUDA start, and shared process helpers."""
