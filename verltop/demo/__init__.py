"""``verltop demo``: a small PPO-shaped verl job on a local Ray cluster (CPU, gloo) that hangs on purpose.

Use :func:`verltop.demo.cluster.start_demo`; importing this package imports neither ray nor torch.
"""
