"""The C extension (src/ledgermq/_recordc.c, _record_decode.c, _index_put.c; _recordc.h between them); everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds, and ledgermq runs
its pure-Python path (ledgermq/speedups.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ledgermq._recordc",
            ["src/ledgermq/_recordc.c", "src/ledgermq/_record_decode.c", "src/ledgermq/_index_put.c"],
            depends=["src/ledgermq/_recordc.h"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"],
        )
    ]
)
