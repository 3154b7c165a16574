"""verltop's user-facing tools, run as modules from the repository root (``python -m scripts.bench``):
bench, soak, fake_dashboard and gpu_check. They may import ``tests`` (the synthetic
dashboard, analysis helpers) because ``-m`` puts the repository root on ``sys.path``."""
