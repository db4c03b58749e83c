"""The class of an optimizer from outside this package, from its source (merit_repro.config.optimizer_sources):
a library's class, or the object an installed package registers in the entry-point group merit_repro.optimizers.

Imports happen here, in the job that trains (or in the check that builds each setting once), and only of what the
source names: a module of LIBRARIES, or an entry point that the user installed a package to provide.
"""

import importlib
import inspect

import torch

from merit_repro.config.optimizer_sources import LIBRARIES, installed_version, registered


def load(source):
    """The optimizer class (or factory) a source names, once its package is installed at the source's version."""
    package, wanted = source["package"], source.get("version")
    installed = installed_version(package)
    if installed is None:
        raise ValueError(f"package {package} is not installed: pip install '{package}=={wanted}'" if wanted
                         else f"package {package} is not installed: pip install {package}")
    if wanted is None:
        raise ValueError(f"the optimizer's source names no version of {package} (installed: {installed}); the "
                         "workflow writes it in, a cell file names it (optimizer_source.version)")
    if installed != wanted:
        raise ValueError(f"this cell trains with {package} {wanted} but {installed} is installed: pip install "
                         f"'{package}=={wanted}' (another version is another cell)")
    if "class" in source:
        module, _, attr = source["class"].rpartition(".")
        if module not in LIBRARIES:
            raise ValueError(f"{source['class']!r} is not a class of a known library ({', '.join(LIBRARIES)})")
        found = getattr(importlib.import_module(module), attr, None)
        if found is None:
            raise ValueError(f"{module} ({package} {installed}) has no {attr!r}")
        if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):   # a library's helper
            raise ValueError(f"{source['class']} ({package} {installed}) is not a torch.optim.Optimizer class")
    else:
        entry_point = registered(source["entry_point"], package)
        if entry_point is None:
            raise ValueError(f"package {package} {installed} registers no optimizer {source['entry_point']!r}")
        found = entry_point.load()
    if not callable(found):
        raise ValueError(f"{found!r} from {package} is not an optimizer class")
    return found


def build_external(name, source, params, hparams):
    """The optimizer from outside over params, with every hyperparameter one it names: a key that an optimizer
    taking **kwargs would swallow is refused by name, as a mistyped one would be ignored."""
    cls = load(source)
    unnamed, named = swallowed(cls, hparams)
    if unnamed:
        raise ValueError(f"optimizer {name!r} does not name {', '.join(unnamed)} among its hyperparameters "
                         f"({', '.join(n for n in named if n != 'params')}) but would take it through **kwargs, where "
                         "a mistyped key is silently ignored; remove or rename it")
    try:
        optimizer = cls(params, **hparams)
    except TypeError as err:
        raise ValueError(f"Bad hyperparameter for optimizer {name!r}: {err}") from None
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer {name!r} ({source.get('class') or source['entry_point']} from "
                         f"{source['package']}) built a {type(optimizer).__name__}, not a torch.optim.Optimizer")
    return optimizer


def swallowed(cls, hparams):
    """The hyperparameters that an optimizer taking **kwargs would take without naming them (so a mistyped key is
    ignored, or stored and never read), and the names it does take; nothing for one that names all it takes."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):   # no signature to read: building it is the only check
        return [], []
    named = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not any(p.kind == p.VAR_KEYWORD for p in parameters):
        return [], named
    return sorted(set(hparams) - set(named)), named
