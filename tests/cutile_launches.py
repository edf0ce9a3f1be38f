"""Which kernel objects a cuTile launcher module launches: a test's view of the hints they were compiled with."""


def record_launches(monkeypatch, module) -> list:
    """Every kernel ``module`` launches from now on (its ``launch`` wrapped for the test), in order."""
    launched = []
    real_launch = module.launch

    def record(grid, kernel, *args, **options):
        launched.append(kernel)
        return real_launch(grid, kernel, *args, **options)

    monkeypatch.setattr(module, "launch", record)
    return launched
