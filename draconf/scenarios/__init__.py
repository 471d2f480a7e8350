"""What each scenario of the suite declares and checks, one module per feature family.

``suites/`` holds the tests, thin: a fixture applies the scenario's manifests (a
:class:`~draconf.workload.Start`), each test asks one check of a module here.  A module here
may be imported by any suite, unit test or harness (``tests/matrix``) without loading a test
module, so nothing here is collected by pytest.
"""
