"""The abstract Store declares every store method a caller outside the store uses, so code
written against the interface (and mypy reading it) sees the whole store, and a store for
another database cannot leave one out."""

import ast
from pathlib import Path

import taskherd
from taskherd.store.base import Store
from taskherd.store.postgres import PostgresStore
from taskherd.store.sql_store import SQLStore
from taskherd.store.sqlite import SQLiteStore

PACKAGE = Path(taskherd.__file__).parent


def _called_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {node.func.attr for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}


def test_every_store_method_called_outside_the_store_is_on_the_interface():
    public = {name for name in dir(SQLStore)
              if not name.startswith("_") and callable(getattr(SQLStore, name))}
    called = set().union(*(_called_names(path) for path in PACKAGE.rglob("*.py")
                           if PACKAGE / "store" not in path.parents))
    missing = sorted((public & called) - set(dir(Store)))
    assert missing == [], f"SQLStore methods used outside the store but not on Store: {missing}"


def test_both_stores_implement_the_whole_interface():
    assert not PostgresStore.__abstractmethods__
    assert not SQLiteStore.__abstractmethods__
