"""The workflow commands as a person types them: follow-ups given with `task add --then` and
in `task import` lines, `task tree` (text and JSON), `task cancel` down a chain or `--only`,
and bad follow-ups refused with exit 2, naming what was wrong, changing nothing."""

from __future__ import annotations

import json

import pytest

from tests.fleet import Fleet


@pytest.fixture
def fleet(tmp_path):
    node = Fleet(tmp_path, """
        [daemon]
        data_dir = "data"
        [roles.coder]
        command = ["true"]
        [roles.qa]
        command = ["true"]
    """)
    yield node
    node.close()


def test_follow_ups_from_the_command_line_and_an_import(fleet):
    added = json.loads(fleet.cli(
        "task", "add", "Fix login", "--role", "coder", "--json",
        "--then", '{"role": "qa", "title": "QA: {parent_title}", "on": "complete"}').stdout)
    assert added["chain"] == [{"role": "qa", "title": "QA: {parent_title}", "on": "complete"}]
    lines = fleet.root / "tasks.jsonl"
    lines.write_text(json.dumps({"role": "coder", "title": "Fix signup", "chain": [
        {"role": "qa", "title": "QA {parent_id}", "when": "contains:TESTS", "delay": "1m"}]})
                     + "\n")
    fleet.cli("task", "import", str(lines))
    [imported] = [t for t in fleet.store.list_tasks() if t.title == "Fix signup"]
    assert json.loads(imported.chain)[0]["when"] == "contains:TESTS"
    for bad, message in [
        ('{"role": "nobody", "title": "x"}', "chain[0].role 'nobody' is not defined"),
        ('{"role": "qa"}', "chain[0].title is required"),
        ('{"role": "qa", "title": "{parent_nam}"}', "{parent_nam} is not a template field"),
        ('{"role": "qa", "title": "x", "when": "sometimes"}', "expected 'contains:TEXT'"),
        ('{"role": "qa", "title": "x", "delay": "soon"}', "chain[0].delay = 'soon'"),
        ("not json", "--then 'not json': not a JSON object"),
    ]:
        result = fleet.cli("task", "add", "t", "--role", "coder", "--then", bad, check=False)
        assert result.returncode == 2 and message in result.stderr, (bad, result.stderr)
    bad_line = json.dumps({"role": "coder", "title": "y", "chain": [{"role": "qa"}]})
    lines.write_text(json.dumps({"role": "coder", "title": "fine"}) + "\n" + bad_line + "\n")
    result = fleet.cli("task", "import", str(lines), check=False)
    assert result.returncode == 2 and "line 2: chain[0].title is required" in result.stderr
    assert len(fleet.store.list_tasks()) == 2


def test_tree_and_cancel_down_a_chain(fleet):
    root = fleet.add("root", role="coder")
    child = fleet.add("child", role="qa", parent_id=root.id)
    grandchild = fleet.add("grandchild", role="coder", parent_id=child.id)
    other = fleet.add("other", role="qa", parent_id=root.id)
    shown = json.loads(fleet.cli("task", "tree", str(grandchild.id), "--json").stdout)
    assert shown["id"] == root.id
    assert [c["id"] for c in shown["children"]] == [child.id, other.id]
    assert shown["children"][0]["children"][0]["depth"] == 2
    text = fleet.cli("task", "tree", str(child.id)).stdout
    assert f"├─ {child.id} qa ready: child ◀" in text
    assert f"│  └─ {grandchild.id} coder ready: grandchild" in text
    only = fleet.cli("task", "cancel", str(other.id), "--only")
    assert only.stdout.strip() == f"task {other.id} is now cancelled"
    result = fleet.cli("task", "cancel", str(root.id), "--reason", "not needed")
    assert result.stdout.splitlines() == [
        f"task {root.id} is now cancelled",
        f"task {child.id} is now cancelled (below task {root.id})",
        f"task {grandchild.id} is now cancelled (below task {root.id})"]
    again = fleet.cli("task", "cancel", str(root.id), check=False)
    assert again.returncode == 1
