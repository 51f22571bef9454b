"""The workbench's machinery: device integration, compile path, lowering and the simulator.

Importing ``backend`` registers nothing; ``import workbench`` (or torch's backend autoload)
registers the ``neuron`` device.
"""
