"""A Griffe extension for the API reference: the docstrings' Sphinx roles become links.

agentlib's docstrings cross-reference in reStructuredText (``:class:`ModelError```), which
Markdown shows as it is. This turns a role naming a public object of agentlib or
agentlib_sync into a link to its reference entry, any other role into code, and a literal
block's ``::`` into ``:`` (its indented lines already read as code in Markdown). A class's
private bases (``_Record``) have no entry: their public members are shown as the class's own,
and they are left out of its "Bases" line.

Options a constructor takes as ``**options: Unpack[ChatOptions]`` are listed one by one by
Griffe's ``unpack_typeddict`` extension, with ``...`` for their defaults (a TypedDict holds
none): each gets the default of the attrs field that keeps it, as ``repr`` shows it.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import attrs
import griffe

import agentlib

ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|obj|mod):`(~?)([\w.]+)`(?:\\ )?")
LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.MULTILINE)


#: The modules whose public names have reference entries (or link to agentlib's).
MODULES = (
    "agentlib",
    "agentlib_sync",
    "agentlib.store",
    "agentlib.testing",
    "agentlib.testing.store_contract",
)
#: Modules that have an entry of their own, shown whole.
MODULE_ENTRIES = ("agentlib.testing.store_contract",)
#: Where a name given without its module is looked up, in order.
UNQUALIFIED = ("agentlib", "agentlib.store")


def _target(name: str) -> str | None:
    """The reference entry ``name`` stands for, or None if it has none."""
    if name in MODULE_ENTRIES:
        return name
    if name.split(".")[0] in ("agentlib", "agentlib_sync"):
        within = [module for module in MODULES if name.startswith(f"{module}.")]
        if not within:
            return None
        module = max(within, key=len)
        places = [(module, name[len(module) + 1 :])]
    else:
        places = [(module, name) for module in UNQUALIFIED]
    for module, rest in places:
        path = _entry(module, rest)
        if path is not None:
            return path
    return None


def _entry(module_name: str, rest: str) -> str | None:
    """The entry of ``rest`` (``"Store.flush"``) in the module, or None if it has none. A
    name the module shares with agentlib (the same object) has agentlib's entry."""
    public, *members = rest.split(".")
    module = importlib.import_module(module_name)
    if public not in module.__all__:
        return None
    value: Any = getattr(module, public)
    shared = public in agentlib.__all__ and getattr(agentlib, public) is value
    if shared:
        module_name = "agentlib"
    for member in members:
        if member.startswith("_") or not hasattr(value, member):
            return None
        value = getattr(value, member)
    return f"{module_name}.{rest}"


def _link(match: re.Match[str]) -> str:
    short, name = match.group(1), match.group(2)
    shown = name.rsplit(".", 1)[-1] if short else name
    target = _target(name)
    return f"`{shown}`" if target is None else f"[`{shown}`][{target}]"


class SphinxRoles(griffe.Extension):
    """Rewrites each docstring once the package is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = ROLE.sub(_link, obj.docstring.value)
            obj.docstring.value = LITERAL_BLOCK.sub(":", text)

    def on_function(self, *, func: griffe.Function, **kwargs: Any) -> None:
        # After unpack_typeddict's (mkdocs.yml lists it first).
        if func.name == "__init__" and isinstance(func.parent, griffe.Class):
            _show_option_defaults(func, func.parent)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for cls in _classes(pkg):
            private = [base for base in cls.bases if str(base).startswith("_")]
            if not private:
                continue
            public_bases = [base for base in cls.resolved_bases if not base.name.startswith("_")]
            from_public = {name for base in public_bases for name in base.all_members}
            for name, member in cls.inherited_members.items():
                if not name.startswith("_") and name not in from_public:
                    cls.set_member(name, member)
            cls.bases = [base for base in cls.bases if base not in private]


def _classes(module: griffe.Module) -> list[griffe.Class]:
    found: list[griffe.Class] = []
    for member in module.members.values():
        if isinstance(member, griffe.Module):
            found += _classes(member)
        elif isinstance(member, griffe.Class):
            found.append(member)
    return found


def _show_option_defaults(init: griffe.Function, cls: griffe.Class) -> None:
    unset = [parameter for parameter in init.parameters if str(parameter.default) == "..."]
    if not unset:
        return
    runtime = getattr(importlib.import_module(cls.module.path), cls.name)
    if not attrs.has(runtime):  # the TypedDict itself, given an __init__ by the extension
        return
    fields = {field.alias: field for field in attrs.fields(runtime)}
    shown: dict[str, str] = {}
    for parameter in unset:
        default = fields[parameter.name].default
        if isinstance(default, attrs.Factory):
            default = default.factory()
        parameter.default = shown[parameter.name] = repr(default)
    for section in init.docstring.parsed if init.docstring is not None else ():
        if section.kind is griffe.DocstringSectionKind.parameters:
            for item in section.value:
                if item.name in shown:
                    item.value = shown[item.name]
                    item.description = ROLE.sub(_link, item.description)
