"""The README is read in minutes and the rest lives in docs/: every page linked from the README, no link dead."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted((REPO / "docs").glob("*.md"))
DOCUMENTS = [REPO / "README.md", REPO / "config" / "README.md", *PAGES]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    return {slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 210, len(lines)
    commands = [line.strip() for line in lines if line.startswith("    ")]
    assert commands[:2] == ["bash scripts/setup.sh && . .venv/bin/activate && snakemake --cores 2",
                            '. .venv/bin/activate && python -m pytest -q -m "not slow"'], commands[:2]


def test_every_docs_page_is_linked_from_the_readme():
    linked = {Path(target.split("#")[0]).name for target in LINK.findall((REPO / "README.md").read_text())
              if target.startswith("docs/")}
    assert PAGES and linked == {page.name for page in PAGES}, linked


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_link_is_dead(document):
    dead = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"^(https?|mailto):", target):
            continue
        where, _, anchor = target.partition("#")
        path = (document.parent / where).resolve() if where else document
        if not path.exists():
            dead.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            dead.append(target)
    assert not dead, dead


def test_the_workflow_catalogs_usage_is_the_readmes():
    """.snakemake-workflow-catalog.yml: the catalog's usage section, with the flags the README's demo command gives."""
    import yaml

    usage = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert f"snakemake {usage['mandatory-flags']['flags']}" in (REPO / "README.md").read_text()
    assert usage["software-stack-deployment"]["conda"] and (REPO / "workflow" / "envs" / "merit.yaml").is_file()
