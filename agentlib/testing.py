"""Offline models for tests, demos and docs: no network, no key."""

from ._models._scripted import FunctionModel as FunctionModel
from ._models._scripted import ScriptedModel as ScriptedModel

__all__ = ["FunctionModel", "ScriptedModel"]
