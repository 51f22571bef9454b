"""The NeuronCore (and GPU) simulator. Pure Python + numpy: never imports torch or IPython."""
