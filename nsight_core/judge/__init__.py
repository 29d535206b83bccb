"""The trusted job process: seeds, inputs, the reference, and the verdict on every output. It never imports candidate code or the contestant's modules."""
