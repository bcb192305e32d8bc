"""The settings: what taskherd.toml says, as frozen records that every floor reads (config
parses the file into them; the rules, the machinery and the services take them as given).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from taskherd.model import Priority
from taskherd.model.record import Record

# A task's follow-ups, and how deep chains go.

DEFAULT_MAX_DEPTH = 10


DEFAULT_MAX_REVIEWS = 3


class FollowUp(Record):
    """A child a task creates when it settles, described by templates."""

    role: str
    title: str
    prompt: str = ""
    priority: Priority = Priority.P2
    pool: str | None = None
    on: str = "success"
    when: str | None = None
    delay: float = 0.0

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "title": self.title, "on": self.on}
        if self.prompt:
            data["prompt"] = self.prompt
        if self.priority is not Priority.P2:
            data["priority"] = f"P{int(self.priority)}"
        for key in ("pool", "when"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.delay:
            data["delay"] = self.delay
        return data


# Spend limits.

FLEET = "fleet"  # the scope of [budgets]' own limits
BUDGET_COOLDOWN = "budget:"  # a budget pause is a cooldown named budget:ROLE or budget:fleet

# Where a role's or a pool's limit counts: over every node, or on each node by itself.
CLUSTER, NODE = "cluster", "node"
SCOPES = (CLUSTER, NODE)


class Limits(Record):
    """One scope's limits; None: no limit of that kind."""

    daily_usd: float | None = None
    monthly_usd: float | None = None
    daily_tokens: int | None = None
    monthly_tokens: int | None = None

    def __bool__(self) -> bool:
        return any(value is not None for value in (self.daily_usd, self.monthly_usd,
                                                   self.daily_tokens, self.monthly_tokens))


class Budgets(Record):
    """The config's [budgets] (the fleet's limits, the estimates) and each role's `budget`."""

    fleet: Limits = field(default_factory=Limits)
    roles: Mapping[str, Limits] = field(default_factory=dict)
    unknown_run_usd: float | None = None  # what a run of unknown cost counts as
    run_estimate_usd: float | None = None  # what a run is expected to cost, before any is priced

    def __bool__(self) -> bool:
        return bool(self.fleet) or any(self.roles.values())

    def scopes(self) -> dict[str, Limits]:
        """Every scope with a limit: roles by name, and `fleet`."""
        scopes = {name: limits for name, limits in self.roles.items() if limits}
        if self.fleet:
            scopes[FLEET] = self.fleet
        return scopes


# Quality gates.

DEFAULT_TIMEOUT = 10 * 60.0


class Gate(Record):
    name: str
    argv: tuple[str, ...]
    workdir: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    # Silence (no output, no CPU) that ends it as stalled; None: the role's idle_timeout.
    idle_timeout: float | None = None


# Model prices.

PER = 1_000_000


class Price(Record):
    input: float  # USD per million input tokens (not read from the cache)
    output: float  # USD per million output tokens (reasoning included)
    cached_input: float | None = None  # USD per million cached input tokens; None: as input

    def cost(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> float:
        """The cost of one run; `input_tokens` counts the cached ones too, as the OpenAI
        Responses API does."""
        cached = min(max(cached_input_tokens, 0), max(input_tokens, 0))
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return ((input_tokens - cached) * self.input + cached * cached_rate
                + output_tokens * self.output) / PER


# Retries.

DEFAULT_BACKOFF_BASE = 15.0  # seconds before the first retry


DEFAULT_BACKOFF_CAP = 15 * 60.0


# Rescues of leases and rate limits are not strikes, but each is capped so nothing loops
# forever: the seeds' WQ-719 retried 319 times against a rate limit.
DEFAULT_MAX_RESCUES = 10


DEFAULT_MAX_RATE_LIMITS = 5


RATE_LIMIT_WINDOW = 24 * 3600.0


DEFAULT_RATE_LIMIT_COOLDOWN = 3600.0


class RetryPolicy(Record):
    """How a role's failed runs are retried. Defaults: 15 s × 2^(n−1), capped at 15 min."""

    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    max_rescues: int = DEFAULT_MAX_RESCUES
    max_rate_limits: int = DEFAULT_MAX_RATE_LIMITS
    # The span in which rate-limited runs count towards max_rate_limits.
    rate_limit_window: float = RATE_LIMIT_WINDOW
    rate_limit_cooldown: float = DEFAULT_RATE_LIMIT_COOLDOWN
    # Whether a rescue may settle a run as done on its agent's word alone: not for a role
    # with gates, whose checks only the node that ran the agent can run.
    rescue_trusts_done: bool = True

    def backoff(self, strikes: int) -> float:
        """Seconds to wait before the retry that follows the `strikes`-th strike."""
        exponent = max(strikes - 1, 0)
        # Cap the exponent too: 2**2000 would overflow a float long before the cap applies.
        return min(self.backoff_base * 2 ** min(exponent, 64), self.backoff_cap)


# A role's sandbox and caps.

MODES = ("off", "bwrap")


NETWORKS = ("host", "none", "loopback")


class IsolationSettings(Record):
    """A role's ``[roles.NAME.isolation]``: its sandbox and the caps on its process tree."""

    mode: str = "off"  # "bwrap": the agent runs in a sandbox; "off": as the daemon's user
    network: str = "host"  # "none" / "loopback": a network namespace of its own
    writable: tuple[Path, ...] = ()  # more paths the agent may write (must exist)
    hidden: tuple[Path, ...] = ()  # more paths it must not see, besides HIDDEN
    memory: int | None = None  # bytes: the whole tree is killed past this (cgroups)
    pids: int | None = None  # processes and threads at once: a fork bomb stops here
    cpu: float | None = None  # cores

    @property
    def confined(self) -> bool:
        return self.mode == "bwrap"


# A role's git worktrees.

MERGE_MODES = ("merge-commit", "fast-forward")


class GitSettings(Record):
    """A role's `[roles.NAME.git]`: each task in a worktree of `repo` on its own branch."""

    repo: Path
    base: str = "main"
    merge: str = "merge-commit"  # or "fast-forward" (when the base has not moved on)
    pool: str = "git-main"  # merges through one pool happen one at a time
    keep: float = 7 * 86400.0  # how long a dead or cancelled task's worktree is kept
    # Git working for a task (making its worktree, a leftover commit, a merge), its hooks
    # included, running longer is stopped.
    merge_timeout: float = 300.0
    hooks: bool = False  # whether the repository's hooks run for the leftover commits


# The config file's tables.

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


DEFAULT_MAX_LOG_BYTES = 64 << 20


S3_SCHEME = "s3://"


class ConfigError(ValueError):
    """A configuration problem, worded for the person who wrote the file."""


class DaemonConfig(Record):
    """[daemon]: this node, its database and data dir, and the limits of its runs."""

    data_dir: Path
    database: str  # a SQLite file path, or a postgres:// URL for several nodes
    durability: str = "full"
    max_concurrent: int = 3
    timezone: str | None = None  # IANA name; required once jobs exist (never silently UTC)
    node: str = field(default_factory=socket.gethostname)
    lease: float = 60.0
    poll_interval: float = 1.0  # fallback poll; the dispatcher mostly wakes on events
    on_shutdown: str = "detach"
    shutdown_grace: float = 30.0
    path: str = DEFAULT_PATH  # PATH agents run with, unless the role names one
    retention: float = 30 * 86400.0
    max_prompt_bytes: int = 1 << 20  # a larger prompt is refused where it enters the queue
    max_depth: int = DEFAULT_MAX_DEPTH  # a chain stops here: no child deeper than this
    # A node silent this long is declared down by any other node, and its tasks rescued.
    node_timeout: float = 15.0
    tags: tuple[str, ...] = ()  # what this node offers (a GPU, a Mac): roles may require them
    # The longest a rate limit pauses a runtime, whatever reset its text names: longer than
    # the 5-hour windows of Claude's and Codex's plans, so their resets are kept as said; a
    # reset misread (an epoch in 2030) costs a few hours, and a probe finds a limit still on.
    max_rate_limit_pause: float = 6 * 3600.0
    # Below this much free space where the node writes (data dir, logs, SQLite database), it
    # starts nothing new: a full disk is the machine's fault, never an agent's strike.
    min_free_disk: int = 512 << 20
    # How long an agent's `taskherd done|heartbeat|…` waits for a daemon that is away (a
    # restart) before failing; 0: not at all.
    agent_report_wait: float = 60.0

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"


class RoleConfig(Record):
    """[roles.NAME]: how a role's agents run, are watched, retried and checked."""

    name: str
    runtime: str = "command"
    command: tuple[str, ...] = ()  # argv template for the command runtime
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    path: str | None = None
    prompt_via: str = "stdin"
    max_concurrent: int | None = None
    stagger: float = 0.0
    pool: str | None = None
    scope: str = "cluster"  # "node": max_concurrent and stagger count each node's runs alone
    nodes: tuple[str, ...] = ()  # tags a node must have to run this role
    max_attempts: int = 3
    backoff: float = DEFAULT_BACKOFF_BASE
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    timeout: float = 30 * 60.0
    idle_timeout: float = 10 * 60.0
    spawn_timeout: float = 30.0  # claimed but never spawned: rescued after this, no strike
    # Idle this long with a question as its last output: the agent waits for input.
    input_timeout: float = 60.0
    on_input: str = "kill"  # kill: end it as needs_input; wait: keep it for `task answer`
    input_patterns: tuple[str, ...] = ()  # the role's own prompts, besides the known ones
    loop_repeats: int = 20  # the same output block (or tool call) this often in a row: looping
    loop_window: float = 120.0  # ...within this span
    review: bool = False
    require_marker: bool = False
    wake_on_urgent: bool = False  # an urgent message adds a task when none is ready
    capabilities: tuple[str, ...] = ()  # what the role's agents can do (the agents registry)
    memory: bool = False  # a short-term memory file, in the prompt and TASKHERD_MEMORY_FILE
    deliver_to: tuple[str, ...] = ()  # delivery aliases its tasks tell when they settle
    deliver_on: tuple[str, ...] = ()  # which settles (the role key is `on`); () = defaults
    description: str | None = None
    budget: Limits = field(default_factory=Limits)  # its spend per day and month
    git: GitSettings | None = None  # each task in its own git worktree and branch
    # Its agents' sandbox and caps; None (no table): unconfined, as the daemon's user.
    isolation: IsolationSettings | None = None
    # claude runtime
    binary: str | None = None
    agent: str | None = None
    model: str | None = None
    allowed_tools: tuple[str, ...] = ()
    permission_mode: str | None = None
    mcp_config: str | None = None
    args: tuple[str, ...] = ()
    resume: bool = False  # a retry continues the previous attempt's session (--resume)
    mcp: bool = False  # `taskherd mcp` in --mcp-config: the run's tools over MCP
    # workflows
    chain: tuple[FollowUp, ...] = ()  # follow-ups every task of the role creates
    review_by: str | None = None  # a role that reviews each successful task
    max_reviews: int = DEFAULT_MAX_REVIEWS  # rejections before a person decides
    gates: tuple[Gate, ...] = ()  # checks run after success, before the task completes
    # codex runtime (binary, model, args and resume as for claude)
    sandbox: str = "workspace-write"
    approval: str = "never"  # `codex exec` runs unattended: nobody is there to approve
    # chat runtime
    base_url: str | None = None
    api_key_env: str | None = None
    rate_limit_patterns: tuple[str, ...] = ()
    rate_limit_cooldown: float = 3600.0
    # A run's log keeps the head and the tail of this many bytes of output, and a line saying
    # how much was cut between them: one chatty agent must not fill the disk.
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
    # Not role keys: the daemon's timezone, so a limit's "resets 3am" is read in it, and
    # the price of the role's model from [prices], for runtimes that report tokens only.
    timezone: str | None = None
    price: Price | None = None

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            backoff_base=self.backoff,
            backoff_cap=self.backoff_cap,
            rate_limit_cooldown=self.rate_limit_cooldown,
            rescue_trusts_done=not self.gates,
        )


DEFAULT_PLANNER_PROMPT = ("The queue is running low. Look at the state of the work below and "
                          "add the next tasks with `taskherd task add`.")


class MonitorConfig(Record):
    """[monitor]: the planner that keeps the queue fed, and what an agent may add."""

    planner: str | None = None  # the planner's role; None: no planner is started
    low_water: int = 5  # fewer ready tasks than this, and the planner is due
    planner_every: float = 4 * 3600.0  # at most one planner task per this long
    prompt: str = DEFAULT_PLANNER_PROMPT
    max_spawn: int = 20  # tasks one run may add with `taskherd task add`


class ApiConfig(Record):
    """The HTTP API, the dashboard and /metrics (`[api]`); off unless `listen` is set."""

    listen: str | None = None  # "HOST:PORT"; the starter config sets 127.0.0.1:8765
    tls_cert: str | None = None
    tls_key: str | None = None
    # Serving on an address other machines reach without TLS sends tokens in the clear:
    # refused unless written here on purpose.
    allow_plain_http: bool = False
    max_body_bytes: int = 4 << 20  # a request body larger than this is refused (413)
    # Proxies whose X-Forwarded-For is believed (ipaddress networks): behind one, every
    # client would otherwise share its address when wrong tokens are counted.
    trusted_proxies: tuple[Any, ...] = ()

    @property
    def host(self) -> str:
        assert self.listen is not None
        return split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        assert self.listen is not None
        return split_listen(self.listen)[1]


class BackupConfig(Record):
    """Where and how often the daemon backs up its database (`[backup]`)."""

    target: str | None = None  # a local folder, or s3://bucket/prefix; None: no backups
    endpoint_url: str | None = None  # an S3-compatible server (MinIO …); None: AWS itself
    region: str | None = None
    snapshot_every: float = 300.0
    snapshot_keep_for: float = 86400.0
    snapshot_keep_count: int = 288  # 24 hours of 5-minute snapshots
    rollup_every: float = 3600.0
    rollup_keep_for: float = 7 * 86400.0
    rollup_keep_count: int = 168  # 7 days of hourly rollups
    compression_level: int = 3  # gzip 1 (fast) … 9 (small); 0 stores the pages as they are
    # An S3 server that stops answering fails the attempt within about twice read_timeout
    # (one retry), not minutes later; the service then retries with its own backoff.
    connect_timeout: float = 10.0
    read_timeout: float = 60.0

    @property
    def is_s3(self) -> bool:
        return self.target is not None and self.target.startswith(S3_SCHEME)


class MessagesConfig(Record):
    """[messages]: how much of its inbox a starting run gets in its prompt."""

    inbox_messages: int = 20  # the rest wait for the role's next run
    inbox_bytes: int = 16_000


class EmbeddingsConfig(Record):
    """An OpenAI-compatible embeddings endpoint: long-term memory ranks by meaning too."""

    base_url: str  # e.g. http://127.0.0.1:8080/v1 (POST {base_url}/embeddings)
    model: str
    api_key_env: str | None = None  # the daemon's variable holding the key, never the key


class MemoryConfig(Record):
    """[memory]: the short-term file's cap and the optional embeddings endpoint."""

    short_term_lines: int = 80
    embeddings: EmbeddingsConfig | None = None

    def file_of(self, data_dir: Path, role: str) -> Path:
        return data_dir / "memory" / f"{role}.md"


class DeliveryConfig(Record):
    """[delivery]: how the outbox is sent to delivery aliases."""

    timeout: float = 10.0  # of one send
    max_attempts: int = 8  # then the delivery is kept as failed
    backoff: float = 5.0  # before the second attempt, doubling after each failure
    backoff_cap: float = 600.0


class Config(Record):
    """The whole of taskherd.toml, each table a record (defaults for a table not written)."""

    daemon: DaemonConfig
    roles: Mapping[str, RoleConfig] = field(default_factory=dict)
    pools: Mapping[str, int] = field(default_factory=dict)  # capacity of each pool
    jobs: tuple[Mapping[str, Any], ...] = ()  # validated by the scheduler's job parser
    source: Path | None = None  # the file it came from, if any
    # [api], [backup], [messages], [memory], [delivery] and [monitor] as the file has them, by
    # name; one it leaves out reads as its defaults (the properties below), made only then:
    # most commands read none of them, and a record is made at its first use (record.py),
    # half a millisecond each.
    tables: Mapping[str, Any] = field(default_factory=dict)

    prices: Mapping[str, Price] = field(default_factory=dict)  # model → USD per Mtok
    budgets: Budgets = field(default_factory=Budgets)
    pool_scopes: Mapping[str, str] = field(default_factory=dict)  # a pool's, when not cluster

    @property
    def api(self) -> ApiConfig:
        return self.tables.get("api") or ApiConfig()

    @property
    def backup(self) -> BackupConfig:
        return self.tables.get("backup") or BackupConfig()

    @property
    def messages(self) -> MessagesConfig:
        return self.tables.get("messages") or MessagesConfig()

    @property
    def memory(self) -> MemoryConfig:
        return self.tables.get("memory") or MemoryConfig()

    @property
    def delivery(self) -> DeliveryConfig:
        return self.tables.get("delivery") or DeliveryConfig()

    @property
    def monitor(self) -> MonitorConfig:
        return self.tables.get("monitor") or MonitorConfig()

    def role(self, name: str) -> RoleConfig:
        """The role's config; a role the file does not define gets the defaults."""
        return self.roles.get(name) or RoleConfig(name=name, timezone=self.daemon.timezone)

    def policy_for(self, role: str) -> RetryPolicy:
        return self.role(role).retry_policy

    def runs_here(self, role: RoleConfig) -> bool:
        """Whether this node has every tag the role requires."""
        return set(role.nodes) <= set(self.daemon.tags)

    @property
    def runnable_roles(self) -> list[str]:
        """The roles this node defines and may run (it has their tags)."""
        return [name for name, role in self.roles.items() if self.runs_here(role)]

    def check_role(self, name: str) -> None:
        """Refuse a task role the config does not know (when it defines any roles)."""
        if self.roles and name != "any" and name not in self.roles:
            known = ", ".join(sorted(self.roles))
            raise ConfigError(f"role {name!r} is not defined in the config (defined: {known}, any)")


def split_listen(listen: str) -> tuple[str, int]:
    """'HOST:PORT' (or '[v6]:PORT') as (host, port); ValueError when it is not one."""
    host, sep, port = listen.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(listen)
    return host, int(port)

