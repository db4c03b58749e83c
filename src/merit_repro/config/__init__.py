"""The workflow config as data: its files read safely, the JSON schema checks, and the registries of names
(optimizers, model sizes, artifacts) every other stage looks up. Standard library, PyYAML and jsonschema only."""
