"""The references: ``Session`` and ``Turn``, and ``open_runtime``, the front door."""
