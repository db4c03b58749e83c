"""Config files are data: each is read again strictly, as Snakemake reads it, before the workflow uses what Snakemake
loaded.

    python -m merit_repro.config.configfiles FILE [FILE ...]    # check a config received from elsewhere

Refused, with the file and line: a duplicate key (YAML keeps the last one silently; a merge key ``<<`` can hide
one), an anchor or alias (a few lines can expand to gigabytes: the "billion laughs"), a tag that asks for a Python
object, nesting deeper than MAX_DEPTH, and a ``__use_yte__`` key at any level and with any value (it makes
Snakemake evaluate the file as a YTE template, i.e. run the code it contains) unless
``MERIT_ALLOW_CONFIG_TEMPLATES=1`` says it is wanted.

Snakemake loads each ``--configfile`` while it reads its command line (snakemake.settings.types.ConfigSettings:
``json.load``, else ``yte.process_yaml(require_use_yte=True)`` with PyYAML's FullLoader), before it reads the
Snakefile (the ``configfile:`` directive loads its file the same way, while the Snakefile is read): a template
runs there. The workflow's check (workflow/rules/common.smk) then refuses to go on before any job, but what the
template ran has run. A config from elsewhere is checked with this module's command first: it only parses, and
never evaluates anything.
"""

import copy
import functools
import json
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
# A workflow config is at most 6 collections deep; much deeper nesting is refused before a recursive reader (PyYAML's
# composer, json, the schema check) meets Python's recursion limit and ends in a traceback.
MAX_DEPTH = 32


def _where(path, mark):
    return f"{path}, line {mark.line + 1}"


def problems(path):
    """What makes the file at path not plain data, one line each (empty when it is)."""
    return read(path)[1]


def read(path):
    """(config, problems): the file at path as Snakemake reads a config file, and what makes it not plain data, one
    line each (config is None when there are problems). Snakemake reads it as JSON when it parses as JSON, else as
    YAML (YTE's loader: merge keys resolved), and evaluates it as a YTE template when that YAML has a true
    ``__use_yte__`` at the top, so every ``__use_yte__`` key is refused, at any level and with any value (the
    string "false" is true, a merge key lifts one to the top). The checks read YAML nodes, which keep the lines."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        return None, [f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); save it as UTF-8"]
    try:
        found = _event_problems(path, text)
        if found:   # before the composer builds what an alias or a deep nest would make of it
            return None, found
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
            found = _key_problems(path, loader, root, [])
            return (None if found else _as_snakemake_reads(text, loader, root)), found
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = _where(path, mark) if mark else path
        return None, [f"{where}: not valid YAML ({getattr(err, 'problem', None) or err})"]
    except (ValueError, KeyError, AttributeError) as err:   # a tagged value its tag cannot read: !!int x, !!bool x
        return None, [f"{path}: a value cannot be read as the type its tag names ({err!r}); fix it or drop the tag"]


def _event_problems(path, text):
    """Anchors and aliases, tags that ask for Python objects, nesting deeper than MAX_DEPTH: from the parser's
    events, before anything is built."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            return [f"{_where(path, event.start_mark)}: YAML anchors and aliases are refused (one alias can expand to "
                    "gigabytes); write the values out"]
        tag = getattr(event, "tag", None)
        if tag and tag.startswith("tag:yaml.org,2002:python/"):
            return [f"{_where(path, event.start_mark)}: the tag {tag} asks for a Python object; a config holds plain "
                    "values only"]
        depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
        if depth > MAX_DEPTH:
            return [f"{_where(path, event.start_mark)}: nested more than {MAX_DEPTH} levels deep; a workflow config "
                    "needs 6 at most"]
    return []


def _key_problems(path, loader, node, keys):
    """Duplicate keys and ``__use_yte__`` keys in node and below, with merge keys resolved as every YAML loader
    resolves them (so a merged key that repeats one written out is a duplicate too)."""
    found = []
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        seen = {}
        for key, value in node.value:
            name = (key.tag, key.value) if isinstance(key, yaml.ScalarNode) else None
            below = [*keys, str(getattr(key, "value", "?"))]
            where = ".".join(below)
            if name in seen:
                found.append(f"{_where(path, key.start_mark)}: duplicate key {where} (first at line {seen[name]}); "
                             "YAML would silently keep only one: keep one")
            elif name:
                seen[name] = key.start_mark.line + 1
            if name == ("tag:yaml.org,2002:str", "__use_yte__") and os.environ.get(ALLOW_TEMPLATES) != "1":
                found.append(f"{_where(path, key.start_mark)}: the key {where} is refused at any level and with any "
                             "value: __use_yte__ makes Snakemake run the file as a YTE template (code); remove it, or "
                             f"set {ALLOW_TEMPLATES}=1 if you wrote that template")
            found += _key_problems(path, loader, value, below)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _key_problems(path, loader, item, [*keys[:-1], f"{keys[-1]}[{i}]"] if keys else [f"[{i}]"])
    return found


def _as_snakemake_reads(text, loader, root):
    try:
        return json.loads(text)   # Snakemake tries JSON first: `1e5` is a number there, and text in YAML 1.1
    except ValueError:
        return loader.construct_document(root) if root is not None else None


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
        found.append(_kind_problem(config, where, err) or f"{where}: {err.message}" + (f" ({hint})" if hint else ""))
    return sorted(set(found))


# Snakemake's --config reads a value as an int, a float, True or False, else with YAML's BaseLoader: any other word,
# and every item of a list or mapping, arrives as text. A YAML file reads 1e12 (no dot, no signed exponent) as text.
BOOLEAN_WORDS = {"true": "True", "false": "False", "yes": "True", "no": "False"}


def _kind_problem(config, where, err):
    """A value of the wrong kind as --config or YAML makes one, with the fix that works for it; None for others."""
    if err.validator != "type":
        return None
    wanted = {err.validator_value} if isinstance(err.validator_value, str) else set(err.validator_value)
    path = list(err.absolute_path)
    return _text_problem(config, where, path, err, wanted) or _shape_problem(config, path, err.instance, wanted)


def _text_problem(config, where, path, err, wanted):
    """Text where a boolean or a number belongs."""
    value = err.instance
    if not isinstance(value, str):
        return None
    if "boolean" in wanted and value.lower() in BOOLEAN_WORDS:
        word = BOOLEAN_WORDS[value.lower()]
        if len(path) > 1:
            return f"{where}: {value!r} is text, not a boolean: write {word.lower()}, unquoted, in the config file"
        return (f"{where}: {value!r} is text, not a boolean: write --config {where}={word} (Snakemake's --config reads "
                "only True and False as booleans)")
    if "null" in wanted and value.lower() in ("null", "none", "~"):
        return f"{where}: {value!r} is text, not null: write {where}: null in your config file"
    if not (wanted & {"number", "integer"} and _number_text(value)):
        return None
    if len(path) == 2 and isinstance(path[1], int):   # an item of a top-level list: what --config makes of [3]
        return f"{path[0]}: {config[path[0]]!r} holds text, not numbers: " + _in_a_file(config, path[0])
    if "e" in value.lower():
        return (f"{where}: {err.message} (YAML reads {value} as text: write it with a dot and a signed exponent, "
                "e.g. 1.0e+12)")
    return f"{where}: {value!r} is text, not a number: write it unquoted"


def _shape_problem(config, path, value, wanted):
    """A list where a top-level key takes a number, or a single value where it takes a list."""
    if len(path) != 1:
        return None
    key = path[0]
    if isinstance(value, list) and wanted & {"number", "integer"} and "array" not in wanted:
        example = value[0] if value else "N"
        return f"{key}: {value!r} is a list, and {key} takes one number: write --config {key}={example}"
    if "array" in wanted and not isinstance(value, list):
        return f"{key}: {value!r} is not a list, and {key} takes a list: " + _in_a_file(config, key)
    return None


def _in_a_file(config, key):
    """How to give a top-level key a list of numbers, which no --config can."""
    items = config[key] if isinstance(config[key], list) else [config[key]]
    example = json.dumps([_as_number(item) if isinstance(item, str) else item for item in items])
    return f"Snakemake's --config reads a list's items as text, so set it in your config file instead: {key}: {example}"


def _number_text(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def _as_number(text):
    if not _number_text(text):
        return text
    number = float(text)
    return int(number) if number.is_integer() and abs(number) < 2**63 else number


def check_schema(config, schema_path):
    found = schema_problems(config, schema_path)
    if found:
        raise UserError("invalid workflow config: " + "; ".join(found[:20]))


def load(path):
    """A workflow config file read as the workflow reads it, for tools outside Snakemake (merit_repro.plan.cost):
    checked as data, then against the schema of this checkout."""
    (config,) = check([path])
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
    """The config files at paths as Snakemake reads them; a UserError naming every problem of every one."""
    files = [read(path) for path in paths]
    found = [p for _, some in files for p in some]
    if found:
        raise UserError("config file refused: " + "; ".join(found))
    return [config for config, _ in files]


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
