"""Config files are data: each is read again strictly before the workflow uses what Snakemake loaded.

    python -m merit_repro.config.configfiles FILE [FILE ...]    # check a config received from elsewhere

Refused, with the file and line: a duplicate key (YAML keeps the last one silently), an anchor or
alias (a few lines can expand to gigabytes: the "billion laughs"), a tag that asks for a Python
object, and ``__use_yte__`` (it makes Snakemake evaluate the file as a YTE template, i.e. run the
code it contains) unless ``MERIT_ALLOW_CONFIG_TEMPLATES=1`` says it is wanted.

Snakemake evaluates YTE templates while it loads ``--configfile``, before any workflow code runs;
the workflow then refuses to go on, but what the template ran has run. A config from elsewhere is
checked with this module's command first: it only parses, and never evaluates anything.
"""

import copy
import functools
import os
import sys
from pathlib import Path

import yaml

from merit_repro.utils import UserError, cli

ALLOW_TEMPLATES = "MERIT_ALLOW_CONFIG_TEMPLATES"
# lm-eval task YAMLs may say `!function module.name`, which imports Python from their folder: a task folder from
# elsewhere (zeroshot.task_dirs) is code, used only when this is set to 1 (merit_repro.plan.validate).
ALLOW_TASK_DIRS = "MERIT_ALLOW_TASK_DIRS"
SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


def _where(path, mark):
    return f"{path}, line {mark.line + 1}"


def problems(path):
    """What makes the file at path not plain data, one line each (empty when it is)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        return [f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); save it as UTF-8"]
    found = []
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                found.append(f"{_where(path, event.start_mark)}: YAML anchors and aliases are refused (one alias can "
                             "expand to gigabytes); write the values out")
                break
            tag = getattr(event, "tag", None)
            if tag and tag.startswith("tag:yaml.org,2002:python/"):
                found.append(f"{_where(path, event.start_mark)}: the tag {tag} asks for a Python object; a config "
                             "holds plain values only")
                break
        if found:
            return found
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        return [f"{_where(path, mark) if mark else path}: not valid YAML ({getattr(err, 'problem', None) or err})"]
    found += _duplicates(path, root, [])
    if isinstance(root, yaml.MappingNode) and os.environ.get(ALLOW_TEMPLATES) != "1":
        for key, value in root.value:
            if key.value == "__use_yte__" and value.value.lower() not in ("false", "no", "off", "0", "null", "~", ""):
                found.append(f"{_where(path, key.start_mark)}: __use_yte__ makes Snakemake run the file as a YTE "
                             f"template (code); remove it, or set {ALLOW_TEMPLATES}=1 if you wrote that template")
    return found


def _duplicates(path, node, keys):
    found = []
    if isinstance(node, yaml.MappingNode):
        seen = {}
        for key, value in node.value:
            name = (key.tag, key.value) if isinstance(key, yaml.ScalarNode) else None
            if name in seen:
                where = ".".join([*keys, str(key.value)])
                found.append(f"{_where(path, key.start_mark)}: duplicate key {where} (first at line {seen[name]}); "
                             "YAML would keep only the last one: keep one")
            elif name:
                seen[name] = key.start_mark.line + 1
            found += _duplicates(path, value, [*keys, str(getattr(key, "value", "?"))])
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _duplicates(path, item, [*keys[:-1], f"{keys[-1]}[{i}]"] if keys else [f"[{i}]"])
    return found


def schema_problems(config, schema_path):
    """The config's departures from the JSON schema, one short line each: the key path, what is wrong and,
    where the schema says, what is expected (Snakemake's own message prints the whole schema)."""
    import jsonschema

    schema = yaml.safe_load(Path(schema_path).read_text())
    found = []
    for err in jsonschema.Draft202012Validator(schema).iter_errors(config):
        if err.context:   # oneOf / anyOf: the alternative of the value's own kind, else the closest
            same_kind = [e for e in err.context if e.relative_path or e.validator != "type"]
            err = jsonschema.exceptions.best_match(same_kind or err.context)
        where = ".".join(str(p) for p in err.absolute_path) or "the config"
        hint = err.schema.get("description") if isinstance(err.schema, dict) else None
        if isinstance(err.instance, str) and _number_text(err.instance):
            hint = f"YAML reads {err.instance} as text: write it with a dot and a signed exponent, e.g. 1.0e+12"
        found.append(f"{where}: {err.message}" + (f" ({hint})" if hint else ""))
    return sorted(set(found))


def _number_text(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def check_schema(config, schema_path):
    found = schema_problems(config, schema_path)
    if found:
        raise UserError("invalid workflow config: " + "; ".join(found[:20]))


def load(path):
    """A workflow config file read as the workflow reads it, for tools outside Snakemake (merit_repro.plan.cost):
    checked as data, then against the schema of this checkout."""
    check([path])
    config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise UserError(f"{path} is not a workflow config (a YAML mapping)")
    if SCHEMA.exists():
        check_schema(config, SCHEMA)
    return config


@functools.lru_cache(maxsize=None)
def _schema():
    return yaml.safe_load(SCHEMA.read_text())


def schema_defaults(key):
    """The schema's default of a top-level key, with the defaults of its own keys filled in (what Snakemake's
    validation gives a config that leaves the key out): the one place defaults are written."""
    return _filled(_schema()["properties"][key])


def _filled(schema):
    value = copy.deepcopy(schema.get("default"))
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = _filled(sub)
    return value


def with_defaults(config, key):
    """config[key] over the schema's defaults for it (a section given in part keeps the defaults of the rest)."""
    value = config.get(key)
    if isinstance(value, dict):
        return {**schema_defaults(key), **value}
    return schema_defaults(key) if key not in config else value


def check(paths):
    """Raise UserError naming every problem of every config file in paths."""
    found = [p for path in paths for p in problems(path)]
    if found:
        raise UserError("config file refused: " + "; ".join(found))


@cli
def main(argv=None):
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        raise UserError("usage: python -m merit_repro.config.configfiles FILE [FILE ...]")
    check(paths)
    for path in paths:
        print(f"{path}: plain data (no duplicate keys, aliases, object tags or templates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
