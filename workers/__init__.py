"""dramatiq actors: turn and ready timers, trusteeship, the deadline sweeper."""
