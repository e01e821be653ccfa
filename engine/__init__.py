"""火拼雙扣 match engine: the pure rules, the event-sourced match, the stores."""

__version__ = "0.1.0"
