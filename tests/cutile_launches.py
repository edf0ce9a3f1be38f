"""Which kernel objects a cuTile launcher module launches (a test's view of the hints they were compiled with),
and with which grid and arguments."""


def record_launches(monkeypatch, module) -> list:
    """Every kernel ``module`` launches from now on (its ``launch`` wrapped for the test), in order."""
    launched = []
    real_launch = module.launch

    def record(grid, kernel, *args, **options):
        launched.append(kernel)
        return real_launch(grid, kernel, *args, **options)

    monkeypatch.setattr(module, "launch", record)
    return launched


def record_launch_calls(monkeypatch, module) -> list:
    """Every launch ``module`` makes from now on, in order, as (kernel, grid, positional arguments)."""
    calls = []
    real_launch = module.launch

    def record(grid, kernel, *args, **options):
        calls.append((kernel, grid, args))
        return real_launch(grid, kernel, *args, **options)

    monkeypatch.setattr(module, "launch", record)
    return calls
