from tests.fixtures.simulator_fixture import frontier_sim  # noqa: F401
