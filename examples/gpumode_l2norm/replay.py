"""A submission that cheats: it remakes the inputs from task.yml's public seeds and answers
for those. The judge hands generate_input a secret seed of its own, so this fails."""

from reference import generate_input, ref_kernel
from task import input_t, output_t

PUBLIC_SEEDS = {(8, 100): 4242, (32, 257): 5236, (128, 1024): 31232}


def custom_kernel(data: input_t) -> output_t:
    rows, cols = data.shape
    return ref_kernel(generate_input(rows, cols, PUBLIC_SEEDS[(rows, cols)]))
