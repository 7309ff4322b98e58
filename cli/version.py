"""The version of the distribution, defined here once: pyproject.toml reads it
(``[tool.setuptools.dynamic]``), every ``nmt-*`` command prints it (``--version``), the
gateway sends it (the ``X-NMT-Version`` header, the OpenAPI document's ``info.version``) and
nmt-serve sends it with ListModels (the ``nmt-version`` initial metadata).

Change it here and record the change in CHANGELOG.md (a test holds the two together)."""

__version__ = "0.1.0"
VERSION_HEADER = "X-NMT-Version"  # on every answer of the gateway
VERSION_METADATA = "nmt-version"  # initial metadata of nmt-serve's ListModels (gRPC keys are lower case)
