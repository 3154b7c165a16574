from verltop.cli import run

run()
