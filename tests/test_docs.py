"""The documentation stays true to the code: its Python examples run, its links resolve,
and the README opens with the fresh-machine commands."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "docs/architecture.md", "docs/dsl.md", "docs/cli.md", "docs/api.md",
        "docs/errors.md"]


def read(rel: str) -> str:
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_opens_with_the_two_commands():
    text = read("README.md")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines[0].startswith("# ") and lines[1] == "```sh"   # right under the title
    first = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first.group(1).splitlines() == [
        'pip install -e ".[test]" && polycomp compile examples/matmul_relu.py --target cuda '
        '-o build/matmul_relu.cu',
        "python -m pytest -n 2",
    ]


@pytest.mark.parametrize("doc", DOCS)
def test_python_examples_run(doc, capsys):
    blocks = python_blocks(read(doc))
    namespace = {"__name__": f"doc_{os.path.basename(doc)}"}
    for k, block in enumerate(blocks):  # blocks of one page share a namespace, in order
        exec(compile(block, f"{doc} (python block {k})", "exec"), namespace)
    capsys.readouterr()


@pytest.mark.parametrize("doc", DOCS)
def test_links_and_paths_exist(doc):
    text = read(doc)
    base = os.path.dirname(os.path.join(ROOT, doc))
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert os.path.exists(os.path.join(base, target)), f"{doc}: broken link {target}"
    for path in set(re.findall(r"\bexamples/[a-z0-9_]+\.py\b", text)):
        assert os.path.exists(os.path.join(ROOT, path)), f"{doc}: no file {path}"


def test_every_doc_page_is_linked_from_the_readme():
    readme = read("README.md")
    for page in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if page.endswith(".md"):
            assert f"(docs/{page})" in readme, f"README does not link docs/{page}"
