"""taskherd: a durable queue, scheduler and process supervisor for fleets of AI agents."""
__version__ = "0.1.0"
