"""Optimizers from outside this package, as a config names them: a well-kept library's class, or an optimizer an
installed package registers under the entry-point group ``merit_repro.optimizers``.

    optimizers:
      lion: {class: pytorch_optimizer.Lion, label: Lion, betas: [0.9, 0.99], weight_decay: 1.0}
      signsgd: {entry_point: signsgd, package: merit-signsgd-example, weight_decay: 0.1}

A config never names a module: a class is one of LIBRARIES' modules and an attribute of it; an entry point is a
name its package chose. What they resolve to (package, version, class or entry point) is the optimizer's
``source``, part of each of its cells' identity. This module reads installed packages' metadata only; it imports
none of them (merit_repro.optim.sources does, in a job), and needs the standard library only, as merit_repro.optim
does. Its errors are ValueErrors with the fix.
"""

import itertools
import re
from importlib import metadata

from .registry import FIGURE_LINE_COLORS, OPTIMIZERS

ENTRY_POINT_GROUP = "merit_repro.optimizers"
# The libraries whose classes a config may name: module -> the distribution (and pip name) that provides it.
LIBRARIES = {"torch.optim": "torch", "pytorch_optimizer": "pytorch-optimizer", "heavyball": "heavyball"}
# An optimizer's keys that say where it comes from and how the report shows it; the rest are its keyword arguments.
SOURCE_KEYS = ("class", "entry_point", "package", "version")
STYLE_KEYS = ("label", "color")
# Colours for optimizers without one, after the registry's (tab10 is taken by the built-ins and the QK-norm lines).
PALETTE = ("black", "gold", "navy", "magenta", "teal", "lime", "crimson", "sienna", "indigo", "darkkhaki")
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")   # fullmatch: no dunder, no dot, no trailing newline
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")   # an optimizer's key is a path segment and a wildcard value


def is_external(spec):
    return bool(spec) and ("class" in spec or "entry_point" in spec)


def external_names(config):
    return sorted(name for name, spec in config.get("optimizers", {}).items() if is_external(spec))


def optimizer_names(config):
    """Every name a cell's optimizer may take under this config: the built-ins and the config's own."""
    return sorted(set(OPTIMIZERS) | set(config.get("optimizers", {})))


def normalized(package):
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", package).lower()


def declared_package(spec):
    """The distribution an optimizer comes from, by the config's words alone."""
    if "class" in spec:
        return LIBRARIES.get(str(spec["class"]).rpartition(".")[0])
    return spec.get("package")


def form_problems(name, spec):
    """What is wrong with how optimizers.<name> names its source, without looking at what is installed."""
    where, libraries = f"optimizers.{name}", ", ".join(f"{m}.<Class>" for m in LIBRARIES)
    if not _NAME.fullmatch(name):
        return [f"{where}: an optimizer's name is a path segment: letters, digits, _ . -, at most 64"]
    if name in FIGURE_LINE_COLORS:
        return [f"{where}: {name!r} names a figure's own line; give the optimizer another name"]
    if name in OPTIMIZERS:
        if is_external(spec):
            return [f"{where} is a built-in optimizer; give the one from outside another name"]
        stray = [key for key in ("package", "version") if key in spec]
        return [f"{where} is built in: {', '.join(stray)} apply to an optimizer from outside only"] if stray else []
    if not is_external(spec):
        return [f"{where} is not a built-in optimizer ({', '.join(sorted(OPTIMIZERS))}); name where it comes from: "
                f"class: one of {libraries}, or entry_point: <name> with package: <the package that registers it>"]
    if "class" in spec and "entry_point" in spec:
        return [f"{where} names both a class and an entry point; keep one"]
    if "class" in spec:
        module, _, attr = str(spec["class"]).rpartition(".")
        if module not in LIBRARIES or not _IDENTIFIER.fullmatch(attr):
            return [f"{where}.class={spec['class']!r} is not a class of a known library; use one of {libraries} "
                    f"(a config never names another module: register other optimizers through the entry-point "
                    f"group {ENTRY_POINT_GROUP})"]
        if "package" in spec and normalized(str(spec["package"])) != normalized(LIBRARIES[module]):
            return [f"{where}.package={spec['package']!r}: {module} comes from {LIBRARIES[module]}; drop package"]
        return []
    if not _IDENTIFIER.fullmatch(str(spec["entry_point"])):
        return [f"{where}.entry_point={spec['entry_point']!r} is not an entry-point name (letters, digits, _)"]
    if not spec.get("package"):
        return [f"{where} names entry point {spec['entry_point']!r} without package: name the package that "
                "registers it, so that a machine without it says what to install"]
    if not _PACKAGE.fullmatch(str(spec["package"])):
        return [f"{where}.package={spec['package']!r} is not a package name (letters, digits, . _ -)"]
    return []


def installed_version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def registered_by(package):
    """{name: entry point} of the optimizers that package registers in group ENTRY_POINT_GROUP."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
            if ep.dist is not None and normalized(ep.dist.name) == normalized(package)}


def registered(entry_point, package):
    """The entry point of group ENTRY_POINT_GROUP called entry_point that package provides, or None."""
    return registered_by(package).get(entry_point)


def resolve(name, spec):
    """The source of an optimizer from outside: {package, version, class | entry_point}, from the installed
    package's metadata; a ValueError naming what to install when it is not there or not the pinned version."""
    where, package = f"optimizers.{name}", declared_package(spec)
    version = installed_version(package)
    if version is None:
        raise ValueError(f"{where} needs package {package}, which is not installed: pip install {package}")
    found = registered_by(package) if "entry_point" in spec else {}
    if "entry_point" in spec and spec["entry_point"] not in found:
        raise ValueError(f"{where}: package {package} {version} registers no optimizer {spec['entry_point']!r} in "
                         f"entry-point group {ENTRY_POINT_GROUP} (it registers: {', '.join(sorted(found)) or 'none'}); "
                         "fix entry_point, or install the version of the package that registers it")
    pinned = spec.get("version")
    if pinned is not None and str(pinned) != version:
        raise ValueError(f"{where} pins {package} {pinned} but {version} is installed: pip install "
                         f"'{package}=={pinned}', or change the pin (another version trains other cells)")
    return {**source(name, spec), "version": version}


def source(name, spec):
    """The source the config gives an optimizer (its version as pinned), without looking at what is installed;
    None for a built-in."""
    if not is_external(spec):
        return None
    kind = "class" if "class" in spec else "entry_point"
    return {"package": declared_package(spec), "version": None if spec.get("version") is None else str(spec["version"]),
            kind: spec[kind]}


def pin(config, installed_here=True):
    """Each optimizer from outside with its installed version written in (optimizers.<name>.version), checked
    against a version the config pins; ValueErrors name what to install. The version is then part of every cell
    of that optimizer, of the bundle's config, and of what a rebuild checks its runs against.

    installed_here=False: the jobs run in another environment than this process (Snakemake's --sdm conda), whose
    packages this process cannot see; the config must then pin each version, which each job checks as it builds."""
    problems = [p for name, spec in config.get("optimizers", {}).items() for p in form_problems(name, spec or {})]
    if problems:
        raise ValueError("invalid workflow config: " + "; ".join(problems))
    for name in external_names(config):
        spec = config["optimizers"][name]
        if installed_here:
            spec["version"] = resolve(name, spec)["version"]
        elif spec.get("version") is None:
            raise ValueError(f"optimizers.{name}: the jobs run in the workflow/envs/merit.yaml environment (--sdm conda), "
                             f"where this workflow cannot read {declared_package(spec)}'s version; pin it "
                             f"(optimizers.{name}.version) and add the package to workflow/envs/merit.yaml")
    return config


def with_versions_of(config, theirs):
    """config with each optimizer from outside that names no version given the one of the same optimizer in
    theirs (a bundle's config, which has them written in): a rebuild from a bundle with the config it was trained
    with compares equal, and needs no package installed."""
    specs = theirs.get("optimizers") if isinstance(theirs, dict) else None   # a bundle's: data from elsewhere
    for name in external_names(config) if isinstance(specs, dict) else ():
        spec, their = config["optimizers"][name], specs.get(name)
        if not isinstance(their, dict) or spec.get("version") is not None or not isinstance(their.get("version"), str):
            continue
        if all(spec.get(k) == their.get(k) for k in SOURCE_KEYS if k != "version"):
            spec["version"] = their["version"]
    return config


def styles(config):
    """{optimizer name: (label, colour)} for every optimizer the config may use: the registry's for the built-ins,
    then the config's own label and color, and for an optimizer without a colour the next one of PALETTE."""
    specs = config.get("optimizers", {})
    taken = {spec.get("color") for spec in specs.values() if spec}
    free = itertools.cycle([c for c in PALETTE if c not in taken] or PALETTE)
    out = {}
    for name in optimizer_names(config):
        spec, built_in = specs.get(name) or {}, OPTIMIZERS.get(name)
        label = spec.get("label") or (built_in.label if built_in else name)
        color = spec.get("color") or (built_in.color if built_in else next(free))
        out[name] = (label, color)
    return out
