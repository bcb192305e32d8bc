from pathlib import Path

import pytest

from taskherd.config import load_config, parse_config
from taskherd.model.settings import ConfigError


def parse(raw):
    return parse_config(raw, base_dir=Path("/srv/fleet"))


def test_defaults_and_relative_database_path():
    config = parse({"daemon": {"database": "q.db", "timezone": "Europe/Paris"}})
    assert config.daemon.database == "/srv/fleet/q.db"
    assert config.daemon.max_concurrent == 3 and config.daemon.durability == "full"
    assert config.role("unknown").max_attempts == 3


def test_a_relative_workdir_is_relative_to_the_config_file():
    config = parse({"roles": {"a": {"command": ["x"], "workdir": "work/a"},
                              "b": {"command": ["x"], "workdir": "/abs"}}})
    # Not to the daemon's working directory, nor its fork server's ("/").
    assert config.roles["a"].workdir == "/srv/fleet/work/a"
    assert config.roles["b"].workdir == "/abs"


def test_a_roles_input_patterns_are_kept():
    config = parse({"roles": {"qa": {"command": ["x"], "input_patterns": [r"^Deploy now\?"]}}})
    assert config.roles["qa"].input_patterns == (r"^Deploy now\?",)


def test_role_with_durations():
    config = parse({"roles": {"coder": {"command": ["agent", "{task_id}"], "backoff": "30s",
                                        "backoff_cap": "1h", "idle_timeout": "5m",
                                        "stagger": "2s"}}})
    coder = config.roles["coder"]
    assert (coder.backoff, coder.backoff_cap, coder.idle_timeout, coder.stagger) == (
        30, 3600, 300, 2)
    assert coder.retry_policy.backoff(2) == 60
    assert coder.command == ("agent", "{task_id}")


def test_cluster_keys_tags_scopes_and_node_timeout():
    config = parse({
        "daemon": {"tags": ["gpu", "mac"], "node_timeout": "20s"},
        "pools": {"gpu": {"capacity": 1, "scope": "node"}, "deploys": 2},
        "roles": {"trainer": {"command": ["x"], "pool": "gpu", "nodes": ["gpu"]},
                  "deployer": {"command": ["x"], "max_concurrent": 1, "scope": "node"},
                  "ios": {"command": ["x"], "nodes": ["mac", "arm"]}},
    })
    assert config.daemon.tags == ("gpu", "mac") and config.daemon.node_timeout == 20
    assert config.pools == {"gpu": 1, "deploys": 2} and config.pool_scopes == {"gpu": "node"}
    assert config.roles["deployer"].scope == "node" and config.roles["trainer"].scope == "cluster"
    assert config.runnable_roles == ["trainer", "deployer"]  # ios also needs an arm node
    assert parse({}).daemon.node_timeout == 15 and parse({}).daemon.tags == ()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"daemon": {"max_concurent": 3}}, "unknown key 'daemon.max_concurent'"),
        ({"daemon": {"durability": "fast"}},
         "daemon.durability = 'fast': expected one of full, normal"),
        ({"daemon": {"max_concurrent": 0}}, "daemon.max_concurrent = 0"),
        ({"daemon": {"timezone": "Mars/Olympus"}}, "daemon.timezone = 'Mars/Olympus'"),
        ({"daemon": {"lease": "soon"}}, "daemon.lease = 'soon': expected a duration"),
        ({"roles": {"coder": {}}}, "roles.coder.command is required"),
        ({"roles": {"coder": {"command": "claude -p"}}}, "roles.coder.command = 'claude -p'"),
        ({"roles": {"coder": {"command": ["x"], "pool": "gpu"}}}, "roles.coder.pool = 'gpu'"),
        ({"roles": {"any": {"command": ["x"]}}}, "'any' is reserved"),
        ({"pools": {"gpu": 0}}, "pools.gpu = 0"),
        ({"jobs": [{"name": "daily"}]}, "daemon.timezone is required when jobs are defined"),
        ({"roles": {"qa": {"command": ["x"], "review": "yes"}}}, "roles.qa.review = 'yes'"),
        ({"roles": {"qa": {"command": ["x"], "on_input": "ask"}}},
         "roles.qa.on_input = 'ask': expected one of kill, wait"),
        ({"roles": {"qa": {"command": ["x"], "on_input": "wait"}}},
         "roles.qa.on_input = 'wait' needs runtime 'command' with prompt_via = 'file' or 'arg'"),
        ({"roles": {"qa": {"runtime": "claude", "on_input": "wait"}}},
         "roles.qa.on_input = 'wait' needs runtime 'command'"),
        ({"roles": {"qa": {"command": ["x"], "input_patterns": ["(unclosed"]}}},
         "roles.qa.input_patterns = '(unclosed': expected a regular expression"),
        ({"roles": {"qa": {"command": ["x"], "loop_repeats": 1}}}, "roles.qa.loop_repeats = 1"),
        ({"roles": {"qa": {"command": ["x"], "loop_window": "soon"}}},
         "roles.qa.loop_window = 'soon': expected a duration"),
        ({"roles": {"qa": {"command": ["x"], "scope": "host"}}},
         "roles.qa.scope = 'host': expected one of cluster, node"),
        ({"roles": {"qa": {"command": ["x"], "nodes": "gpu"}}}, "roles.qa.nodes = 'gpu'"),
        ({"daemon": {"tags": ["gpu", "has space"]}}, "daemon.tags = ['gpu', 'has space']"),
        ({"daemon": {"node_timeout": "0s"}}, "daemon.node_timeout = '0s': expected a duration"),
        ({"pools": {"gpu": {"capacity": 2, "scope": "rack"}}},
         "pools.gpu.scope = 'rack': expected one of cluster, node"),
        ({"pools": {"gpu": {"scope": "node"}}}, "pools.gpu = {'scope': 'node'}: a capacity"),
        ({"pools": {"gpu": {"capacity": 1, "size": 2}}}, "unknown key 'pools.gpu.size'"),
    ],
)
def test_bad_config_names_the_key_and_value(raw, message):
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    assert message in str(caught.value)


def test_invalid_toml_names_the_file(tmp_path):
    bad = tmp_path / "taskherd.toml"
    bad.write_text("[daemon\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_missing_explicit_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_a_config_file_keeps_its_data_beside_it(tmp_path, monkeypatch):
    monkeypatch.delenv("TASKHERD_HOME", raising=False)
    for fleet in ("a", "b"):
        (tmp_path / fleet).mkdir()
        (tmp_path / fleet / "taskherd.toml").write_text('[daemon]\ndatabase = "q.db"\n')
    first = load_config(tmp_path / "a" / "taskherd.toml").daemon
    second = load_config(tmp_path / "b" / "taskherd.toml").daemon
    assert first.data_dir == tmp_path / "a" / ".taskherd" and first.log_dir != second.log_dir


def test_every_config_problem_is_reported_at_once_with_near_misses(tmp_path):
    raw = {
        "daemon": {"max_concurent": 3, "lease": "soon"},
        "roles": {
            "coder": {"command": ["agent"], "retries": 3, "timeout": -1},
            "writer": {"runtime": "claude", "command": ["x"], "prompt_via": "arg"},
            "bot": {"runtime": "chat", "base_url": "http://gw", "model": "m", "binary": "c"},
        },
        "pools": {"gpu": 0},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, base_dir=tmp_path)
    lines = str(caught.value).splitlines()
    assert lines[0] == "8 problems:"
    text = "\n".join(lines)
    for expected in [
        "unknown key 'daemon.max_concurent' = 3 (did you mean 'max_concurrent'?)",
        "daemon.lease = 'soon': expected a duration",
        "unknown key 'roles.coder.retries' = 3 (did you mean 'max_attempts'?)",
        "roles.coder.timeout = -1: expected a duration",
        ("roles.writer.command = ['x']: a key of runtime 'command', not of this role's runtime "
         "'claude'"),
        "roles.writer.prompt_via = 'arg': a key of runtime 'command'",
        "roles.bot.binary = 'c': a key of runtime 'claude' and 'codex', "
        "not of this role's runtime 'chat'",
        "pools.gpu = 0",
    ]:
        assert expected in text, text


def test_a_key_every_runtime_shares_is_accepted_on_each(tmp_path):
    for runtime, extra in [("command", {"command": ["a"]}), ("claude", {}),
                           ("chat", {"base_url": "http://gw", "model": "m"})]:
        raw = {"roles": {"r": {"runtime": runtime, "timeout": "5m", "max_attempts": 2, **extra}}}
        assert parse_config(raw, base_dir=tmp_path).roles["r"].max_attempts == 2


def test_budgets_prices_and_codex_keys_are_read_and_every_mistake_named(tmp_path):
    config = parse_config({
        "prices": {"gpt-5-codex": {"input": 1.25, "output": 10, "cached_input": 0.125}},
        "budgets": {"daily_usd": 20, "monthly_tokens": 10_000_000, "unknown_run_usd": 0.5},
        "roles": {"coder": {"runtime": "codex", "model": "gpt-5-codex", "sandbox": "read-only",
                            "budget": {"daily_usd": 5}}},
    }, base_dir=tmp_path)
    coder = config.role("coder")
    assert coder.price.cost(1_000_000, 0) == 1.25 and coder.sandbox == "read-only"
    assert config.budgets.roles["coder"].daily_usd == 5.0
    assert config.budgets.fleet.monthly_tokens == 10_000_000
    with pytest.raises(ConfigError) as caught:
        parse_config({
            "prices": {"m": {"input": -1}},
            "budgets": {"daily_usd": "ten", "unknown_run": 1},
            "roles": {"coder": {"runtime": "codex", "sandbox": "yolo",
                                "budget": {"dayly_usd": 1}},
                      "bot": {"runtime": "chat", "base_url": "http://x", "model": "m",
                              "sandbox": "read-only"}},
        }, base_dir=tmp_path)
    text = str(caught.value)
    for expected in ["prices.m.input = -1", "prices.m: output required",
                     "budgets.daily_usd = 'ten'", "'budgets.unknown_run'",
                     "did you mean 'unknown_run_usd'", "roles.coder.sandbox = 'yolo'",
                     "'roles.coder.budget.dayly_usd'", "did you mean 'daily_usd'",
                     "roles.bot.sandbox = 'read-only': a key of runtime 'codex'"]:
        assert expected in text, text


def test_a_roles_log_cap_reads_sizes_and_refuses_what_is_not_one():
    config = parse({"roles": {"a": {"command": ["x"], "max_log_bytes": "512KiB"},
                              "b": {"command": ["x"], "max_log_bytes": 1 << 20}}})
    assert config.role("a").max_log_bytes == 512 << 10
    assert config.role("b").max_log_bytes == 1 << 20
    assert config.role("c").max_log_bytes == 64 << 20  # the default
    for bad in ("lots", "1KiB", 0, True, "-5MiB"):
        with pytest.raises(ConfigError, match=r"roles\.a\.max_log_bytes = .*expected a size"):
            parse({"roles": {"a": {"command": ["x"], "max_log_bytes": bad}}})
