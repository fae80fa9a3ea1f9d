"""Helpers for testing agents offline: models that need no network and no key, and a guard
that keeps HTTP models from sending requests.

``Agent.override(model=...)`` (a method of :class:`agentlib.Agent`) runs an agent on one of
these models for a ``with`` block.

:mod:`agentlib.testing.store_contract`, imported on its own, is the test suite a store passes;
it needs pytest and pytest-trio.
"""

from .._models._request_guard import block_model_requests as block_model_requests
from .._models._scripted import FunctionModel as FunctionModel
from .._models._scripted import ScriptedModel as ScriptedModel
from .._models._test_model import TestModel as TestModel

__all__ = ["FunctionModel", "ScriptedModel", "TestModel", "block_model_requests"]


def _set_public_module() -> None:
    # Names shown as `agentlib.testing.TestModel`; those agentlib also exports keep its name.
    import agentlib

    for name in __all__:
        if name not in agentlib.__all__:
            globals()[name].__module__ = __name__


_set_public_module()
del _set_public_module
