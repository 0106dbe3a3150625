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
    install, test = first.group(1).splitlines()
    # the first installs only what compiling needs (no test extras: no torch) and compiles
    assert install == ("pip install -e . && polycomp compile examples/matmul_relu.py "
                       "--target cuda -o build/matmul_relu.cu")
    # the second installs the test extras with the CPU torch build and runs the suite
    assert test.startswith('pip install -e ".[test]" ') and "whl/cpu" in test
    assert test.endswith("&& python -m pytest -n 2")
    # the prerequisites outside pip are named
    assert "libsimde-dev" in text


def test_ci_runs_the_readme_test_command():
    """.ci/run ends with README's test command (after installing the same extras)."""
    ci = [ln for ln in read(".ci/run").splitlines() if ln.strip() and not ln.startswith("#")]
    assert ci[-1] == "python -m pytest -n 2"
    assert any('pip install -q -e ".[test]"' in ln for ln in ci)


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


def package_folders() -> list[str]:
    """Every folder of the repository a reader must find in the layouts: the top-level
    folders (hidden ones, build products and the virtual environment aside) and every
    Python package below them (a folder with an ``__init__.py``), as ``path/``."""
    skip = {"build", "dist", "__pycache__"}
    out = []
    for name in sorted(os.listdir(ROOT)):
        path = os.path.join(ROOT, name)
        if not os.path.isdir(path) or name.startswith(".") or name in skip \
                or name.endswith(".egg-info"):
            continue
        out.append(f"{name}/")
        for dirpath, dirnames, files in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
            if dirpath != path and "__init__.py" in files:
                out.append(os.path.relpath(dirpath, ROOT).replace(os.sep, "/") + "/")
    return out


def test_package_folders_are_found():
    folders = package_folders()
    for f in ("polycomp/", "graph/", "scheduler/chain/", "scheduler/npu/", "scheduler/tuning/",
              "hw/npu/", "scripts/", "benchmarks/", "tests/"):
        assert f in folders, f


def test_readme_layout_lists_every_package_folder():
    text = read("README.md")
    layout = re.search(r"## Repository layout\n.*?```\n(.*?)```", text, re.S)
    assert layout, "README.md has no layout block under '## Repository layout'"
    listed = [ln.split()[0] for ln in layout.group(1).splitlines() if ln and not ln[0].isspace()]
    missing = [f for f in package_folders() if f not in listed]
    assert not missing, f"README.md's layout has no line for {missing}"
    assert len(listed) == len(set(listed)), "a folder has two lines in README.md's layout"


def test_architecture_table_lists_every_package_folder():
    text = read("docs/architecture.md")
    rows = re.findall(r"^\| `([^`]+/)` \|", text, re.M)
    missing = [f for f in package_folders() if f not in rows]
    assert not missing, f"docs/architecture.md's layout table has no row for {missing}"
    assert len(rows) == len(set(rows)), "a folder has two rows in docs/architecture.md"
