"""The daemon's background services. Each has frozen settings with named defaults and
`run_once(now) -> counts`; `runner.run_service` is the one loop that runs them all."""
