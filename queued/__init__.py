"""queued: a prefork daemon that runs Sidekiq-format jobs from Redis and never loses one."""
__version__ = "0.1.0"
