"""Controller machinery that knows nothing about training jobs: queue, expectations, runner."""
