"""The host's machinery: processes, the shim and fork server, git worktrees, the sandbox and
cgroups, service units, disks, logs, and sending to the outside world."""
