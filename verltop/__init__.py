"""verltop: see what a verl RL training job on Ray is doing, live, and why it hangs."""

__version__ = "0.1.0"
